"""Charts of the error tables (:mod:`resnet.report.tables`): grouped bars per scheme, and
one annotated heatmap per trained-with x evaluated-with matrix."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from pathlib import Path

from .rows import run_labels
from .tables import METRIC_TITLES, CrossMatrix, ModelRow, SchemeTable, own_grid


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path) -> None:
    """``fig`` written to ``path`` (120 dpi), then closed."""
    fig.savefig(path, dpi=120)
    pyplot().close(fig)


VALUE = "{:.2f}"  # every error (%) a chart writes, and its deltas (signed): the cross matrix's format
BAR_METRICS = ("top1_err", "top5_err")  # tensornets.png's panels, each with its Δ
NOTE = {"fontsize": 8, "color": "0.3"}  # what a chart cannot show, said under it
MISSING = {"fontsize": 6, "color": "0.45", "va": "center"}  # "not run" where a bar or a Δ would be
# a Δ bar's colour: is the model's own grid the better of the two? (own_grid: a grid counts both presets)
DELTA_COLOURS = {"own grid better": "tab:green", "own grid worse": "tab:red", "no difference": "0.75",
                 "trained on neither grid": "0.6", "trained on both grids": "0.35"}  # fmt: skip
# the schemes' bars: tab10 without the Δ colours (green, red) and grey, so that no colour means two things
SCHEME_COLOURS = tuple(f"tab:{name}" for name in ("blue", "orange", "purple", "brown", "cyan", "pink", "olive"))


def chart_rows(table: SchemeTable) -> tuple[list[tuple[str, ModelRow]], str]:
    """The rows of ``table`` as the bar chart shows them, in the cross matrix's order (by arch,
    data and protocol, then trained scheme: :func:`resnet.report.tables.cross_matrices`), each
    with a short label (``arch, trained <scheme>``, then the run where two rows would read the
    same: :func:`resnet.report.rows.run_labels`, and the protocol where one run was measured
    under two), and what every row shares (dataset, protocol), for the title."""
    from .tables import _arch_order, label_order, scheme_order

    schemes = {s: i for i, s in enumerate(scheme_order(r.trained_padding for r in table.rows))}
    shared = {(r.dataset, r.protocol) for r in table.rows}
    common = f"{table.rows[0].dataset}, {table.rows[0].protocol}" if len(shared) == 1 else ""
    keys = [f"{r.arch}, trained {r.trained_padding}" + ("" if common else f", {r.dataset}") for r in table.rows]
    labels = run_labels(keys, [r.weights for r in table.rows])
    twice = {label for label in labels if labels.count(label) > 1}  # one run measured two ways: say how
    labels = [f"{label}, {r.protocol}" if label in twice else label for label, r in zip(labels, table.rows)]
    labelled = zip(labels, table.rows)
    return sorted(labelled, key=lambda lr: (_arch_order(lr[1].arch), lr[1].dataset, lr[1].protocol,
                                            schemes[lr[1].trained_padding], label_order(lr[0]))), common  # fmt: skip


def scheme_figure(table: SchemeTable):
    """Horizontal grouped bars of top-1 and of top-5 error per model and scheme, then a panel per
    metric with the delta, each bar coloured by whether the model's own grid is the better one
    (:data:`DELTA_COLOURS`); rows as :func:`chart_rows`, labels only on the left. A panel with
    nothing to show is not drawn: a note under the chart says what is missing (no model under
    both schemes of the delta, no top-5 recorded), and an empty slot says ``not run``."""
    plt = pyplot()
    labelled, common = chart_rows(table)
    if not labelled:
        fig = plt.figure(figsize=(5, 1.5), layout="constrained")
        fig.text(0.5, 0.5, "no results under these schemes", ha="center", va="center")
        return fig
    rows = [row for _, row in labelled]
    recorded = [m for m in BAR_METRICS if any(row.error(s, m) is not None for row in rows for s in table.schemes)]
    metrics = recorded or ["top1_err"]
    deltas = [m for m in metrics if any(table.delta_of(row, m) is not None for row in rows)]
    labels = [_wrap(label, 44) for label, _ in labelled]
    legend = [_wrap(scheme, 28) for scheme in table.schemes]
    n, k = len(rows), len(table.schemes)
    row_height = max(0.2 * k + 0.12, 0.15 * max(label.count("\n") + 1 for label in labels))
    left = 0.065 * max(len(line) for label in labels for line in label.split("\n")) + 0.5
    beside = 0.06 * max(len(line) for label in legend for line in label.split("\n")) + 0.6
    widths = [3.2] * len(metrics) + [2.2] * len(deltas)
    fig, axes = plt.subplots(1, len(widths), figsize=(left + sum(widths) + beside + 1.6 * bool(deltas),
                                                      1.9 + row_height * n), squeeze=False, layout="constrained",
                             gridspec_kw={"width_ratios": widths})  # fmt: skip
    axes = list(axes[0])
    for ax, metric in zip(axes, metrics):
        _bar_panel(ax, table, rows, metric, legend)
        _rows_axis(ax, n, labels if ax is axes[0] else None)
    beside_axes = {"loc": "upper left", "bbox_to_anchor": (1.01, 1), "borderaxespad": 0, "fontsize": 8,
                   "frameon": False, "title_fontsize": 8}  # fmt: skip
    axes[len(metrics) - 1].legend(title="evaluated with", **beside_axes)
    title = "Error (%) per padding scheme" + (f"\n{textwrap.fill(common, 90)}" if common else "")
    if deltas:
        for ax, metric in zip(axes[len(metrics) :], deltas):
            _delta_panel(ax, table, rows, metric)
        axes[-1].legend(handles=_delta_legend(table, rows, deltas, plt), title="Δ bars", **beside_axes)
        title += "\n" + _wrap(f"Δ = {table.delta[0]} − {table.delta[1]} (> 0: worse under the first)", 100)
    fig.suptitle(title, fontsize=9)
    notes = []  # what the chart cannot show, and why, in a sentence each
    if table.delta is None:
        notes.append(f"Δ needs each model under two schemes; these results have one ({', '.join(table.schemes)})")
    elif not deltas:
        a, b = table.delta
        notes.append(f"Δ ({a} − {b}) needs a model evaluated under both; none was (eval.py +padding=<scheme>)")
    if "top5_err" not in recorded:
        notes.append("top-5: not recorded in these rows (written before top-5 was)")
    if notes:
        fig.supxlabel("\n".join(textwrap.fill(note, 110) for note in notes), **NOTE)
    return fig


def _bar_panel(ax, table: SchemeTable, rows: Sequence[ModelRow], metric: str, legend: Sequence[str]) -> None:
    """A bar per scheme in each row (``legend``: the schemes as the legend names them); a slot
    without a result says why: ``not run``, or ``not recorded`` (a row from before top-5 was)."""
    k = len(table.schemes)
    height = 0.8 / k
    for j, scheme in enumerate(table.schemes):
        slots = [(i + (j - (k - 1) / 2) * height, row.error(scheme, metric), row) for i, row in enumerate(rows)]
        present = [(y, v) for y, v, _ in slots if v is not None]
        bars = ax.barh([y for y, _ in present], [v for _, v in present], height, label=legend[j],
                       color=SCHEME_COLOURS[j % len(SCHEME_COLOURS)])  # fmt: skip
        ax.bar_label(bars, [VALUE.format(v) for _, v in present], padding=2, fontsize=7)
        for y, _, row in (slot for slot in slots if slot[1] is None):
            said = "not recorded" if metric in row.errors.get(scheme, {}) else "not run"
            ax.annotate(said, (0, y), xytext=(3, 0), textcoords="offset points", **MISSING)
    ax.set_xlabel(f"{METRIC_TITLES[metric].lower()} error (%)")
    ax.set_title(f"{METRIC_TITLES[metric]} error per padding scheme", fontsize=9)
    ax.margins(x=0.15)


def _rows_axis(ax, n: int, labels: Sequence[str] | None) -> None:
    """One row of bars per model, top down, separated by light lines; the labels on the left panel only."""
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_yticks(range(n), labels if labels is not None else [""] * n, fontsize=8)
    for boundary in range(n - 1):
        ax.axhline(boundary + 0.5, color="0.85", linewidth=0.8)
    ax.xaxis.get_major_formatter().set_useOffset(False)  # never a '1e-17' beside the ticks


def _delta_colour(table: SchemeTable, row: ModelRow, delta: float) -> str:
    """Which of :data:`DELTA_COLOURS` a row's ``delta`` (``a - b``) is."""
    own = [own_grid(row.trained_padding, scheme) for scheme in table.delta]
    if all(own) or not any(own):
        return "trained on both grids" if all(own) else "trained on neither grid"
    if delta == 0:
        return "no difference"
    return "own grid better" if (delta < 0) == own[0] else "own grid worse"  # a - b < 0: a is better


