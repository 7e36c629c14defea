"""Charts of the error tables (:mod:`resnet.report.tables`): grouped bars per scheme, and
one annotated heatmap per trained-with x evaluated-with matrix."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from pathlib import Path

from .rows import run_labels
from .tables import METRIC_TITLES, CrossMatrix, ModelRow, SchemeTable


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


VALUE = "{:.2f}"  # every error (%) a chart writes, and its deltas (signed): the cross matrix's format


def chart_rows(table: SchemeTable) -> tuple[list[tuple[str, ModelRow]], str]:
    """The rows of ``table`` as the bar chart shows them, in the cross matrix's order (by arch,
    data and protocol, then trained scheme: :func:`resnet.report.tables.cross_matrices`), each
    with a short label (``arch, trained <scheme>``, then the run where two rows would read the
    same: :func:`resnet.report.rows.run_labels`), and what every row shares (dataset, protocol),
    for the title."""
    from .tables import _arch_order, scheme_order

    schemes = {s: i for i, s in enumerate(scheme_order(r.trained_padding for r in table.rows))}
    shared = {(r.dataset, r.protocol) for r in table.rows}
    common = f"{table.rows[0].dataset}, {table.rows[0].protocol}" if len(shared) == 1 else ""
    keys = [f"{r.arch}, trained {r.trained_padding}" + ("" if common else f", {r.dataset}") for r in table.rows]
    labelled = zip(run_labels(keys, [r.weights for r in table.rows]), table.rows)
    return sorted(labelled, key=lambda lr: (_arch_order(lr[1].arch), lr[1].dataset, lr[1].protocol,
                                            schemes[lr[1].trained_padding], lr[0])), common  # fmt: skip


def plot_scheme_table(table: SchemeTable, path: Path) -> None:
    """Horizontal grouped bars of top-1 error per model and scheme; a second panel with the delta."""
    plt = pyplot()
    fig = scheme_figure(table)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def scheme_figure(table: SchemeTable):
    """The figure of :func:`plot_scheme_table` (matplotlib's ``Figure``), rows as :func:`chart_rows`."""
    plt = pyplot()
    labelled, common = chart_rows(table)
    rows = [row for _, row in labelled]
    n, k = len(rows), len(table.schemes)
    panels = 2 if table.delta else 1
    fig, axes = plt.subplots(
        1, panels, figsize=(5 * panels + 4, 1.6 + 0.3 * n * k), squeeze=False, layout="constrained"
    )
    ax = axes[0, 0]
    height = 0.8 / k
    colours = plt.get_cmap("tab10")
    for j, scheme in enumerate(table.schemes):  # one bar slot per scheme; missing results leave it empty
        present = [(i, row.error(scheme, "top1_err")) for i, row in enumerate(rows)]
        present = [(i + (j - (k - 1) / 2) * height, v) for i, v in present if v is not None]
        bars = ax.barh(
            [y for y, _ in present], [v for _, v in present], height, label=_wrap(scheme, 28), color=colours(j)
        )
        ax.bar_label(bars, [VALUE.format(v) for _, v in present], padding=2, fontsize=7)
    ax.set_yticks(range(n), [label for label, _ in labelled], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("top-1 error (%)")
    ax.set_title("Top-1 error per padding scheme" + (f"\n{textwrap.fill(common, 60)}" if common else ""), fontsize=9)
    for boundary in range(n - 1):
        ax.axhline(boundary + 0.5, color="0.85", linewidth=0.8)
    ax.legend(
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
        borderaxespad=0,
        fontsize=8,
        frameon=False,
        title="evaluated with",
        title_fontsize=8,
    )  # beside the bars: never on a bar or a value
    ax.margins(x=0.15)
    if table.delta:
        ax = axes[0, 1]
        deltas = [(i, table.delta_of(row, "top1_err")) for i, row in enumerate(rows)]
        deltas = [(i, d) for i, d in deltas if d is not None]
        colour = ["tab:red" if d > 0 else "tab:green" for _, d in deltas]
        bars = ax.barh([i for i, _ in deltas], [d for _, d in deltas], 0.6, color=colour)
        ax.bar_label(bars, ["+" * (d >= 0) + VALUE.format(d) for _, d in deltas], padding=2, fontsize=7)
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_ylim(axes[0, 0].get_ylim())  # rows line up with the left panel
        ax.set_yticks(range(n), [""] * n)
        ax.set_xlabel("Δ top-1 error (points)")
        ax.set_title(f"{table.delta[0]} − {table.delta[1]}\n(> 0: {table.delta[0]} is worse)", fontsize=9)
        ax.margins(x=0.25)
    return fig


def plot_cross(matrices: Sequence[CrossMatrix], path: Path) -> None:
    """:func:`cross_figure`, saved to ``path``."""
    plt = pyplot()
    fig = cross_figure(matrices)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cross_figure(matrices: Sequence[CrossMatrix]):
    """Per matrix, one annotated heatmap per metric (top-1, top-5) side by side, each on its own
    colour scale; matrices stacked. The matched (diagonal) cells outlined in red; each value in
    black or white, whichever reads on its cell's colour (:func:`readable_on`); a cell not
    evaluated says "not run", one whose row has no top-5 (older rows) "not recorded"."""
    plt = pyplot()
    import numpy as np

    count = max(len(matrices), 1)
    panels = max((len(m.metrics) for m in matrices), default=1)
    columns = max((len(m.evaluated) for m in matrices), default=1)
    width = 2.2 + panels * (1.0 + 1.25 * columns)
    heights = [2.0 + 0.15 * max(_wrap(e).count("\n") + 1 for e in m.evaluated) + 0.55 * len(m.trained)
               for m in matrices] or [2.0]  # fmt: skip
    fig, axes = plt.subplots(
        count,
        panels,
        figsize=(width, sum(heights)),
        squeeze=False,
        layout="constrained",
        gridspec_kw={"height_ratios": heights},
    )
    if not matrices:
        axes[0, 0].text(0.5, 0.5, "no checkpoint results", ha="center", va="center")
        axes[0, 0].axis("off")
    cmap = plt.get_cmap("viridis_r").with_extremes(bad="white")
    for row, m in zip(axes, matrices):
        for ax, metric in zip(row, m.metrics):
            _heatmap(ax, m, metric, cmap, np, plt)
            ax.set_yticks(range(len(m.trained)), [_wrap(t.replace(" (", "\n(")) for t in m.trained] if ax is row[0]
                          else [], fontsize=8)  # fmt: skip
            if ax is row[0]:
                ax.set_ylabel("trained with")
        for ax in row[len(m.metrics) :]:
            ax.axis("off")
    return fig


def _heatmap(ax, m: CrossMatrix, metric: str, cmap, np, plt) -> None:
    grid = np.array([[np.nan if m.cell(t, e, metric) is None else m.cell(t, e, metric) for e in m.evaluated]
                     for t in m.trained])  # fmt: skip
    image = ax.imshow(grid, cmap=cmap, aspect="auto")
    for (i, j), value in np.ndenumerate(grid):
        t, e = m.trained[i], m.evaluated[j]
        if np.isnan(value):
            ax.text(
                j,
                i,
                "not recorded" if m.evaluated_under(t, e) else "not run",
                ha="center",
                va="center",
                color="0.35",
                fontsize=8,
            )
        else:
            ax.text(
                j,
                i,
                VALUE.format(value),
                ha="center",
                va="center",
                fontsize=9,
                color=readable_on(image.cmap(image.norm(value))),
            )
        if m.matched(t, e):
            ax.add_patch(
                plt.Rectangle((j - 0.46, i - 0.46), 0.92, 0.92, fill=False, edgecolor="red", linewidth=2.5)
            )  # inset: neighbouring outlines stay apart
    ax.set_xticks(range(len(m.evaluated)), [_wrap(e) for e in m.evaluated], fontsize=7)
    ax.set_xlabel("evaluated with")
    name = METRIC_TITLES[metric].lower()
    title = f"{m.arch}: {name} error (%), red = matched scheme"
    ax.set_title(title + "\n" + textwrap.fill(f"{m.dataset}, {m.protocol}", 14 * len(m.evaluated) + 16), fontsize=9)
    if not np.isnan(grid).all():
        ax.figure.colorbar(image, ax=ax, shrink=0.9)


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


def plot_regrid(table: Sequence[dict], path: Path) -> None:
    """:func:`regrid_figure`, saved to ``path``."""
    plt = pyplot()
    fig = regrid_figure(table)
    fig.savefig(path, dpi=120)
    plt.close(fig)


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
        ax.annotate(
            VALUE.format(error),
            (max(error, native), y),
            xytext=(4, 0),
            textcoords="offset points",
            ha="left",
            va="center",
            fontsize=8,
        )
    ax.set_yticks(range(len(table)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("top-1 error (%)")
    source, target = table[0]["evaluated with"], table[-1]["evaluated with"]
    ax.set_title(f"{source}-trained weights under {target}:\nbefore and after re-gridding", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0, frameon=False)
    ax.margins(x=0.12)
    return fig
