"""Result tables, reference numbers, the sampling-grid figure and padding detection.

The tables are checked against ``tests/fixtures/eval_rows.jsonl``, a hand-made results
file whose expected cells are worked out by hand in the comments below.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from data import Normalize
from resnet import ALIASES, PRESETS
from resnet.cli.tables import main
from resnet.detect import detect_padding, preset_groups
from resnet.figures import plot_sampling_grid, sampling_grid
from resnet.report.published import TENSORNETS, TENSORNETS_ZERO_POOL, tensornets_reference
from resnet.report.rows import ROW_KEYS, check_row, latest_rows, read_rows, scheme_label
from resnet.report.table_files import write_tables
from resnet.report.tables import METRICS, cross_markdown, cross_matrices, scheme_records, scheme_table, wandb_table
from tests.helpers.models import random_model

FIXTURE = Path(__file__).parents[1] / "fixtures" / "eval_rows.jsonl"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RESNET50_256 = "resize 256 → crop 224, bilinear, torch, 50000 images"  # dataset: imagenet
RESNET50_232 = "resize 232 → crop 224, bicubic, torch, 50000 images"
TINY = "resize 28 → crop 28, bilinear, torch, 10000 images"  # dataset: fashion_mnist


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def find(
    records: list[dict], model: str, protocol: str, weights: str | None = None, dataset: str | None = None
) -> dict:
    dataset = dataset or ("fashion_mnist" if protocol == TINY else "imagenet")
    hits = [
        r
        for r in records
        if r["model"] == model
        and r["protocol"] == protocol
        and r["dataset"] == dataset
        and (weights is None or r["weights"] == weights)
    ]
    assert len(hits) == 1, hits
    return hits[0]


# --- the TensorNets-style table -------------------------------------------------------


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("tables")
    markdown = write_tables(FIXTURE, out, schemes=["symmetric", "asymmetric"], reference=True)
    return out, markdown


def test_every_file_is_written(written):
    out, markdown = written
    for name in ("tensornets.md", "tensornets.csv", "tensornets.png", "cross.md", "cross.csv", "cross.png"):
        assert (out / name).stat().st_size > 0, name
    for name in ("tensornets.png", "cross.png"):
        assert (out / name).read_bytes()[:8] == PNG_MAGIC
    assert (out / "tensornets.md").read_text().strip() in markdown
    assert (out / "cross.md").read_text().strip() in markdown


def test_cells_and_delta_by_hand(written):
    out, markdown = written
    row = find(read_csv(out / "tensornets.csv"), "resnet50", RESNET50_256)
    # Latest wins: symmetric 23.870 (Jan 10) beats 99.0 (Jan 5, later in the file);
    # asymmetric 24.412 (Jan 11) beats 30.0 (Jan 6).
    assert float(row["symmetric Top-1"]) == 23.870
    assert float(row["symmetric Top-5"]) == 7.138
    assert float(row["asymmetric Top-1"]) == 24.412
    assert float(row["symmetric 10-crop Top-5"]) == 6.100  # the crops=10 row's top5_err
    assert float(row["asymmetric 10-crop Top-5"]) == 6.310
    # asymmetric - symmetric: 24.412 - 23.870, 7.452 - 7.138, 6.310 - 6.100
    assert float(row["Δ Top-1 (asymmetric − symmetric)"]) == pytest.approx(0.542)
    assert float(row["Δ Top-5 (asymmetric − symmetric)"]) == pytest.approx(0.314)
    assert float(row["Δ 10-crop Top-5 (asymmetric − symmetric)"]) == pytest.approx(0.210)
    line = next(x for x in markdown.splitlines() if RESNET50_256 in x)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[5:14] == ["23.870", "7.138", "6.100", "24.412", "7.452", "6.310", "+0.542", "+0.314", "+0.210"]
    assert "99.000" not in markdown and "30.000" not in markdown


def test_latest_row_wins_by_date_then_by_line():
    rows = read_rows(FIXTURE)
    base = next(r for r in rows if r["arch"] == "resnet50" and r["padding_name"] == "symmetric")
    older = {**base, "top1_err": 1.0, "date": "2024-12-31T23:00:00-02:00"}  # = 2025-01-01T01:00Z
    newer = {**base, "top1_err": 2.0, "date": "2025-01-01T00:30:00"}  # naive = UTC: still older
    same_time = {**base, "top1_err": 3.0, "date": "2025-01-01T01:00:00Z"}
    kept = latest_rows([older, newer])
    assert [r["top1_err"] for r in kept] == [1.0]
    assert [r["top1_err"] for r in latest_rows([older, same_time])] == [3.0]  # tie: the later line
    assert len(latest_rows([base, {**base, "crops": 10}])) == 2  # 10-crop is another evaluation


def test_read_rows_skips_a_cut_short_last_line_only(tmp_path):
    good = FIXTURE.read_text().splitlines()[0]
    path = tmp_path / "eval.jsonl"
    path.write_text(f"{good}\n\n{good}\n{good[:40]}")  # the last write was cut short
    assert len(read_rows(path)) == 2
    path.write_text(f"{good}\n{good[:40]}\n{good}\n")
    with pytest.raises(ValueError, match="eval.jsonl:2 is not a JSON row"):
        read_rows(path)


def test_protocols_are_never_merged():
    rows = read_rows(FIXTURE)
    _, records = scheme_records(scheme_table(rows))
    at_232 = find(records, "resnet50", RESNET50_232)
    at_256 = find(records, "resnet50", RESNET50_256)
    assert at_232["symmetric Top-1"] == 23.650 and at_256["symmetric Top-1"] == 23.870
    assert at_232["asymmetric Top-1"] is None and at_232["Δ Top-1 (asymmetric − symmetric)"] is None
    # A partial re-run on fewer images is a new protocol too, not a newer value.
    subset = {**rows[0], "n_images": 500, "top1_err": 50.0, "date": "2026-01-01T00:00:00Z"}
    _, records = scheme_records(scheme_table([*rows, subset]))
    assert find(records, "resnet50", RESNET50_256)["symmetric Top-1"] == 23.870
    assert find(records, "resnet50", RESNET50_256.replace("50000", "500"))["symmetric Top-1"] == 50.0


def test_schemes_order_delta_and_per_site_labels():
    rows = read_rows(FIXTURE)
    table = scheme_table(rows)
    assert table.schemes == ["symmetric", "symmetric[stem_conv=same]", "asymmetric", "tf_same", "tf_slim", "keras"]
    assert table.delta == ("asymmetric", "symmetric")
    custom = next(r for r in rows if r["padding_name"] == "custom")  # a row written before per-site names
    assert scheme_label(custom) == "symmetric[stem_conv=same]"
    table = scheme_table(rows, ["tf_same", "symmetric"], delta=["symmetric", "tf_same"])
    _, records = scheme_records(table)
    tiny = find(records, "resnet_tiny", TINY, "runs/tiny-tf_same/last.pt")
    assert tiny["Δ Top-1 (symmetric − tf_same)"] == pytest.approx(10.90 - 8.05)
    with pytest.raises(ValueError, match="no results for scheme.*the results have symmetric"):
        scheme_table(rows, ["symmetric", "caffe"])
    with pytest.raises(ValueError, match="delta must name two"):
        scheme_table(rows, ["symmetric", "asymmetric"], delta=["symmetric", "tf_same"])


# --- the trained-with x evaluated-with matrix -----------------------------------------


def test_cross_matrix_cells(written):
    out, _ = written
    (matrix,) = cross_matrices(read_rows(FIXTURE))  # checkpoints only: resnet_tiny
    assert (matrix.arch, matrix.dataset, matrix.protocol) == ("resnet_tiny", "fashion_mnist", TINY)
    seed0, seed1 = "symmetric (tiny-symmetric)", "symmetric (tiny-symmetric-seed1)"  # runs/.../last.pt: run_labels
    assert matrix.trained == [seed0, seed1, "tf_same"]  # two symmetric checkpoints: a row each
    assert matrix.evaluated == ["symmetric", "symmetric[stem_conv=same]", "asymmetric", "tf_same"]
    assert matrix.cell("tf_same", "tf_same") == 8.05 and matrix.cell("tf_same", "symmetric") == 10.90
    assert matrix.cell(seed0, "asymmetric") == 9.30 and matrix.cell(seed1, "asymmetric") is None
    assert matrix.matched(seed1, "symmetric") and not matrix.matched("tf_same", "symmetric")
    markdown = cross_markdown([matrix])
    assert "| tf_same | 10.900 | – | 9.800 | **8.050** |" in markdown
    rows = read_csv(out / "cross.csv")
    tf_same = next(r for r in rows if r["trained with"] == "tf_same")
    assert (float(tf_same["symmetric Top-1"]), tf_same["symmetric[stem_conv=same] Top-1"]) == (10.90, "")
    everything = cross_matrices(read_rows(FIXTURE), weights_sources=None)
    assert [m.arch for m in everything] == ["resnet50", "resnet50", "resnet50_v1", "resnet50_v2", "resnet_tiny"]


def test_grid_trained_weights_are_their_own_row_matched_under_each_of_their_presets():
    # Rows of a train.py grid=[symmetric,asymmetric] checkpoint, as eval.py writes them: its own
    # row, after the single-scheme ones, and both of its presets outlined as its own grids.
    tiny = [r for r in read_rows(FIXTURE) if r["arch"] == "resnet_tiny" and r["weights_source"] == "checkpoint"]
    grid = [{**r, "weights": "runs/grid/last.pt", "trained_padding": "grid[symmetric,asymmetric]",
             "padding_name": scheme, "top1_err": err}
            for r, scheme, err in ((tiny[0], "symmetric", 8.5), (tiny[0], "asymmetric", 8.25))]  # fmt: skip
    (matrix,) = cross_matrices([*tiny, *grid])
    assert matrix.trained[-1] == "grid[symmetric,asymmetric]"
    assert matrix.cell("grid[symmetric,asymmetric]", "asymmetric") == 8.25
    assert [matrix.matched("grid[symmetric,asymmetric]", s) for s in matrix.evaluated[:4]] == [True, False, True, False]
    assert matrix.evaluated[:4] == ["symmetric", "symmetric[stem_conv=same]", "asymmetric", "tf_same"]
    assert "| grid[symmetric,asymmetric] | **8.500** | – | **8.250** |" in cross_markdown([matrix])


def test_cli_prints_markdown(tmp_path, capsys):
    main([str(FIXTURE), "--out", str(tmp_path), "--schemes", "symmetric", "tf_same"])
    printed = capsys.readouterr().out
    assert "Δ Top-1 (tf_same − symmetric)" in printed and "trained with \\ evaluated with" in printed
    assert (tmp_path / "tensornets.png").exists() and (tmp_path / "cross.png").exists()


def test_wandb_table_holds_the_records():
    columns, records = scheme_records(scheme_table(read_rows(FIXTURE)), reference=True)
    table = wandb_table(columns, records)
    assert table.columns == columns and len(table.data) == len(records)


# --- reference numbers ------------------------------------------------------------------


def test_reference_numbers_for_the_eleven_tensornets_models(written):
    assert sorted(TENSORNETS) == sorted(ALIASES.values())  # every model of the seed table, by our name
    for arch, ref in TENSORNETS.items():  # each row is a model we build, under a preset we have
        assert ALIASES[ref.source_name] == arch and ref.padding_name in PRESETS
        assert ref.top5_err < ref.top1_err and ref.top5_err_10crop < ref.top5_err
    for arch, variant in TENSORNETS_ZERO_POOL.items():  # the zero-padded pool1 variant, when asked for
        assert tensornets_reference(arch, "keras") == variant and tensornets_reference(arch) == TENSORNETS[arch]
    assert tensornets_reference("resnet50") is None  # torchvision's resnet50 is not in the seed table
    out, _ = written
    row = find(read_csv(out / "tensornets.csv"), "resnet50_v1", RESNET50_256.replace("torch", "caffe"))
    assert (float(row["TensorNets Top-1"]), row["TensorNets padding"]) == (25.126, "caffe @224")


# --- the sampling-grid figure -----------------------------------------------------------


def test_sampling_grids_of_the_real_layers():
    same3, symmetric3 = sampling_grid("same", 8, 3), sampling_grid("symmetric", 8, 3)
    assert same3.reads(0) == {0, 1, 2} and same3.pad == (0, 1)
    assert symmetric3.reads(0) == {-1, 0, 1} and symmetric3.pad == (1, 1)  # -1: the padded row
    for scheme in ("same", "symmetric"):
        shortcut = sampling_grid(scheme, 8, 1)
        assert [shortcut.reads(i) for i in range(4)] == [{0}, {2}, {4}, {6}]
    # docs/padding.md: under SAME at even n the 3x3/2 output i is centred on 2i+1, the shortcut on 2i.
    assert [same3.centre(i) for i in range(4)] == [1, 3, 5, 7]
    assert [symmetric3.centre(i) for i in range(4)] == [0, 2, 4, 6]
    assert sampling_grid("same", 9, 3).taps == sampling_grid("symmetric", 9, 3).taps  # odd n: identical
    assert sampling_grid("same", 8, 7).reads(0) == set(range(-2, 5))  # stem 7x7/2: pad (2, 3)


def test_sampling_grid_figure_is_written(tmp_path):
    path = tmp_path / "grid.png"
    plot_sampling_grid(path, 8)
    assert path.read_bytes()[:8] == PNG_MAGIC


# --- padding detection -------------------------------------------------------------------


def self_labelled(model: nn.Module, normalize: nn.Module, size: int, batches: int = 3) -> list:
    """Random images labelled by ``model`` itself, so its own preset fits them perfectly."""
    generator = torch.Generator().manual_seed(1)
    out = []
    with torch.no_grad():
        for _ in range(batches):
            images = torch.randint(0, 256, (32, 3, size, size), dtype=torch.uint8, generator=generator)
            out.append((images, model(normalize(images)).argmax(1)))
    return out


def group_of(preset: str, groups: list[tuple[str, ...]]) -> tuple[str, ...]:
    return next(group for group in groups if preset in group)


# How these presets pad resnet_tiny (no stem pool) at 16 -> 8 -> 4: SAME pads (0, 1) on an even size
# (asymmetric at the stem, tf_same there and in the blocks); the others pad (1, 1) everywhere. A new
# preset changes none of these groups; it joins one or makes its own (resnet.detect.preset_groups: the
# amounts and what the cells hold, as each built layer reports them; a reflected stem is its own group).
GROUPS_AT_16 = (("tf_same",), ("asymmetric",), ("symmetric", "tf_slim", "caffe", "keras"))
GROUPED = {preset for group in GROUPS_AT_16 for preset in group}


@pytest.mark.parametrize("group", GROUPS_AT_16, ids=lambda group: group[0])
def test_detection_finds_the_training_preset(group):
    preset = group[0]
    model = random_model(preset)
    groups = preset_groups(model, 16)
    best = group_of(preset, groups)  # its group among every preset, new ones included
    assert tuple(p for p in best if p in GROUPED) == group
    normalize = Normalize("torch")
    report = detect_padding(model, self_labelled(model, normalize, 16), normalize, 16)
    assert report.best.presets == best and report.best.top1_err == 0.0
    assert report.margin > 0.05 and not report.indistinguishable
    assert report.n_images == 96 and len(report.scores) == len(groups)  # no stem pool: no group's logits agree
    assert f"best fit: {' = '.join(best)}" in str(report)


def test_detection_at_an_odd_size_groups_the_presets_that_pad_alike():
    # At 17 -> 9 -> 5, all odd, SAME pads are symmetric: every preset of GROUPS_AT_16 is one group,
    # indistinguishable from the others; a preset that pads otherwise (a reflected stem) stays apart.
    normalize = Normalize("torch")
    model = random_model("tf_same")
    groups = preset_groups(model, 17)
    assert set(group_of("tf_same", groups)) >= GROUPED
    report = detect_padding(model, self_labelled(model, normalize, 17, batches=1), normalize, 17)
    assert report.best.presets == group_of("tf_same", groups) and report.best.top1_err == 0.0
    assert sorted(s.presets for s in report.scores) == sorted(groups)  # no stem pool: no group's logits agree
    assert report.indistinguishable == (len(groups) == 1) and (report.margin is None) == report.indistinguishable
    assert ("all presets are indistinguishable here" in str(report)) == report.indistinguishable


def test_detection_merges_presets_with_identical_outputs():
    # With a stem pool after BN + ReLU, a zero-padded pool (keras) equals a -inf one
    # (symmetric): different pad tables, the same logits. They must come out as one group.
    normalize = Normalize("torch")
    model = random_model("symmetric", stem_pool=True)
    groups = preset_groups(model, 16)
    assert ("keras",) in groups and not any("keras" in g and "symmetric" in g for g in groups)
    report = detect_padding(model, self_labelled(model, normalize, 16, batches=1), normalize, 16)
    assert {"symmetric", "keras"} <= set(report.best.presets) and report.margin > 0


def test_detection_needs_a_built_model():
    plain = nn.Sequential(nn.Conv2d(3, 4, 3))
    with pytest.raises(ValueError, match="model.meta"):
        detect_padding(plain, [], Normalize("torch"), 32)


def test_fixture_rows_are_rows_the_evaluator_writes():
    for line in FIXTURE.read_text().splitlines():
        row = json.loads(line)
        check_row(row)  # the evaluator's own check: exactly its keys, valid source and crops
        assert list(row) == list(ROW_KEYS)


def test_rows_computed_on_fewer_images_than_the_set_are_marked_in_every_table(tmp_path):
    """Under max_unreadable a row is written, computed on the images that could be read: the tables
    mark each of its cells (†) and say on how many, never a number that looks whole (issue 55)."""
    tiny = [r for r in read_rows(FIXTURE) if r["arch"] == "resnet_tiny" and r["weights_source"] == "checkpoint"]
    short = {**tiny[0], "n_images": 38, "skipped_images": 2, "top1_err": 12.5}
    rows = [*tiny, short]
    columns, records = scheme_records(scheme_table(rows))
    marked = next(r for r in records if "38 images" in r["protocol"])
    assert marked["unreadable images"] == f"{short['padding_name']}: 38 of 40: 2 unreadable"
    assert all("unreadable images" not in r for r in records if r is not marked)  # whole rows: unmarked
    tables = write_tables_of(rows, tmp_path)
    assert "12.500 †" in tables["tensornets.md"] and "38 of 40: 2 unreadable" in tables["tensornets.md"]
    assert "12.5," in tables["tensornets.csv"] and "†" not in tables["tensornets.csv"]  # the CSV keeps numbers
    (matrix,) = [m for m in cross_matrices(rows) if "38 images" in m.protocol]
    text = cross_markdown([matrix])
    assert "12.500 †" in text and "† " in text and "on 38 of 40: 2 unreadable" in text


def write_tables_of(rows, out: Path) -> dict[str, str]:
    results = out / "rows.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_tables(results, out / "tables", None, cross_sources=None)
    return {p.name: p.read_text() for p in (out / "tables").iterdir() if p.suffix in (".md", ".csv")}


def test_a_missing_models_published_numbers_sit_under_their_own_columns_beside_an_unreadable_column():
    """--reference with a missing model and a row marked unreadable: the missing row's TensorNets
    numbers are under the TensorNets columns (they were placed by position, one column to the left)."""
    tiny = [r for r in read_rows(FIXTURE) if r["arch"] == "resnet_tiny" and r["weights_source"] == "checkpoint"]
    rows = [*tiny, {**tiny[0], "n_images": 38, "skipped_images": 2}]
    lost = {"arch": "resnet50_v1", "weights": "fbtorch:resnet-50.t7", "trained_padding": "caffe", "dataset": "imagenet"}
    columns, records = scheme_records(scheme_table(rows), reference=True, missing=[{**lost, "fix": "download=true"}])
    assert columns[-2:] == ["unreadable images", "missing"]
    (record,) = [r for r in records if r.get("missing")]
    ref = tensornets_reference("resnet50_v1")
    published = [c for c in columns if c.startswith("TensorNets ")]
    expected = [getattr(ref, m) for m in METRICS] + [f"{ref.padding_name} @{ref.input_size}"]
    assert [record[c] for c in published] == expected
    assert "unreadable images" not in record