def _delta_panel(ax, table: SchemeTable, rows: Sequence[ModelRow], metric: str) -> None:
    """Each row's Δ (``table.delta``), coloured by :func:`_delta_colour`; where it has none, why."""
    deltas = [(i, table.delta_of(row, metric)) for i, row in enumerate(rows)]
    present = [(i, d) for i, d in deltas if d is not None]
    colour = [DELTA_COLOURS[_delta_colour(table, rows[i], d)] for i, d in present]
    bars = ax.barh([i for i, _ in present], [d for _, d in present], 0.6, color=colour)
    ax.bar_label(bars, ["+" * (d >= 0) + VALUE.format(d) for _, d in present], padding=2, fontsize=7)
    for i, _ in (pair for pair in deltas if pair[1] is None):
        both = all(scheme in rows[i].errors for scheme in table.delta)  # evaluated under both, the metric not kept
        said = "not recorded" if both else "not under both"
        ax.annotate(said, (0, i), xytext=(3, 0), textcoords="offset points", **MISSING)
    for (i, d), c in zip(present, colour):
        if d == 0:  # a bar of no length: a tick on the zero line says the Δ is there, and 0
            ax.plot(0, i, marker="|", markersize=14, markeredgewidth=2.5, color=c)
    ax.axvline(0, color="black", linewidth=0.8)
    _rows_axis(ax, len(rows), None)
    ax.set_xlabel(f"Δ {METRIC_TITLES[metric].lower()} error (points)")
    ax.set_title(f"Δ {METRIC_TITLES[metric]}", fontsize=9)
    ax.margins(x=0.3)
    if max((abs(d) for _, d in present), default=0) < 0.05:  # every Δ (about) 0: a readable axis, not 1e-16's
        ax.set_xlim(-1, 1)


