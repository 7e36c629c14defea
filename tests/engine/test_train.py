"""train.py end to end on tiny generated data: outputs, resume, DDP, launcher, W&B."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import torch

from resnet.checkpoint import load_checkpoint, load_model
from resnet.engine.run import RunFailed
from tests.helpers import procs, submitit_tasks
from tests.helpers.faults import WRAPPER, assert_same_training, assert_status, launch
from tests.helpers.imagegen import make_folder
from tests.helpers.training import (
    PY,
    REPO,
    launcher_overrides,
    read_csv,
    run_in_process,
    tiny_overrides,
)
from tests.helpers.wandb_records import finished_log


def run_script(args: list[str], env: dict | None = None, timeout: int = 240) -> subprocess.CompletedProcess:
    proc = procs.run(args, env, timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_train_writes_results_metrics_and_checkpoint(tiny_folder, tmp_path):
    results = run_in_process(tiny_folder, tmp_path, "+padding=asymmetric")
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["padding_name"] == "asymmetric" and saved["padding"]["stem_conv"] == "same"
    assert saved["n_val_images"] == 7 and saved["epochs"] == 2 and saved["dataset"] == "imagefolder"
    for key in ("top1_err", "top5_err", "train_images_per_s", "wall_seconds", "git_commit", "arch"):
        assert key in saved
    assert 0 <= results["top1_err"] <= 100
    rows = read_csv(tmp_path / "metrics.csv")
    assert [r["epoch"] for r in rows] == ["1", "2"] and "val_top1_err" in rows[0]
    assert (tmp_path / "steps.csv").read_text().count("\n") >= 3
    model = load_model(tmp_path / "last.pt")  # safe loader, meta rebuilds the same model
    assert model.meta.padding_name == "asymmetric" and model.meta.preprocessing == "torch"
    checkpoint = load_checkpoint(tmp_path / "last.pt")
    for key in ("optimizer", "scheduler", "epoch", "step", "rng", "config", "meta"):
        assert key in checkpoint
    assert checkpoint["config"]["model"]["arch"] == "resnet_tiny"


def test_a_train_metric_added_in_two_lines_reaches_every_report_and_a_resumed_csv(
    tiny_folder, tmp_path, monkeypatch, capsys
):
    # resnet/engine/totals.py: what a step adds (on the device) and the metric made from the epoch's sums.
    # A run begun without it and resumed with it: metrics.csv gains the column (empty for epoch 1),
    # results.json and the epoch line have it. 3 classes: every label is among the 5 best scores.
    from resnet.engine import totals
    from resnet.evaluation.loop import topk_correct

    run_in_process(tiny_folder, tmp_path, "stop_after=1")
    monkeypatch.setitem(
        totals.STEP_SUMS, "correct5", totals.StepSum(lambda s: topk_correct(s.logits, s.classes, (5,))[0])
    )
    monkeypatch.setitem(
        totals.TRAIN_METRICS,
        "top5_err",
        totals.TrainMetric(lambda t: totals.error(t["correct5"], t["images"]), "train top-5 err {:.2f}%"),
    )
    results = run_in_process(tiny_folder, tmp_path, "resume=true")
    rows = read_csv(tmp_path / "metrics.csv")
    assert [r["epoch"] for r in rows] == ["1", "2"] and [r["train_top5_err"] for r in rows] == ["", "0.0"]
    assert all(0 <= float(r["train_top1_err"]) <= 100 and float(r["train_loss"]) > 0 for r in rows)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["train_top5_err"] == results["train_top5_err"] == 0.0 and saved["train_top1_err"] is not None
    epoch_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch 2 |"))
    assert " | train top-1 err " in epoch_line and " | train top-5 err 0.00% | " in epoch_line, epoch_line


def test_resume_after_an_interruption_ends_with_identical_weights(tiny_folder, tmp_path):
    common = ("epochs=3", "deterministic=true", "seed=3", "ema_decay=0.9")  # the EMA weights resume too
    run_in_process(tiny_folder, tmp_path / "straight", *common)
    run_in_process(tiny_folder, tmp_path / "split", *common, "stop_after=1")  # "interrupted" after epoch 1
    assert load_checkpoint(tmp_path / "split" / "last.pt")["epoch"] == 1
    run_in_process(tiny_folder, tmp_path / "split", *common, "resume=true")
    a = load_checkpoint(tmp_path / "straight" / "last.pt")
    b = load_checkpoint(tmp_path / "split" / "last.pt")
    assert a["epoch"] == b["epoch"] == 3 and a["step"] == b["step"]
    for key, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][key]), key
    momentum_a = [s["momentum_buffer"] for s in a["optimizer"]["state"].values()]
    momentum_b = [s["momentum_buffer"] for s in b["optimizer"]["state"].values()]
    assert all(torch.equal(x, y) for x, y in zip(momentum_a, momentum_b))
    assert a["ema"].keys() == a["model"].keys()
    for key, tensor in a["ema"].items():
        assert torch.equal(tensor, b["ema"][key]), key


@pytest.mark.slow
def test_resume_is_exact_with_loader_workers_and_augmentation(tiny_folder, tmp_path):
    # Persistent worker processes carry their RNG across epochs; per-sample seeds
    # (data.samplers.EpochSampler) make augmentation a function of (seed, epoch, index).
    common = ("epochs=2", "data.workers=2", "data.augment=true", "seed=5")
    run_in_process(tiny_folder, tmp_path / "straight", *common)
    run_in_process(tiny_folder, tmp_path / "split", *common, "stop_after=1")
    run_in_process(tiny_folder, tmp_path / "split", *common, "resume=true")
    a = load_checkpoint(tmp_path / "straight" / "last.pt")["model"]
    b = load_checkpoint(tmp_path / "split" / "last.pt")["model"]
    assert all(torch.equal(tensor, b[key]) for key, tensor in a.items())


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_batch_larger_than_a_process_share_of_the_set_is_one_line_not_an_epoch_of_no_steps(
    tiny_folder, tmp_path, world_size
):
    from resnet.config import ConfigError
    from resnet.engine.run import make_loaders
    from resnet.engine.train_config import train_config
    from resnet.runtime.distributed import DistEnv
    from tests.helpers.compose import compose_config

    images = sum(1 for path in (tiny_folder / "train").rglob("*") if path.is_file())
    share = -(-images // world_size)  # the sampler pads the shares to the same length
    each = f", {share} per process" if world_size > 1 else ""
    says = (
        f"imagefolder has {images} training images{each}: fewer than batch_size={images + 1}, so an epoch "
        f"would train no step; pass batch_size={share} or less"
    )
    config = train_config(compose_config("train", *tiny_overrides(tiny_folder, tmp_path, f"batch_size={images + 1}")))
    with pytest.raises(ConfigError, match=f"^{re.escape(says)}$"):
        make_loaders(config, DistEnv(0, world_size, 0, torch.device("cpu")))


def test_unreadable_images_are_skipped_and_reported(tiny_folder, tmp_path, capsys):
    root = tmp_path / "data"
    make_folder(root / "train", {"a": 6, "b": 6, "c": 6}, size=(40, 36))
    make_folder(root / "val", {"a": 2, "b": 2, "c": 2}, size=(40, 36))
    (root / "train" / "a" / "empty.JPEG").write_bytes(b"")
    (root / "train" / "b" / "junk.JPEG").write_bytes(b"not an image at all")
    good = (root / "train" / "c" / "0.JPEG").read_bytes()
    (root / "train" / "c" / "cut.JPEG").write_bytes(good[: len(good) // 3])
    # 2 or 3 of 21 (the cut JPEG may decode partly): over the default max_unreadable=0.05, a run that
    # trains on other data than asked (a class folder gone, a failing disk) stops in one line
    with pytest.raises(
        RunFailed,
        match=r"^epoch 1 could not read [23] of its 21 images \(1\d%, more than "
        r"max_unreadable=0.05\), e.g. .*no last.pt was written before\. Restore",
    ):
        run_in_process(root, tmp_path / "stopped", "epochs=1", "batch_size=3")
    assert not (tmp_path / "stopped" / "last.pt").exists()
    run_in_process(root, tmp_path / "run", "epochs=1", "batch_size=3", "max_unreadable=0.2")
    rows = read_csv(tmp_path / "run" / "metrics.csv")
    assert int(rows[0]["skipped_images"]) >= 2  # empty + junk always; the cut JPEG may decode partly
    assert "empty.JPEG" in rows[0]["skipped_examples"] or "junk.JPEG" in rows[0]["skipped_examples"]
    summary = capsys.readouterr().out
    assert "skipped (train / val)" in summary and f"{rows[0]['skipped_images']} / 0" in summary  # in the closing table


def assert_same_as_one_process(one: Path, two: Path) -> None:
    r1, r2 = json.loads((one / "results.json").read_text()), json.loads((two / "results.json").read_text())
    assert r1["n_val_images"] == r2["n_val_images"] == 7  # every val image once, none twice
    assert r2["world_size"] == 2 and r1["global_batch"] == r2["global_batch"] == 4
    a, b = load_checkpoint(one / "last.pt"), load_checkpoint(two / "last.pt")
    for key, tensor in a["model"].items():
        torch.testing.assert_close(b["model"][key], tensor, rtol=1e-4, atol=1e-5, msg=key)
    assert r1["top1_err"] == pytest.approx(r2["top1_err"])
    assert len(b["rng"]) == 2  # one RNG snapshot per rank


@pytest.mark.xdist_group("one_process")  # its reference runs are computed once
@pytest.mark.slow
def test_torchrun_two_processes_equal_one(one_process, two_processes):
    assert_same_as_one_process(one_process, two_processes)


@pytest.mark.xdist_group("one_process")
@pytest.mark.slow
def test_torchrun_restarts_a_killed_worker_from_the_last_checkpoint(launch_folder, two_processes, tmp_path):
    # 2 processes x batch 2: 6 steps per epoch; rank 1 is SIGKILLed before its 9th step (epoch 1),
    # once; torchrun restarts both, and resume=true picks up epoch 1's checkpoint. The run must end
    # bit for bit where the uninterrupted one (two_processes) ended.
    wrapper = tmp_path / "faulty_train.py"
    wrapper.write_text(WRAPPER)
    killed, marker = tmp_path / "killed", tmp_path / "killed_once"
    args = [
        *procs.torchrun_here(),
        "--max-restarts=1",
        str(wrapper),
        str(REPO / "train.py"),
        *launcher_overrides(launch_folder, killed, 2),
        "resume=true",
    ]
    # Restarted workers must not reuse the dead attempt's store keys (pytorch/pytorch#135712):
    # resnet.runtime.distributed gives each attempt its own prefix.
    proc = launch(args, "step:9", FAULT_RANK="1", FAULT_ONCE=str(marker))
    assert_status(proc, 0)
    assert marker.exists()  # the kill happened
    assert proc.stdout.count("resumed from") == 1 and "after epoch 1" in proc.stdout

    results = json.loads((killed / "results.json").read_text())
    assert results["epochs"] == 2 and results["world_size"] == 2 and results["n_val_images"] == 7
    assert results["run_dir"] == str(killed)  # one run dir for both ranks and both attempts
    assert [r["epoch"] for r in read_csv(killed / "metrics.csv")] == ["1", "2"]
    ours = load_checkpoint(killed / "last.pt")
    assert_same_training(load_checkpoint(two_processes / "last.pt"), ours)
    assert len(ours["rng"]) == 2


@pytest.mark.slow
def test_submitit_local_launcher_runs_a_job_as_one_process_group(tiny_folder, tmp_path):
    # A job of 2 tasks must be one 2-process group that writes one results.json, not two
    # single-process runs racing for the same directory. (A sweep of two such jobs, through
    # submitit's SLURM executor: tests/cluster/test_slurm.py.)
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="hydra-submitit-launcher not installed")
    args = [o for o in tiny_overrides(tiny_folder, tmp_path, "epochs=1", "batch_size=2") if not o.startswith("run_dir")]
    run_script(
        [
            PY,
            "train.py",
            "-m",
            "hydra/launcher=submitit_local",
            f"hydra.sweep.dir={tmp_path}",
            "hydra.launcher.timeout_min=5",
            "hydra.launcher.tasks_per_node=2",
            "+padding=asymmetric",
            *args,
        ],
        env={"OMP_NUM_THREADS": "1", **submitit_tasks.sweep_env(tmp_path / "site")},  # tasks forked, not new
    )
    [results] = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*/results.json"))]
    assert results["padding_name"] == "asymmetric"
    assert (results["world_size"], results["global_batch"], results["n_val_images"]) == (2, 4, 7)
    assert len(load_checkpoint(tmp_path / "0" / "last.pt")["rng"]) == 2  # one RNG state per rank: one group


@pytest.mark.slow
def test_wandb_offline_run_logs_metrics_and_table(tiny_folder, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")  # the real wandb, in this process: its service writes the run
    run_in_process(tiny_folder, tmp_path, "epochs=1", "logger=wandb")
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    # wandb-core writes offline runs as one binary record log, once flushed (its exit record is
    # there); keys and JSON values are plain UTF-8.
    records = finished_log(runs[0]).read_bytes()
    val_top1_err = float(read_csv(tmp_path / "metrics.csv")[0]["val_top1_err"])
    needles = ("epoch/val_top1_err", "epoch/train_top1_err", "train/loss", "train/lr", json.dumps(val_top1_err))
    for needle in (*needles, "resnet_tiny"):
        assert needle.encode() in records, needle
    assert b"api_key" not in records.lower()
    table = json.loads(next(runs[0].rglob("results*.table.json")).read_text())
    assert "padding_name" in table["columns"] and len(table["data"]) == 1
    row = dict(zip(table["columns"], table["data"][0]))
    assert row["top1_err"] == pytest.approx(val_top1_err) and row["padding_name"] == "symmetric"
