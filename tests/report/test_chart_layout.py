"""No chart (regrid.png, tensornets.png, cross.png) draws text over text, a value label over a
plotted line, text off the figure, or its legend away from its axes, checked with matplotlib's
extents on charts drawn from realistic rows (issue 49); nor an empty panel or an axis offset
(``1e-17``), from any results file: one model, one scheme per model, many models, per-site names,
a seed sweep (issue 54)."""

from __future__ import annotations

from itertools import combinations

import pytest

from resnet.report.charts import cross_figure, pyplot, regrid_figure, save_figure, scheme_figure
from resnet.report.tables import cross_matrices, scheme_table
from tests.helpers.figures import legends_of, texts_of
from tests.report.realistic import CASES, drawn, realistic_rows, seed_sweep


def overlap(a, b, tolerance: float = 0.5) -> bool:
    return min(a.x1, b.x1) - max(a.x0, b.x0) > tolerance and min(a.y1, b.y1) - max(a.y0, b.y0) > tolerance


def gap(a, b) -> float:
    """Distance in pixels between two boxes (0 when they touch or overlap)."""
    dx = max(a.x0 - b.x1, b.x0 - a.x1, 0)
    dy = max(a.y0 - b.y1, b.y0 - a.y1, 0)
    return (dx**2 + dy**2) ** 0.5


def layout_problems(fig) -> list[str]:
    """What a reader would trip over: text over text (the legend's box counts as text), a text
    out of the figure, a value label on a plotted line, a legend away from its axes (a figure's
    legend: from the chart's nearest text)."""
    renderer = fig.canvas.get_renderer()
    figure_box = fig.bbox
    texts = texts_of(fig)
    boxes = {id(t): t.get_window_extent(renderer) for t in texts}
    problems = []
    for t in texts:
        box = boxes[id(t)]
        if box.x0 < figure_box.x0 - 1 or box.y0 < figure_box.y0 - 1 or box.x1 > figure_box.x1 + 1 \
                or box.y1 > figure_box.y1 + 1:  # fmt: skip
            problems.append(f"{t.get_text()!r} is cut off by the figure's edge")
    for a, b in combinations(texts, 2):
        if overlap(boxes[id(a)], boxes[id(b)]):
            problems.append(f"{a.get_text()!r} overlaps {b.get_text()!r}")
    plots = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    for legend in legends_of(fig):
        box = legend.get_window_extent(renderer)
        own = {id(t) for t in [*legend.get_texts(), legend.get_title()]}
        problems += [f"the legend covers {t.get_text()!r}" for t in texts
                     if id(t) not in own and overlap(box, boxes[id(t)])]  # fmt: skip
        if legend.axes is not None:  # an axes' legend: beside its axes
            nearest = min(gap(box, ax.get_window_extent(renderer)) for ax in plots)
        else:  # a figure's (what every panel shares): right under the lowest axes or text above it
            above = [ax.get_window_extent(renderer) for ax in plots] + [boxes[id(t)] for t in texts if id(t) not in own]
            nearest = min(b.y0 - box.y1 for b in above if b.y0 >= box.y1 - 1)
        if nearest > 0.15 * fig.dpi:
            problems.append(f"the legend is {nearest:.0f} px from the nearest axes or text")
    for ax in fig.axes:
        for line in ax.lines:
            path = line.get_transform().transform_path(line.get_path())
            problems += [f"{t.get_text()!r} sits on a plotted line" for t in ax.texts
                         if t.get_visible() and path.intersects_bbox(boxes.get(id(t)) or t.get_window_extent(renderer),
                                                                     filled=False)]  # fmt: skip
    return problems


def panel_problems(fig) -> list[str]:
    """What a reviewer would send back: a panel that plots nothing (no bar of any length, no
    heatmap cell), an axis whose ticks need an offset or a factor (``1e-17``) to be read."""
    problems = []
    for ax in fig.axes:
        if not ax.axison:
            continue
        title = ax.get_title() or ax.get_xlabel() or ax.get_ylabel()
        if ax.get_label() != "<colorbar>":
            bars = [p for p in ax.patches if getattr(p, "get_width", None) and p.get_width() and p.get_height()]
            marks = [line for line in ax.lines if line.get_marker() not in (None, "None", "", " ")]  # a Δ of 0
            if not bars and not marks and not ax.get_images():
                problems.append(f"the panel {title!r} plots nothing")
        for axis in (ax.xaxis, ax.yaxis):
            if axis.offsetText.get_visible() and axis.offsetText.get_text().strip():
                problems.append(f"an axis of {title!r} reads with an offset {axis.offsetText.get_text()!r}")
    return problems


