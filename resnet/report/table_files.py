"""The tables of a results file written as files (:func:`write_tables`): ``tensornets`` (error per padding
scheme) and ``cross`` (trained x evaluated), each as Markdown, CSV and a chart (:mod:`.charts`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from .charts import cross_figure, save_figure, scheme_figure
from .rows import read_rows
from .tables import cross_markdown, cross_matrices, cross_records, scheme_records, scheme_table, to_markdown, write_csv


def write_tables(
    results: str | Path,
    out: str | Path,
    schemes: Sequence[str] | None = None,
    delta: Sequence[str] | None = None,
    reference: bool = False,
    missing: Sequence[Mapping] = (),
    cross_sources: Collection[str] | None = ("checkpoint",),
) -> str:
    """Write tensornets.md/.csv/.png and cross.md/.csv/.png into ``out``; return the Markdown.

    ``missing``: rows that could not be evaluated (:func:`resnet.report.tables.scheme_records`);
    ``cross_sources``: the weights sources the cross matrix takes (None: all)."""
    if not Path(results).is_file():
        raise FileNotFoundError(f"no results file at {results}; eval.py writes one (results_file=...)")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = read_rows(results)
    table = scheme_table(rows, schemes, delta)
    columns, records = scheme_records(table, reference, missing)
    tensornets_md = to_markdown(columns, records)
    (out / "tensornets.md").write_text(tensornets_md + "\n")
    write_csv(out / "tensornets.csv", columns, records)
    save_figure(scheme_figure(table), out / "tensornets.png")
    matrices = cross_matrices(rows, weights_sources=cross_sources)
    cross_md = cross_markdown(matrices)
    (out / "cross.md").write_text(cross_md + "\n")
    write_csv(out / "cross.csv", *cross_records(matrices))
    save_figure(cross_figure(matrices), out / "cross.png")
    return f"## Error (%) per padding scheme\n\n{tensornets_md}\n\n## Trained with x evaluated with\n\n{cross_md}\n"
