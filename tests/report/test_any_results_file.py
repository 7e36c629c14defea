"""Tables and charts from any results file (issue 54): one checkpoint named by several paths is one
row, a seed sweep's runs are named by their seeds, cross.csv says which weights each row is,
tensornets.png shows top-5 and colours each Δ by whether the model's own grid is the better one,
and a chart says what it cannot show instead of drawing it empty or calling an absent cell matched."""

from __future__ import annotations

import csv
import json
import os

import torch
from matplotlib.colors import to_hex

from resnet.report.charts import chart_rows, cross_figure, pyplot, save_figure, scheme_figure
from resnet.report.rows import latest_rows, weights_label
from resnet.report.table_files import write_tables
from resnet.report.tables import cross_matrices, scheme_table
from tests.helpers.figures import texts_of
from tests.report.realistic import SWEEP, drawn, evaluation, one_model, one_scheme_per_model, seed_sweep

RUN = "outputs/2026-11-28/12-18-10/last.pt"
SCHEMES = ("symmetric", "asymmetric")


def test_one_checkpoint_named_by_any_path_is_one_row(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / RUN).parent.mkdir(parents=True)
    (tmp_path / RUN).write_bytes(b"weights")
    outside = tmp_path.parent / f"{tmp_path.name}-elsewhere.pt"
    outside.write_bytes(b"weights")
    typed = [RUN, str(tmp_path / RUN), f"./{RUN}", f"outputs/../{RUN}", f"checkpoint:{RUN}"]
    rows = [evaluation(w, "symmetric", "symmetric", 7.0 + i, date=f"2026-11-2{i}T10:00:00+00:00")
            for i, w in enumerate(typed)]  # fmt: skip
    rows.append(evaluation(str(tmp_path / RUN), "symmetric", "asymmetric", 12.0))
    hub = evaluation("timm:resnet50.a1_in1k", "symmetric", "symmetric", 20.0, weights_source="timm")
    gone = evaluation("gone/last.pt", "symmetric", "symmetric", 30.0)  # not here: named as typed
    far = evaluation(str(outside), "asymmetric", "asymmetric", 8.0)
    rows += [hub, gone, far]

    assert {weights_label(r) for r in rows[:6]} == {RUN}  # shown relative to here
    assert weights_label(hub) == "timm:resnet50.a1_in1k" and weights_label(gone) == "gone/last.pt"
    assert weights_label(far) == str(outside.resolve())  # outside the current folder: absolute
    assert weights_label({"weights": f"../{tmp_path.name}/{RUN}", "ema": True}) == f"{RUN} (EMA)"
    (kept,) = [r for r in latest_rows(rows) if r["padding_name"] == "symmetric" and r["top1_err"] < 20]
    assert kept["top1_err"] == 11.0  # the latest of the five, whichever path it was typed as
    table = scheme_table(rows)
    symmetric = [r.weights for r in table.rows if r.trained_padding == "symmetric"]
    assert symmetric == ["gone/last.pt", RUN, "timm:resnet50.a1_in1k"]
    (matrix,) = cross_matrices(rows)
    assert matrix.trained == ["symmetric (12-18-10)", "symmetric (gone)", "asymmetric"]
    assert matrix.cell("symmetric (12-18-10)", "asymmetric") == 12.0


def test_a_seed_sweep_is_named_by_seed_where_its_runs_record_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rows = seed_sweep(tmp_path)  # jobs 0-2 symmetric, 3-5 asymmetric; seeds 0, 1, 2 each
    (matrix,) = cross_matrices(rows)
    seeds = [f"{t} (seed {s})" for t in ("symmetric", "asymmetric") for s in (0, 1, 2)]
    assert matrix.trained == seeds
    labelled, _ = chart_rows(scheme_table(rows))
    assert [label for label, _ in labelled] == [f"resnet_tiny, trained {s}" for s in seeds]
    # a run whose folder lost Hydra's record: its checkpoint's config says the seed
    (tmp_path / SWEEP / "1" / ".hydra" / "config.yaml").unlink()
    torch.save({"model": {}, "meta": {}, "config": {"seed": 7}}, tmp_path / SWEEP / "1" / "last.pt")
    assert cross_matrices(rows)[0].trained[:3] == ["symmetric (seed 0)", "symmetric (seed 2)", "symmetric (seed 7)"]
    # two runs of one seed (another sweep over something else): seeds name nothing, the folders do
    (tmp_path / SWEEP / "2" / ".hydra" / "config.yaml").write_text("seed: 0\n")
    assert cross_matrices(rows)[0].trained[:3] == ["symmetric (12-18-10/0)", "symmetric (12-18-10/1)",
                                                   "symmetric (12-18-10/2)"]  # fmt: skip


