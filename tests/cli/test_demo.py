"""The built-in demo's plumbing, on a few steps: train under two schemes and on their grid, 3x2
evaluation, re-gridding by each method, tables."""

from __future__ import annotations

import csv
import json
import os
import shlex
import signal

import pytest

from resnet.checkpoint import load_checkpoint
from resnet.cli.demo import data_overrides, main, merged, native_bf16
from resnet.engine import run as engine_run
from tests.helpers.builtin_data import require_fashion_mnist


@pytest.mark.slow
def test_demo_trains_three_models_evaluates_each_under_both_schemes_regrids_and_writes_tables(tmp_path, capsys):
    require_fashion_mnist()
    # resnet_tiny for the default resnet_small: the same plumbing at a quarter of the convolutions;
    # validation and every evaluation on 500 of the 10,000 test images; re-gridding on 64 images.
    main(
        [
            "--out",
            str(tmp_path),
            "--regrid-set",
            "images=64",
            "--regrid-set",
            "epochs=1",
            "epochs=1",
            "max_steps_per_epoch=4",
            "batch_size=64",
            "model=resnet_tiny",
            "val_images=500",
        ]
    )
    rows = [json.loads(line) for line in (tmp_path / "eval.jsonl").read_text().splitlines()]
    pairs = {(r["trained_padding"], r["padding_name"]) for r in rows}
    trained = ("symmetric", "asymmetric", "grid[symmetric,asymmetric]")
    assert pairs == {(a, b) for a in trained for b in ("symmetric", "asymmetric")}
    assert all(r["n_images"] == 500 and r["dataset"] == "fashion_mnist" and r["arch"] == "resnet_tiny" for r in rows)
    assert json.loads((tmp_path / "train_grid" / "results.json").read_text())["n_val_images"] == 500
    assert load_checkpoint(tmp_path / "train_grid" / "last.pt")["grid"] == ["symmetric", "asymmetric"]
    for name in ("cross.md", "cross.csv", "cross.png", "tensornets.md", "tensornets.png", "regrid.md", "regrid.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    # The re-gridding table: the asymmetric-trained weights on their grid, under symmetric as they are,
    # then after each method (evaluated under symmetric, from the checkpoint each method wrote).
    with open(tmp_path / "regrid.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [(r["method"], r["evaluated with"], r["images"]) for r in table] == [
        ("none (native grid)", "asymmetric", "0"),
        ("none", "symmetric", "0"),
        ("bn", "symmetric", "64"),
        ("distill + features, 1 pass", "symmetric", "64"),
    ]
    own = {(r["trained_padding"], r["padding_name"]): r["top1_err"] for r in rows}
    assert float(table[0]["top-1 err %"]) == own["asymmetric", "asymmetric"]
    assert float(table[1]["top-1 err %"]) == own["asymmetric", "symmetric"]
    for method in ("bn", "distill"):
        assert load_checkpoint(tmp_path / f"regrid_{method}.pt")["meta"]["padding_name"] == "symmetric"
    out = capsys.readouterr().out
    assert "trained with \\ evaluated with" in out and "top-5 err % (asymmetric)" in out
    assert "grid[symmetric,asymmetric]" in out and "re-gridded to symmetric" in out


@pytest.mark.slow
def test_a_demo_stopped_mid_training_says_so_in_one_line_and_run_again_goes_on_where_it_stopped(
    tmp_path, capsys, monkeypatch
):
    require_fashion_mnist()
    args = ["--out", str(tmp_path), "--no-grid", "--no-regrid", "epochs=1", "max_steps_per_epoch=6", "batch_size=32",
            "model=resnet_tiny", "val_images=200", "checkpoint_every=2"]  # fmt: skip
    real = engine_run.loss_and_augment

    def loss_and_augment(cfg, num_classes, device):  # SIGTERM (docker stop, a preemption) at the 3rd step
        loss_fn, augment = real(cfg, num_classes, device)
        calls = [0]

        def loss(logits, labels):
            calls[0] += 1
            if calls[0] == 3:
                os.kill(os.getpid(), signal.SIGTERM)
            return loss_fn(logits, labels)

        return loss, augment

    monkeypatch.setattr(engine_run, "loss_and_augment", loss_and_augment)
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 143
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [line] = [x for x in err.splitlines() if x.startswith("stopped by")]
    run_dir = tmp_path / "train_symmetric"
    assert line == (
        f"stopped by SIGTERM: saved {run_dir / 'last.pt'}; to go on: run the demo again "
        f"({shlex.join(['resnet-demo', *args])}): it resumes that model and keeps the finished ones"
    )
    assert load_checkpoint(run_dir / "last.pt")["epoch_partial"]["batches"] == 3

    monkeypatch.setattr(engine_run, "loss_and_augment", real)
    main(args)  # the same command again
    out = capsys.readouterr().out
    assert f"resumed from {run_dir / 'last.pt'} after batch 3 of epoch 1 (step 3)" in out
    assert len((tmp_path / "eval.jsonl").read_text().splitlines()) == 4  # both models, under both schemes


@pytest.mark.parametrize(
    ("schemes", "message"),
    [
        (["symmetric", "symmetric"], "names a scheme twice"),
        (["symmetric", "keras"], "mixes stem pool pad values (-inf and zero); keep presets of one; or pass --no-grid"),
        (["symmetric+blur(block_conv)", "asymmetric"], "blurred sites have none to switch; or pass --no-grid"),
    ],
)
def test_schemes_that_cannot_make_the_demo_are_one_line_before_any_training(schemes, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--out", str(tmp_path / "out"), "--schemes", *schemes])
    assert exited.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]  # argparse: the usage, then "<prog>: error: ..."
    assert ": error: " in line and message in line and not (tmp_path / "out").exists()


def test_bf16_only_where_the_cpu_computes_it_natively_and_never_over_the_users_choice(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for amx, avx512_bf16, expected in ((True, False, ["amp=bf16"]), (False, True, ["amp=bf16"]), (False, False, [])):
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda amx=amx: amx)
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda value=avx512_bf16: value)
        assert native_bf16(["epochs=1"]) == expected
        assert native_bf16(["amp=none"]) == [] and native_bf16(["device=cuda"]) == []


def test_the_training_data_reaches_evaluation_and_regridding_and_later_values_win():
    assert data_overrides(["epochs=1", "model=resnet18"]) == ["data=fashion_mnist"]
    assert data_overrides(["data.workers=0"]) == ["data=fashion_mnist", "data.workers=0"]  # eval.yaml's is imagenet
    given = ["data=imagefolder", "data.root=/x", "+data.extra=1", "epochs=2"]
    assert data_overrides(given) == ["data=imagefolder", "data.root=/x", "+data.extra=1"]
    assert merged(("method=distill", "images=15000", "epochs=2"), ["images=64", "lr=0.1"]) == [
        "method=distill",
        "epochs=2",
        "images=64",
        "lr=0.1",
    ]