def _delta_legend(table: SchemeTable, rows: Sequence[ModelRow], metrics: Sequence[str], plt) -> list:
    """A legend entry for each Δ colour the chart uses, in :data:`DELTA_COLOURS` order."""
    used = {_delta_colour(table, row, d) for row in rows for m in metrics if (d := table.delta_of(row, m)) is not None}
    return [plt.Rectangle((0, 0), 1, 1, color=colour, label=name) for name, colour in DELTA_COLOURS.items()
            if name in used]  # fmt: skip


def cross_figure(matrices: Sequence[CrossMatrix]):
    """Per matrix, one annotated heatmap per metric (top-1, top-5) side by side, each on its own
    colour scale, under one title naming the model, data and protocol; matrices stacked. The
    matched cells (trained and evaluated with one scheme) outlined in red, said in a legend where
    there are some; each value in black or white, whichever reads on its cell's colour
    (:func:`readable_on`); a cell not evaluated says "not run", one whose row has no top-5 (older
    rows) "not recorded". A matrix of one value has no colour scale, one of one column says that
    nothing is crossed yet."""
    plt = pyplot()
    import numpy as np

    panels = max((len(m.metrics) for m in matrices), default=1)
    columns = max((len(m.evaluated) for m in matrices), default=1)
    trained = {t: _wrap(t.replace(" (", "\n("), 24) for m in matrices for t in m.trained}  # a row's label
    left = 0.065 * max((len(line) for t in trained.values() for line in t.split("\n")), default=8) + 0.8
    width = left + panels * max(2.6, 1.1 + 1.3 * columns)
    heights = [1.9 + 0.14 * max(_wrap(e).count("\n") + 1 for e in m.evaluated) + 0.25 * (len(m.evaluated) == 1)
               + sum(max(0.55, 0.16 * (trained[t].count("\n") + 1)) for t in m.trained)
               for m in matrices] or [2.0]  # fmt: skip
    fig = plt.figure(figsize=(width, sum(heights) + 0.4), layout="constrained")
    if not matrices:
        fig.text(0.5, 0.5, "no checkpoint results to cross", ha="center", va="center")
        return fig
    cmap = plt.get_cmap("viridis_r").with_extremes(bad="white")
    for sub, m in zip(fig.subfigures(len(matrices), 1, height_ratios=heights, squeeze=False)[:, 0], matrices):
        row = sub.subplots(1, panels, squeeze=False)[0]
        for ax, metric in zip(row, m.metrics):
            _heatmap(ax, m, metric, cmap, np, plt)
            ax.set_yticks(range(len(m.trained)), [trained[t] for t in m.trained] if ax is row[0] else [], fontsize=8)
            if ax is row[0]:
                ax.set_ylabel("trained with")
        for ax in row[len(m.metrics) :]:
            ax.axis("off")
        sub.suptitle(f"{m.arch}: " + textwrap.fill(f"{m.dataset}, {m.protocol}", int(width * 11)), fontsize=9)
        if len(m.evaluated) == 1:
            said = f"nothing crossed yet: each model was evaluated under {m.evaluated[0]} only"
            sub.supxlabel(_wrap(said, int(width * 11)), **NOTE)
    if any(m.matched(t, e) for m in matrices for t in m.trained for e in m.evaluated):
        outline = plt.Rectangle((0, 0), 1, 1, fill=False, edgecolor="red", linewidth=2.5,
                                label="matched: evaluated with the scheme it was trained with")  # fmt: skip
        fig.legend(handles=[outline], loc="outside lower center", fontsize=8, frameon=False)
    return fig


