"""TensorNets-style error tables and the trained-with x evaluated-with matrix, from result rows.

Rules, so that no number is silently merged with another:

* **Latest wins.** Rows that repeat the same evaluation (same weights, scheme, crops and
  protocol) are re-runs: the one with the latest ``date`` is kept (on equal dates, the
  later line of the file). Weights are one file however its path was typed
  (:func:`resnet.report.rows.weights_name`).
* **Dataset and protocol separate.** The test set (``imagenet``, ``imagenet_v2``,
  ``imagenet_real`` ...: a column of its own) and the protocol (input size, resize, crop,
  interpolation, preprocessing, number of images) are part of every table row's label,
  so results measured differently never share a row, a delta or a matrix.
* A scheme is its name (:attr:`resnet.padding.Padding.name`), which says the sites where it
  departs from its nearest preset (``tf_same[stem_pool=symmetric]``), so two per-site schemes
  never merge. It stands next to that preset, as a blurred one (``symmetric+blur(block_conv)``) does.
* 10-crop Top-5 is the ``top5_err`` of the row with ``crops=10``, same protocol.

Output: Markdown, CSV and ``wandb.Table``; the charts are :mod:`resnet.report.charts`.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..archs import ARCHS
from ..grid import grid_members
from ..padding import PRESETS
from .console import images_cell
from .published import TENSORNETS, tensornets_reference
from .rows import latest_rows, protocol_label, run_labels, scheme_label, weights_label

METRICS = ("top1_err", "top5_err", "top5_err_10crop")  # the three columns of a scheme
METRIC_TITLES = {"top1_err": "Top-1", "top5_err": "Top-5", "top5_err_10crop": "10-crop Top-5"}
MODEL_COLUMNS = ("model", "weights", "trained with", "dataset", "protocol")
UNREADABLE_COLUMN = "unreadable images"  # where a row's errors were computed on fewer images than its set has
MARKED = "_marked"  # a record's columns to mark with a † in Markdown (the CSV and W&B take the named columns only)


def scheme_order(labels: Iterable[str]) -> list[str]:
    """Presets in PRESETS order, each followed by the schemes named after it (blurred, per-site);
    then the rest (grids) by name."""
    presets = list(PRESETS)

    def key(label: str) -> tuple[int, str]:
        base = label.split("+", 1)[0].split("[", 1)[0]
        return (presets.index(base) if base in presets else len(presets), label)

    return sorted(set(labels), key=key)


def _arch_order(arch: str) -> tuple[int, str]:
    archs = list(ARCHS)
    return (archs.index(arch) if arch in archs else len(archs), arch)


def label_order(label: str) -> list:
    """A run label's sort key that reads its numbers as numbers: ``seed 2`` before ``seed 10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", label)]


def own_grid(trained: str, scheme: str) -> bool:
    """Whether weights trained under ``trained`` run on their own grid under ``scheme``: the same
    scheme, or one of a grid's presets (``grid[symmetric,asymmetric]``). The cross matrix's
    matched cells, the bar chart's Δ colours."""
    return trained == scheme or scheme in grid_members(trained)


@dataclass
class ModelRow:
    """One table row: one set of weights on one dataset under one protocol; errors[scheme][metric] in %."""

    arch: str
    weights: str
    weights_source: str
    trained_padding: str
    dataset: str
    protocol: str
    errors: dict[str, dict[str, float]] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)  # scheme -> "38 of 40: 2 unreadable", where some were

    def error(self, scheme: str, metric: str) -> float | None:
        return self.errors.get(scheme, {}).get(metric)


@dataclass
class SchemeTable:
    """Rows = models, columns = Top-1 / Top-5 / 10-crop Top-5 per scheme, plus ``delta``."""

    schemes: list[str]
    rows: list[ModelRow]
    delta: tuple[str, str] | None = None  # (a, b): the columns show a - b

    def delta_of(self, row: ModelRow, metric: str) -> float | None:
        if self.delta is None:
            return None
        a, b = (row.error(s, metric) for s in self.delta)
        return None if a is None or b is None else round(a - b, 6)  # inputs have <= 6 decimals


