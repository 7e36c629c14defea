"""cross.md, cross.csv, cross.png and W&B's ``padding/cross`` carry top-1 and top-5; rows without
a top-5 (older results) read as missing, and every table and chart is still made (issue 49)."""

from __future__ import annotations

import csv
import json

import pytest

from resnet.report.charts import cross_figure, save_figure
from resnet.report.table_files import write_tables
from resnet.report.tables import cross_markdown, cross_matrices, log_to_wandb, scheme_table
from tests.report.realistic import SWEEP, drawn, realistic_rows


def test_cross_files_carry_top1_and_top5_and_a_missing_top5_reads_missing(tmp_path):
    rows = realistic_rows()
    old = [r for r in rows if r["weights"] == f"{SWEEP}/1/last.pt"]
    for r in old:  # rows of before top-5 was recorded
        r["top5_err"] = None
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_tables(tmp_path / "eval.jsonl", tmp_path / "out")
    markdown = (tmp_path / "out" / "cross.md").read_text()
    assert "Top-1 error (%)" in markdown and "Top-5 error (%)" in markdown
    (matrix,) = cross_matrices(rows)
    top1 = matrix.cell("symmetric (12-18-10/0)", "symmetric")
    top5 = matrix.cell("symmetric (12-18-10/0)", "symmetric", "top5_err")
    assert top5 == pytest.approx(top1 / 9, abs=1e-3)
    assert matrix.cell("symmetric (12-18-10/1)", "tf_same", "top5_err") is None
    assert f"**{top1:.3f}**" in markdown and f"**{top5:.3f}**" in markdown  # the diagonal, bold in both
    top5_part = markdown[markdown.index("Top-5 error (%)") :]
    assert "| symmetric (12-18-10/1) | – | – | – | – | – |" in top5_part
    with open(tmp_path / "out" / "cross.csv", newline="") as f:
        records = list(csv.DictReader(f))
    record = next(r for r in records if r["trained with"] == "symmetric (12-18-10/0)")
    assert float(record["symmetric Top-1"]) == top1 and float(record["symmetric Top-5"]) == pytest.approx(top5)
    missing = next(r for r in records if r["trained with"] == "symmetric (12-18-10/1)")
    assert missing["symmetric Top-5"] == "" and missing["symmetric Top-1"] != ""


def test_the_cross_chart_has_a_top1_and_a_top5_heatmap_per_matrix(monkeypatch, tmp_path):
    (fig,) = drawn(
        monkeypatch, lambda: save_figure(cross_figure(cross_matrices(realistic_rows())), tmp_path / "cross.png")
    )
    heatmaps = [ax for ax in fig.axes if ax.get_images()]
    assert len(heatmaps) == 2
    titles = " ".join(ax.get_title() for ax in heatmaps).lower()
    assert "top-1" in titles and "top-5" in titles
    left, right = (ax.get_position() for ax in heatmaps)
    assert right.x0 > left.x1 and abs(right.y0 - left.y0) < 1e-6  # side by side


def test_wandb_gets_both_metrics_of_the_cross_table():
    logged = {}

    class Run:
        def log(self, data):
            logged.update(data)

    rows = realistic_rows()
    log_to_wandb(Run(), scheme_table(rows), cross_matrices(rows))
    columns = logged["padding/cross"].columns
    assert "symmetric Top-1" in columns and "symmetric Top-5" in columns


def test_rows_without_top5_make_every_table_and_chart(tmp_path):
    rows = realistic_rows(top5=False)
    for r in rows:
        r.pop("top5_err")  # older rows may lack the key altogether
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_tables(tmp_path / "eval.jsonl", tmp_path / "out")
    assert "| symmetric (12-18-10/0) | – |" in cross_markdown(cross_matrices(rows)).split("Top-5 error (%)")[1]