def test_cross_csv_says_which_weights_each_row_is(tmp_path):
    rows = [*one_scheme_per_model(), evaluation(RUN, "symmetric", "asymmetric", 12.0, ema=True)]
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_tables(tmp_path / "eval.jsonl", tmp_path / "out")
    with open(tmp_path / "out" / "cross.csv", newline="") as f:
        records = list(csv.DictReader(f))
    assert list(records[0])[:5] == ["arch", "dataset", "protocol", "trained with", "weights"]
    assert {r["trained with"]: r["weights"] for r in records} == {
        "symmetric (12-18-10)": RUN,
        "symmetric (12-18-10, EMA)": f"{RUN} (EMA)",
        "asymmetric": "outputs/2026-11-28/13-02-44/last.pt",
        "grid[symmetric,asymmetric]": "outputs/2026-11-28/14-40-10/last.pt",
    }


def chart_texts(monkeypatch, tmp_path, plot) -> list[str]:
    (fig,) = drawn(monkeypatch, plot)
    try:
        return [t.get_text() for t in texts_of(fig)]
    finally:
        pyplot().close(fig)


def test_the_cross_chart_says_matched_only_where_a_cell_is(monkeypatch, tmp_path):
    elsewhere = [evaluation(RUN, "tf_same", scheme, 9.0 + i) for i, scheme in enumerate(("symmetric", "asymmetric"))]
    texts = chart_texts(
        monkeypatch, tmp_path, lambda: save_figure(cross_figure(cross_matrices(elsewhere)), tmp_path / "c.png")
    )
    assert not any("matched" in t or "red" in t for t in texts), texts
    texts = chart_texts(
        monkeypatch, tmp_path, lambda: save_figure(cross_figure(cross_matrices(one_model())), tmp_path / "c.png")
    )
    assert sum("matched" in t for t in texts) == 1, texts  # one legend entry, not a title per panel


def test_a_chart_says_what_it_cannot_show(monkeypatch, tmp_path):
    table = scheme_table(one_scheme_per_model())
    texts = chart_texts(monkeypatch, tmp_path, lambda: save_figure(scheme_figure(table), tmp_path / "t.png"))
    assert any(t.startswith("Δ (asymmetric − symmetric) needs") for t in texts), texts
    assert "not run" in texts  # the empty bar slots say why they are empty
    texts = chart_texts(
        monkeypatch, tmp_path, lambda: save_figure(scheme_figure(scheme_table(one_model())), tmp_path / "t.png")
    )
    assert any(t.startswith("Δ needs each model under two schemes") for t in texts), texts


def delta_panels(fig) -> dict[str, object]:
    return {ax.get_xlabel(): ax for ax in fig.axes if ax.get_xlabel().startswith("Δ")}


def test_tensornets_png_shows_top5_and_colours_each_delta_by_the_models_own_grid(monkeypatch, tmp_path):
    def model(weights, trained, symmetric, asymmetric):
        return [evaluation(weights, trained, scheme, top1) for scheme, top1 in zip(SCHEMES, (symmetric, asymmetric))]

    rows = [*model("runs/s/last.pt", "symmetric", 7.0, 12.0),  # own grid better by 5
            *model("runs/a/last.pt", "asymmetric", 13.0, 7.5),  # own grid better by 5.5
            *model("runs/odd/last.pt", "asymmetric", 7.0, 7.5),  # own grid worse
            *model("runs/t/last.pt", "tf_same", 9.0, 9.5),  # neither grid its own
            evaluation("runs/once/last.pt", "symmetric", "symmetric", 7.1)]  # fmt: skip
    table = scheme_table(rows)
    (fig,) = drawn(monkeypatch, lambda: save_figure(scheme_figure(table), tmp_path / "t.png"))
    try:
        assert {ax.get_xlabel() for ax in fig.axes} >= {"top-1 error (%)", "top-5 error (%)"}
        panels = delta_panels(fig)
        assert set(panels) == {"Δ top-1 error (points)", "Δ top-5 error (points)"}
        legend = {t.get_text(): to_hex(h.get_facecolor()) for ax in panels.values() if ax.get_legend()
                  for t, h in zip(ax.get_legend().get_texts(), ax.get_legend().legend_handles)}  # fmt: skip
        expected = {"runs/s": "own grid better", "runs/a": "own grid better", "runs/odd": "own grid worse",
                    "runs/t": "trained on neither grid"}  # fmt: skip
        assert set(legend) == set(expected.values())
        labelled, _ = chart_rows(table)
        for ax in panels.values():
            bars = {round(p.get_y() + p.get_height() / 2): to_hex(p.get_facecolor()) for p in ax.patches}
            for i, (_, row) in enumerate(labelled):
                folder = os.path.dirname(row.weights)
                assert bars.get(i) == (legend[expected[folder]] if folder in expected else None), (folder, ax)
            assert "not under both" in [t.get_text() for t in ax.texts]  # runs/once
    finally:
        pyplot().close(fig)