def scheme_table(
    rows: Iterable[Mapping], schemes: Sequence[str] | None = None, delta: Sequence[str] | None = None
) -> SchemeTable:
    """Build the table from result rows (deduplicated here: latest wins).

    ``schemes``: which columns, in order (default: every scheme present, presets first).
    ``delta``: (a, b) for ``a - b`` columns; default the second preset minus the first (the
    second scheme minus the first where fewer than two are presets).
    """
    rows = latest_rows(rows)
    present = scheme_order(scheme_label(r) for r in rows)
    schemes = list(schemes) if schemes else present
    unknown = sorted(set(schemes) - set(present))
    if unknown:
        raise ValueError(f"no results for scheme(s) {', '.join(unknown)}; the results have {', '.join(present)}")
    presets = [s for s in schemes if s in PRESETS]
    if delta is None and len(schemes) >= 2:
        delta = (presets[1], presets[0]) if len(presets) >= 2 else (schemes[1], schemes[0])
    if delta is not None and (len(delta) != 2 or not set(delta) <= set(schemes)):
        raise ValueError(f"delta must name two of the table's schemes ({', '.join(schemes)}), got {list(delta)}")
    table: dict[tuple, ModelRow] = {}
    for r in rows:
        scheme = scheme_label(r)
        if scheme not in schemes:
            continue
        model = (r["arch"], weights_label(r), r["weights_source"], r["trained_padding"])
        key = (*model, str(r["dataset"]), protocol_label(r))
        model_row = table.setdefault(key, ModelRow(*key))
        metrics = model_row.errors.setdefault(scheme, {})
        if r.get("skipped_images"):  # computed on fewer images than the set has: marked, never silent
            model_row.unreadable[scheme] = images_read(r)
        if int(r["crops"]) == 10:
            metrics["top5_err_10crop"] = _error(r, "top5_err")
        else:
            metrics.update(top1_err=_error(r, "top1_err"), top5_err=_error(r, "top5_err"))
    ordered = sorted(table.values(), key=lambda m: (_arch_order(m.arch), m.weights, m.dataset, m.protocol))
    return SchemeTable(schemes, ordered, tuple(delta) if delta else None)


def scheme_records(
    table: SchemeTable, reference: bool = False, missing: Sequence[Mapping] = ()
) -> tuple[list[str], list[dict]]:
    """The table as flat columns and one dict per row (the form CSV, Markdown and W&B take).

    ``missing``: models that could not be evaluated (``arch``, ``weights``, ``trained_padding``,
    ``dataset``, ``protocol``, ``fix``: the path or flag that fills the row); each becomes a row
    with empty errors and its fix in a ``missing`` column, never a dropped row."""
    columns = list(MODEL_COLUMNS)
    columns += [f"{s} {METRIC_TITLES[m]}" for s in table.schemes for m in METRICS]
    if table.delta:
        columns += [f"Δ {METRIC_TITLES[m]} ({table.delta[0]} − {table.delta[1]})" for m in METRICS]
    ref_columns = [f"TensorNets {METRIC_TITLES[m]}" for m in METRICS] + ["TensorNets padding"] if reference else []
    columns += ref_columns
    if any(row.unreadable for row in table.rows):
        columns.append(UNREADABLE_COLUMN)
    if missing:
        columns.append("missing")

    def published(arch: str) -> list:
        ref = tensornets_reference(arch)
        if ref is None:
            return [None] * len(ref_columns)
        return [getattr(ref, m) for m in METRICS] + [f"{ref.padding_name} @{ref.input_size}"]

    records = []
    for row in table.rows:
        values: list = [row.arch, row.weights, row.trained_padding, row.dataset, row.protocol]
        values += [row.error(s, m) for s in table.schemes for m in METRICS]
        if table.delta:
            values += [table.delta_of(row, m) for m in METRICS]
        if reference:
            values += published(row.arch)
        record = dict(zip(columns, values))
        if row.unreadable:
            record[UNREADABLE_COLUMN] = "; ".join(f"{s}: {text}" for s, text in row.unreadable.items())
            record[MARKED] = {f"{s} {METRIC_TITLES[m]}" for s in row.unreadable for m in METRICS}
        records.append(record)
    for m in missing:
        values = (m["arch"], weights_label(m), m["trained_padding"], m["dataset"], m.get("protocol"))
        record = dict(zip(MODEL_COLUMNS, values), missing=m["fix"])
        if reference:
            record.update(zip(ref_columns, published(m["arch"])))
        records.append(record)
    return columns, records


def reference_note(table: SchemeTable) -> str | None:
    """Why ``--reference`` added no published number to ``table`` (one line), or None when a row has some."""
    if any(tensornets_reference(row.arch) is not None for row in table.rows):
        return None
    archs = sorted({row.arch for row in table.rows}, key=_arch_order)
    return (
        f"--reference added nothing: TensorNets published ImageNet numbers for {', '.join(TENSORNETS)} only, "
        f"and these results are of {', '.join(archs) or 'no model'}"
    )


