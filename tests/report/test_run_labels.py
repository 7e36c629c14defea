"""Runs are named by the shortest part of their path that tells them apart
(:func:`resnet.report.rows.run_labels`), wherever a table or chart names one (issue 49)."""

from __future__ import annotations

from resnet.report.charts import chart_rows
from resnet.report.rows import run_labels
from resnet.report.tables import cross_matrices, scheme_table
from tests.report.realistic import realistic_rows

SWEEP = "multirun/2026-11-28/12-18-10"


def test_runs_of_one_scheme_are_told_apart_by_the_shortest_part_of_their_path():
    weights = [f"{SWEEP}/0/last.pt", f"{SWEEP}/1/last.pt", "outputs/2026-11-28/12-18-10/last.pt"]
    assert run_labels(["symmetric"] * 3, weights) == [
        "symmetric (12-18-10/0)",
        "symmetric (12-18-10/1)",
        "symmetric (12-18-10)",
    ]  # a sweep's job: time/job
    # a run alone under its label keeps the label; EMA weights are other weights, named as such
    assert run_labels(["symmetric", "symmetric", "tf_same"], [weights[2], f"{weights[2]} (EMA)", weights[0]]) == [
        "symmetric (12-18-10)",
        "symmetric (12-18-10, EMA)",
        "tf_same",
    ]
    # the same time on two days: the day comes in; common leading folders and trailing file go
    assert run_labels(["a", "a"], ["outputs/2026-11-28/12-18-10/last.pt", "outputs/2026-11-29/12-18-10/last.pt"]) == [
        "a (2026-11-28/12-18-10)",
        "a (2026-11-29/12-18-10)",
    ]
    assert run_labels(["a", "a"], ["runs/tiny-symmetric/last.pt", "runs/tiny-symmetric-seed1/last.pt"]) == [
        "a (tiny-symmetric)",
        "a (tiny-symmetric-seed1)",
    ]
    assert run_labels(["a", "a"], ["runs/x/best.pt", "runs/x/last.pt"]) == ["a (best.pt)", "a (last.pt)"]
    # one path the tail of another: the longer one takes a folder more; Windows separators read alike
    assert run_labels(["a", "a"], ["x/last.pt", "y\\x\\last.pt"]) == ["a (x)", "a (y/x)"]
    # hub names have no folders; the same weights twice (two protocols) are one run
    assert run_labels(
        ["a", "a", "a"], ["timm:resnet50.a1_in1k", "torchvision:ResNet50_Weights.V2", "timm:resnet50.a1_in1k"]
    ) == ["a (timm:resnet50.a1_in1k)", "a (torchvision:ResNet50_Weights.V2)", "a (timm:resnet50.a1_in1k)"]
    assert run_labels(["a", "a"], ["runs/x/last.pt", "runs/x/last.pt (EMA)"]) == ["a (x)", "a (x, EMA)"]


def test_the_cross_matrix_and_the_bar_chart_name_runs_alike():
    (matrix,) = cross_matrices(realistic_rows())
    assert matrix.trained[:4] == [
        "symmetric (12-18-10)",
        "symmetric (12-18-10, EMA)",
        "symmetric (12-18-10/0)",
        "symmetric (12-18-10/1)",
    ]
    assert not any("last.pt" in t for t in matrix.trained)
    labelled, _ = chart_rows(scheme_table(realistic_rows()))
    labels = [label for label, _ in labelled]
    assert len(set(labels)) == len(labels) and not any("last.pt" in label for label in labels), labels
    assert "resnet_tiny, trained symmetric (12-18-10/0)" in labels