def _heatmap(ax, m: CrossMatrix, metric: str, cmap, np, plt) -> None:
    grid = np.array([[np.nan if m.cell(t, e, metric) is None else m.cell(t, e, metric) for e in m.evaluated]
                     for t in m.trained])  # fmt: skip
    values = grid[~np.isnan(grid)]
    if len(np.unique(values)) < 2:  # one value (or none): a colour would say nothing
        from matplotlib.colors import ListedColormap

        cmap = ListedColormap(["0.88"]).with_extremes(bad="white")
    image = ax.imshow(grid, cmap=cmap, aspect="auto")
    for (i, j), value in np.ndenumerate(grid):
        t, e = m.trained[i], m.evaluated[j]
        if np.isnan(value):
            said = "not recorded" if (t, e) in m.cells else "not run"
            ax.text(j, i, said, ha="center", va="center", color="0.35", fontsize=8)
        else:
            ax.text(j, i, VALUE.format(value), ha="center", va="center", fontsize=9,
                    color=readable_on(image.cmap(image.norm(value))))  # fmt: skip
        if m.matched(t, e):
            ax.add_patch(
                plt.Rectangle((j - 0.46, i - 0.46), 0.92, 0.92, fill=False, edgecolor="red", linewidth=2.5)
            )  # inset: neighbouring outlines stay apart
    ax.set_xticks(range(len(m.evaluated)), [_wrap(e) for e in m.evaluated], fontsize=7)
    ax.set_xlabel("evaluated with")
    ax.set_title(f"{METRIC_TITLES[metric]} error (%)", fontsize=9)
    if len(np.unique(values)) >= 2:
        bar = ax.figure.colorbar(image, ax=ax, shrink=0.9)
        bar.formatter.set_useOffset(False)
        bar.ax.tick_params(labelsize=8)


def _wrap(label: str, width: int = 16) -> str:
    """A scheme's name on lines of about ``width`` characters, broken after ``+ [ ,`` (never
    inside a name): ``custom(stem_conv=same, ...)``, ``symmetric+blur(block_conv)`` fit a column."""
    lines: list[str] = []
    for part in label.split("\n"):
        current = ""
        for token in re.split(r"(?<=[+\[,])\s*", part):
            joined = current + (" " if current.endswith(",") else "") + token
            if current and len(joined) > width:
                lines.append(current)
                current = token
            else:
                current = joined
        lines.append(current)
    return "\n".join(lines)


def luminance(rgb: Sequence[float]) -> float:
    """WCAG's relative luminance of an sRGB colour (components in [0, 1])."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb[:3]]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: Sequence[float], b: Sequence[float]) -> float:
    """WCAG's contrast ratio of two colours: 1 (none) to 21 (black on white)."""
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def readable_on(background: Sequence[float]) -> str:
    """Black or white, whichever contrasts more with ``background``."""
    return "black" if contrast(background, (0, 0, 0)) >= contrast(background, (1, 1, 1)) else "white"


def regrid_figure(table: Sequence[dict]):
    """The re-gridding table (``resnet-demo``) as bars of top-1 error: the weights on
    their own grid, moved to the other grid as they are, then after each method (with the images
    and seconds it used); a dashed line at the native error. Each value is written past its bar
    and past the dashed line (never on it); the legend sits beside the axes."""
    plt = pyplot()
    labels = [
        f"{row['method']}, under {row['evaluated with']}"
        + (f"\n{row['images']:,} images, {row['seconds']:.0f} s" if row["images"] else "")
        for row in table
    ]
    errors = [row["top-1 err %"] for row in table]
    colours = ["tab:green", "tab:red"] + ["tab:blue"] * (len(table) - 2)
    fig, ax = plt.subplots(figsize=(8.5, 1.2 + 0.55 * len(table)), layout="constrained")
    ax.barh(range(len(table)), errors, 0.6, color=colours[: len(table)])
    native = errors[0]
    ax.axvline(native, color="tab:green", linestyle="--", linewidth=1, label="native grid")
    for y, error in enumerate(errors):
        ax.annotate(VALUE.format(error), (max(error, native), y), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)  # fmt: skip
    ax.set_yticks(range(len(table)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("top-1 error (%)")
    source, target = table[0]["evaluated with"], table[-1]["evaluated with"]
    ax.set_title(f"{source}-trained weights under {target}:\nbefore and after re-gridding", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0, frameon=False)
    ax.margins(x=0.12)
    return fig