def to_markdown(
    columns: Sequence[str], records: Sequence[Mapping], bold: Collection[tuple[int, str]] = (), drop_empty: bool = True
) -> str:
    """A GitHub Markdown table; errors to 3 decimals as TensorNets prints them, deltas signed,
    missing cells as '–'. ``bold``: (row index, column) cells to emphasise (where they hold a value). ``drop_empty``:
    leave out columns with no value in any row (the CSV keeps them). A record's :data:`MARKED` columns
    get a † (computed on fewer images than the set has; the table says how many)."""
    if drop_empty:
        columns = [c for c in columns if any(r.get(c) is not None for r in records)]

    def cell(i: int, column: str) -> str:
        value = records[i].get(column)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            text = "–"
        elif isinstance(value, float):
            text = f"{value:+.3f}" if column.startswith("Δ") else f"{value:.3f}"
        else:
            text = str(value).replace("|", "\\|")
        if text != "–" and column in records[i].get(MARKED, ()):
            text += " †"
        return f"**{text}**" if (i, column) in bold and text != "–" else text  # a missing cell stays a dash

    numeric = [not any(isinstance(r.get(c), str) for r in records) for c in columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    lines += ["| " + " | ".join(cell(i, c) for c in columns) + " |" for i in range(len(records))]
    return "\n".join(lines)


def write_csv(path: Path, columns: Sequence[str], records: Iterable[Mapping]) -> None:
    """Plain CSV, numbers at full precision, missing cells empty."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows({c: ("" if r.get(c) is None else r[c]) for c in columns} for r in records)


CROSS_METRICS = ("top1_err", "top5_err")  # what the cross matrix shows, each as a matrix of its own


@dataclass
class CrossMatrix:
    """Top-1 and top-5 error (``metrics``) of weights trained under each row's scheme, evaluated
    under each column's scheme; one matrix per (arch, dataset, protocol)."""

    arch: str
    dataset: str
    protocol: str
    trained: list[str]  # row labels: trained_padding, plus the run where one scheme has several (run_labels)
    evaluated: list[str]  # column labels: schemes
    cells: dict[tuple[str, str], dict[str, float | None]]  # (row label, scheme) -> {metric: error in %}
    trained_scheme: dict[str, str]  # row label -> the scheme its weights were trained with
    metrics: tuple[str, ...] = CROSS_METRICS
    weights: dict[str, str] = field(default_factory=dict)  # row label -> its weights (weights_label)
    unreadable: dict[tuple[str, str], str] = field(default_factory=dict)  # a cell on fewer images: how many

    def cell(self, trained: str, evaluated: str, metric: str = "top1_err") -> float | None:
        """The error, or None: not evaluated, or (older rows' top-5) not recorded."""
        return self.cells.get((trained, evaluated), {}).get(metric)

    def matched(self, trained: str, evaluated: str) -> bool:
        """Trained and evaluated with the same scheme (the diagonal), or with one of a grid's."""
        return own_grid(self.trained_scheme[trained], evaluated)


def images_read(row: Mapping) -> str:
    """A row's images as the console says them, ``38 of 40: 2 unreadable`` (the mark's footnote)."""
    return str(images_cell(row["n_images"], row["skipped_images"]))


def _error(row: Mapping, metric: str) -> float | None:
    """A row's error in %, None where it has none (rows from before top-5 was recorded)."""
    value = row.get(metric)
    return None if value is None else float(value)


def cross_matrices(
    rows: Iterable[Mapping],
    metrics: Sequence[str] = CROSS_METRICS,
    weights_sources: Collection[str] | None = ("checkpoint",),
) -> list[CrossMatrix]:
    """Matrices from single-crop rows of the given ``weights_sources`` (None: all sources).

    Several weights trained under the same scheme (seeds, recipes, the runs of a sweep) get a
    row each, labelled ``scheme (run)`` (:func:`resnet.report.rows.run_labels`): they are never
    averaged.
    """
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for r in latest_rows(rows):
        if int(r["crops"]) == 1 and (weights_sources is None or r["weights_source"] in weights_sources):
            groups.setdefault((r["arch"], str(r["dataset"]), protocol_label(r)), []).append(r)
    matrices = []
    for (arch, dataset, protocol), group in sorted(groups.items(), key=lambda g: (_arch_order(g[0][0]), *g[0][1:])):
        weights = [weights_label(r) for r in group]
        labels = run_labels([r["trained_padding"] for r in group], weights)
        cells = {(label, scheme_label(r)): {m: _error(r, m) for m in metrics} for label, r in zip(labels, group)}
        unreadable = {
            (label, scheme_label(r)): images_read(r) for label, r in zip(labels, group) if r.get("skipped_images")
        }
        trained_scheme = {label: r["trained_padding"] for label, r in zip(labels, group)}
        order = {s: i for i, s in enumerate(scheme_order(trained_scheme.values()))}
        trained = sorted(trained_scheme, key=lambda t: (order[trained_scheme[t]], label_order(t)))
        evaluated = scheme_order(e for _, e in cells)
        matrices.append(CrossMatrix(arch, dataset, protocol, trained, evaluated, cells, trained_scheme, tuple(metrics),
                                    dict(zip(labels, weights)), unreadable))  # fmt: skip
    return matrices


def cross_records(matrices: Sequence[CrossMatrix]) -> tuple[list[str], list[dict]]:
    """All matrices as one wide table: arch, dataset, protocol, trained with, the weights (which
    file or hub name the row is), then a column per scheme and metric (``symmetric Top-1`` ...,
    then ``symmetric Top-5`` ...: tensornets.csv's names); a cell not evaluated, or a top-5 not
    recorded, is empty."""
    schemes = scheme_order(s for m in matrices for s in m.evaluated)
    metrics = [m for m in METRICS if any(m in matrix.metrics for matrix in matrices)] or list(CROSS_METRICS)
    scores = {f"{s} {METRIC_TITLES[k]}": (s, k) for k in metrics for s in schemes}
    records = [
        {"arch": m.arch, "dataset": m.dataset, "protocol": m.protocol, "trained with": t, "weights": m.weights.get(t),
         **{column: m.cell(t, s, k) for column, (s, k) in scores.items()}}
        for m in matrices
        for t in m.trained
    ]  # fmt: skip
    return ["arch", "dataset", "protocol", "trained with", "weights", *scores], records


def cross_markdown(matrices: Sequence[CrossMatrix]) -> str:
    """Per (arch, dataset, protocol), a Markdown matrix for each metric (top-1, then top-5), rows
    and columns in the same order; matched schemes (the diagonal) in bold; '–': not evaluated,
    or a top-5 the row does not have."""
    if not matrices:
        return "No checkpoint results to cross: evaluate checkpoints under several schemes first."
    parts = []
    for m in matrices:
        columns = ["trained with \\ evaluated with", *m.evaluated]
        diagonal = {(i, s) for i, t in enumerate(m.trained) for s in m.evaluated if m.matched(t, s)}
        tables = []
        for metric in m.metrics:
            records = [{columns[0]: t, **{s: m.cell(t, s, metric) for s in m.evaluated},
                        MARKED: {s for s in m.evaluated if (t, s) in m.unreadable}} for t in m.trained]  # fmt: skip
            tables.append(
                f"*{METRIC_TITLES[metric]} error (%)*\n\n"
                + to_markdown(columns, records, bold=diagonal, drop_empty=False)
            )
        title = f"**{m.arch}**, {m.dataset}, {m.protocol} (matched schemes in bold)"
        notes = [f"† {t} under {s}: on {text}" for (t, s), text in m.unreadable.items()]
        parts.append("\n\n".join([title, *tables, *(["\n".join(notes)] if notes else [])]))
    return "\n\n".join(parts)


def wandb_table(columns: Sequence[str], records: Sequence[Mapping]):
    """A ``wandb.Table`` of flat records (from :func:`scheme_records` or :func:`cross_records`)."""
    import wandb

    return wandb.Table(columns=list(columns), data=[[r.get(c) for c in columns] for r in records])


def log_to_wandb(
    run, table: SchemeTable, matrices: Sequence[CrossMatrix], reference: bool = False, missing: Sequence[Mapping] = ()
) -> None:
    """Log both tables to a W&B run (``wandb.init(...)``), as ``padding/tensornets`` and ``padding/cross``
    (the cross matrix's top-1 and top-5 columns: :func:`cross_records`)."""
    tensornets = wandb_table(*scheme_records(table, reference, missing))
    run.log({"padding/tensornets": tensornets, "padding/cross": wandb_table(*cross_records(matrices))})
