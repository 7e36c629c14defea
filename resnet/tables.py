"""Regenerate the error tables from a results file: ``python -m resnet.tables``.

``python -m resnet.tables results/eval.jsonl --out results/tables [--schemes symmetric asymmetric]
[--delta asymmetric symmetric] [--reference] [--wandb PROJECT]`` writes ``tensornets.md/.csv/.png``
and ``cross.md/.csv/.png`` into ``--out`` and prints both Markdown tables.

Input: the evaluator's JSON lines (:mod:`resnet.report.rows`), one evaluation each. How rows
become tables (latest wins, protocols never merge): :mod:`resnet.report.tables`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from .report.charts import plot_cross, plot_scheme_table
from .report.rows import read_rows
from .report.tables import (
    cross_markdown,
    cross_matrices,
    cross_records,
    log_to_wandb,
    scheme_records,
    scheme_table,
    to_markdown,
    write_csv,
)


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
    plot_scheme_table(table, out / "tensornets.png")
    matrices = cross_matrices(rows, weights_sources=cross_sources)
    cross_md = cross_markdown(matrices)
    (out / "cross.md").write_text(cross_md + "\n")
    write_csv(out / "cross.csv", *cross_records(matrices))
    plot_cross(matrices, out / "cross.png")
    return f"## Error (%) per padding scheme\n\n{tensornets_md}\n\n## Trained with x evaluated with\n\n{cross_md}\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="JSON lines written by the evaluator")
    parser.add_argument("--out", type=Path, default=Path("results/tables"))
    parser.add_argument("--schemes", nargs="+", help="columns, in order (default: every scheme in the results)")
    parser.add_argument("--delta", nargs=2, metavar=("A", "B"), help="delta columns A - B (default: 2nd - 1st)")
    parser.add_argument("--reference", action="store_true", help="add TensorNets' published numbers")
    parser.add_argument("--wandb", metavar="PROJECT", help="also log both tables to a W&B run (WANDB_MODE applies)")
    args = parser.parse_args(argv)
    try:
        print(write_tables(args.results, args.out, args.schemes, args.delta, args.reference))
    except (FileNotFoundError, ValueError) as err:  # no file, a corrupt line, a scheme with no results
        sys.exit(f"error: {err}")
    if args.wandb:
        import wandb

        rows = read_rows(args.results)
        run = wandb.init(project=args.wandb, job_type="tables", dir=str(args.out))
        log_to_wandb(run, scheme_table(rows, args.schemes, args.delta), cross_matrices(rows), args.reference)
        run.finish()


if __name__ == "__main__":
    main()
