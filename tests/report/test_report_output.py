"""What the commands show people: re-gridding's progress (each pass over the sample one line in a
log when it is fast: reading, BN statistics, teacher outputs; distillation's loss), why
``--reference`` added nothing, and a legible tensornets.png (short labels, cross.png's row order,
one number format)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import torch

import resnet
from data import progress
from data.progress import Progress
from resnet.cli.regrid import run
from resnet.cli.tables import main as tables_main
from resnet.padding import PRESETS
from resnet.regrid import distill
from resnet.report.charts import chart_rows, pyplot, scheme_figure
from resnet.report.tables import cross_matrices, scheme_table
from tests.helpers.compose import compose_config

FIXTURE = Path(__file__).parents[1] / "fixtures" / "eval_rows.jsonl"
DEMO_WEIGHTS = {"symmetric": "results/demo/train_symmetric/last.pt",
                "asymmetric": "results/demo/train_asymmetric/last.pt",
                "grid[symmetric,asymmetric]": "results/demo/train_grid/last.pt"}  # fmt: skip


def demo_rows() -> list[dict]:
    """The demo's evaluations: three trained models, each under both schemes (errors made up)."""
    template = next(r for r in map(json.loads, FIXTURE.read_text().splitlines()) if r["arch"] == "resnet_tiny")
    rows = []
    for i, (trained, weights) in enumerate(DEMO_WEIGHTS.items()):
        for j, scheme in enumerate(("symmetric", "asymmetric")):
            rows.append({**template, "weights": weights, "trained_padding": trained, "padding_name": scheme,
                         "padding": PRESETS[scheme].as_dict(), "top1_err": 7 + i + 3.25 * j})  # fmt: skip
    return rows


def test_distillation_shows_its_progress(capsys, monkeypatch):
    monkeypatch.setenv("RESNET_PROGRESS", "lines")  # as in a log
    torch.manual_seed(0)
    teacher = resnet.build_model("resnet_tiny", 10, "asymmetric", in_chans=1)
    student = resnet.build_model("resnet_tiny", 10, "symmetric", in_chans=1)
    batches = [torch.randint(0, 256, (4, 1, 28, 28), dtype=torch.uint8) for _ in range(3)]
    distill(student, teacher, batches, lambda x: x.float() / 255, epochs=2)
    teacher_line, *lines = capsys.readouterr().err.splitlines()
    assert teacher_line.startswith("teacher outputs: 12/12 img (100%) | img/s ")  # one pass, one line
    assert lines[-1].startswith("distill: 6/6 steps (100%) | loss ") and "img/s" in lines[-1], lines
    assert all(line.startswith("distill: ") for line in lines) and len(lines) == 6  # a line a step: 6 < 20 steps


def test_every_pass_of_resnet_regrid_says_where_it_is_in_one_line_each(
    tiny_folder, checkpoint, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("RESNET_PROGRESS", "lines")  # as in a log
    run(
        compose_config(
            "regrid",
            f"weights={checkpoint}",
            "+padding=asymmetric",
            "method=distill",
            "data=imagefolder",
            f"data.root={tiny_folder}",
            "data.workers=0",
            "images=24",
            "batch_size=8",
            "crop=32",
            "features=0",
            f"out={tmp_path / 'r.pt'}",
        )
    )
    passes = [line.split(":")[0] for line in capsys.readouterr().err.splitlines()]
    assert passes == ["read images", "BN statistics", "teacher outputs", "distill", "distill", "distill"]


def test_a_slow_pass_prints_a_line_every_interval_a_fast_one_its_last_line_alone(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: clock[0])
    for seconds, expected in ((0.01, ["100/100"]), (0.5, ["20/100", "40/100", "60/100", "80/100", "100/100"])):
        out = io.StringIO()
        with Progress(100, "read images", unit="img", every=1, interval=10, mode="lines", file=out) as bar:
            for _ in range(100):
                clock[0] += seconds
                bar.update(1, images=1)
        lines = out.getvalue().splitlines()
        assert [line.split(" ")[2] for line in lines] == expected, lines  # "read images: 20/100 img ..."


def test_reference_says_in_one_line_why_nothing_matched(tmp_path, capsys):
    rows = [line for line in FIXTURE.read_text().splitlines() if '"fashion_mnist"' in line]
    (tmp_path / "rows.jsonl").write_text("\n".join(rows) + "\n")
    tables_main([str(tmp_path / "rows.jsonl"), "--out", str(tmp_path / "out"), "--reference"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("note: --reference added nothing: TensorNets published")
    assert "these results are of resnet_tiny" in err
    tables_main([str(FIXTURE), "--out", str(tmp_path / "all"), "--reference"])  # resnet50_v1 has its numbers
    assert capsys.readouterr().err == ""


def test_the_bar_chart_has_short_labels_in_the_cross_matrix_order():
    rows = demo_rows()
    labelled, common = chart_rows(scheme_table(rows))
    (matrix,) = cross_matrices(rows)
    assert [row.trained_padding for _, row in labelled] == matrix.trained
    assert [label for label, _ in labelled] == [f"resnet_tiny, trained {t}" for t in matrix.trained]
    assert common == "fashion_mnist, resize 28 → crop 28, bilinear, torch, 10000 images"  # once, in the title


def test_the_bar_chart_writes_every_number_in_one_format():
    plt = pyplot()
    fig = scheme_figure(scheme_table(demo_rows()))
    try:
        numbers = [text.get_text() for ax in fig.axes for text in ax.texts]
    finally:
        plt.close(fig)
    assert len(numbers) == 2 * (6 + 3) and all(re.fullmatch(r"[+-]?\d+\.\d\d", n) for n in numbers), numbers
    assert "+3.25" in numbers  # the deltas too, signed (top-1 and top-5: 6 bars, 3 deltas each)


def test_every_value_of_the_cross_matrix_reads_on_its_cell_colour():
    # White outlined in black blurred on viridis' bright yellow: each value now takes the colour
    # that contrasts with its own cell, at WCAG's 4.5:1 for text at least.
    from matplotlib.colors import to_rgba

    from resnet.report.charts import contrast, cross_figure

    plt = pyplot()
    rows = demo_rows() + [{**row, "top1_err": value} for row, value in zip(demo_rows(), (0.5, 99.0, 50.0))]
    fig = cross_figure(cross_matrices(rows))
    try:
        checked = 0
        for ax in fig.axes:
            images = ax.get_images()
            for text in ax.texts if images else []:
                if text.get_text() == "not run":
                    continue
                x, y = text.get_position()
                image = images[0]
                cell = image.cmap(image.norm(image.get_array()[int(round(y)), int(round(x))]))
                assert contrast(cell, to_rgba(text.get_color())) >= 4.5, (text.get_text(), cell, text.get_color())
                checked += 1
    finally:
        plt.close(fig)
    assert checked >= 6