REGRID_TABLE = [  # the demo's regrid table (README), and a method that beats the native grid
    {"weights": "trained under asymmetric", "evaluated with": "asymmetric", "method": "none (native grid)",
     "images": 0, "seconds": 0.0, "top-1 err %": 7.02, "top-5 err %": 0.19},
    {"weights": "trained under asymmetric", "evaluated with": "symmetric", "method": "none",
     "images": 0, "seconds": 0.0, "top-1 err %": 18.51, "top-5 err %": 2.16},
    {"weights": "re-gridded to symmetric", "evaluated with": "symmetric", "method": "bn",
     "images": 5000, "seconds": 0.6, "top-1 err %": 13.95, "top-5 err %": 0.7},
    {"weights": "re-gridded to symmetric", "evaluated with": "symmetric", "method": "distill + features, 2 passes",
     "images": 15000, "seconds": 16.34, "top-1 err %": 7.42, "top-5 err %": 0.19},
    {"weights": "re-gridded to symmetric", "evaluated with": "symmetric", "method": "distill + features, 4 passes",
     "images": 30000, "seconds": 33.1, "top-1 err %": 6.71, "top-5 err %": 0.17},
]  # fmt: skip
FAILED_REGRID = [*REGRID_TABLE[:3], {**REGRID_TABLE[3], "method": "distill, 1 pass", "top-1 err %": 17.9}]


@pytest.mark.parametrize(
    "chart",
    ["regrid", "regrid, distillation failing", "tensornets", "tensornets, two schemes", "cross", "cross, two schemes"],
)
def test_no_chart_draws_text_over_text_or_lines_or_its_legend_away_from_its_axes(chart, monkeypatch, tmp_path):
    rows = realistic_rows()
    plot = {
        "regrid": lambda: save_figure(regrid_figure(REGRID_TABLE), tmp_path / "regrid.png"),
        "regrid, distillation failing": lambda: save_figure(regrid_figure(FAILED_REGRID), tmp_path / "regrid.png"),
        "tensornets": lambda: save_figure(scheme_figure(scheme_table(rows)), tmp_path / "tensornets.png"),
        "tensornets, two schemes": lambda: save_figure(
            scheme_figure(scheme_table(rows, ["symmetric", "asymmetric"])), tmp_path / "tensornets.png"
        ),
        "cross": lambda: save_figure(cross_figure(cross_matrices(rows)), tmp_path / "cross.png"),
        "cross, two schemes": lambda: save_figure(
            cross_figure(
                cross_matrices(
                    [
                        r
                        for r in rows
                        if r["padding_name"] in ("symmetric", "asymmetric")
                        and r["trained_padding"] in ("symmetric", "asymmetric")
                    ]
                )
            ),
            tmp_path / "c.png",
        ),
    }[chart]
    assert_readable(drawn(monkeypatch, plot))


def assert_readable(figures: list) -> None:
    try:
        assert figures
        for fig in figures:
            assert layout_problems(fig) + panel_problems(fig) == []
    finally:
        for fig in figures:
            pyplot().close(fig)


@pytest.mark.parametrize("case", [*CASES, "seed sweep"])
@pytest.mark.parametrize("chart", ["tensornets", "cross"])
def test_charts_of_any_results_file_are_readable_without_empty_panels(chart, case, monkeypatch, tmp_path):
    if case == "seed sweep":
        monkeypatch.chdir(tmp_path)  # eval.py ran there: the rows name the sweep's checkpoints relative to it
        rows = seed_sweep(tmp_path)
    else:
        rows = CASES[case]()
    plot = {
        "tensornets": lambda: save_figure(scheme_figure(scheme_table(rows)), tmp_path / "tensornets.png"),
        "cross": lambda: save_figure(cross_figure(cross_matrices(rows)), tmp_path / "cross.png"),
    }[chart]
    assert_readable(drawn(monkeypatch, plot))
