"""Faults: kill -9 and resume, a worker lost under torchrun, non-finite losses, hostile
checkpoints, bad configs and data layouts. Each ends in an exact resume or in one line.

Kills are deterministic: train.py runs through a test-only wrapper (:data:`tests.helpers.faults.WRAPPER`,
written into a temp dir) that patches one function and SIGKILLs its own process at a
chosen call. Production code has no hooks for this.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import pty
import re
import select
import shlex
import shutil
import signal
import subprocess
import termios
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DistributedSampler

from data.imagefolder import find_classes, find_images
from resnet.checkpoint import CheckpointError, load_checkpoint
from resnet.config import ConfigError, check_run_config
from resnet.engine import run as engine_run
from resnet.engine.loop import NonFiniteLoss
from resnet.engine.run import RunFailed
from resnet.weights import WeightsError
from tests.helpers import procs
from tests.helpers.compose import compose_config
from tests.helpers.evaluation import folder_overrides, run_eval
from tests.helpers.faults import (
    WRAPPER,
    assert_same_training,
    assert_status,
    error_line,
    launch,
    nan_at,
    stand_in_scontrol,
)
from tests.helpers.imagegen import make_folder
from tests.helpers.training import PY, REPO, read_csv, run_in_process, tiny_overrides

KILLED = -signal.SIGKILL


@pytest.fixture(scope="module")
def wrapper(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("wrapper") / "faulty_train.py"
    path.write_text(WRAPPER)
    return path


def overrides(root: Path, run_dir: Path, *extra: str) -> list[str]:
    return [
        "model=resnet_tiny", "data=imagefolder", f"data.root={root}", "data.num_classes=3", "data.image_size=32",
        "data.workers=0", "batch_size=4", "epochs=2", "log_every=2", f"hydra.run.dir={run_dir}", *extra,
    ]  # fmt: skip


def train_script(*args: str) -> subprocess.CompletedProcess:
    return launch([PY, "train.py", *args])


def assert_readable(run_dir: Path) -> int | None:
    """After any kill: last.pt is absent or loads whole. Returns its epoch."""
    if not (run_dir / "last.pt").exists():
        return None
    return load_checkpoint(run_dir / "last.pt")["epoch"]


# --- kill -9 and resume ------------------------------------------------------------------


@pytest.mark.slow
def test_killed_runs_resume_to_the_same_weights(tiny_folder, wrapper, tmp_path, one_thread, capsys):
    common = ("epochs=4", "seed=5")
    run_in_process(tiny_folder, tmp_path / "straight", *common)  # one thread, as the subprocesses: same bits
    run_dir = tmp_path / "killed"
    args = [PY, str(wrapper), str(REPO / "train.py"), *overrides(tiny_folder, run_dir, *common, "resume=true")]

    # 1. Mid-epoch, before the first checkpoint: nothing to resume from, the next run starts over.
    assert_status(launch(args, "step:4"), KILLED)
    assert assert_readable(run_dir) is None
    # 2. Halfway through writing the second checkpoint: the first one is untouched.
    proc = launch(args, "save:2")
    assert_status(proc, KILLED)
    assert "resumed from" not in proc.stdout and assert_readable(run_dir) == 1
    assert f"resume=true: no last.pt in {run_dir} yet; starting from step 0" in proc.stdout  # said, not silent
    assert "note: took over" in proc.stdout  # the killed run's run-dir lock, left behind
    partial = list(run_dir.glob(".last.pt.*.tmp"))
    assert len(partial) == 1 and partial[0].stat().st_size > 0  # the kill did land inside the write
    with pytest.raises(CheckpointError, match="is cut short or damaged"):  # half a file is no checkpoint
        load_checkpoint(partial[0])
    # 3. During validation, after resuming from epoch 1 and saving epoch 2.
    proc = launch(args, "eval:2")
    assert_status(proc, KILLED)
    assert "resumed from" in proc.stdout and assert_readable(run_dir) == 2
    # 4. Uninterrupted from epoch 2 to the end (in this process: what resumes is the file, not the process).
    run_in_process(tiny_folder, run_dir, *common, "resume=true")
    assert "after epoch 2" in capsys.readouterr().out

    assert_same_training(load_checkpoint(tmp_path / "straight" / "last.pt"), load_checkpoint(run_dir / "last.pt"))
    assert [r["epoch"] for r in read_csv(run_dir / "metrics.csv")] == ["1", "2", "3", "4"]  # once each
    assert json.loads((run_dir / "results.json").read_text())["epochs"] == 4


@pytest.mark.slow
def test_a_run_killed_mid_epoch_resumes_from_its_step_checkpoint(tiny_folder, wrapper, tmp_path, one_thread, capsys):
    # 6 batches an epoch, a checkpoint every 2: killed at the 5th step, it resumes after batch 4 of
    # the first epoch ("after batch 4 of epoch 1") and must end where the uninterrupted run ends
    # (loader workers and augmentation on).
    common = ("epochs=2", "seed=7", "checkpoint_every=2", "data.workers=2", "data.augment=true")
    run_in_process(tiny_folder, tmp_path / "straight", *common)
    run_dir = tmp_path / "killed"
    args = [PY, str(wrapper), str(REPO / "train.py"), *overrides(tiny_folder, run_dir, *common, "resume=true")]
    assert_status(launch(args, "step:5"), KILLED)
    saved = load_checkpoint(run_dir / "last.pt")
    assert (saved["epoch"], saved["step"], saved["epoch_partial"]["batches"]) == (0, 4, 4)
    run_in_process(tiny_folder, run_dir, *common, "resume=true")
    assert "after batch 4 of epoch 1 (step 4)" in capsys.readouterr().out
    assert_same_training(load_checkpoint(tmp_path / "straight" / "last.pt"), load_checkpoint(run_dir / "last.pt"))
    straight, resumed = read_csv(tmp_path / "straight" / "metrics.csv"), read_csv(run_dir / "metrics.csv")
    assert [r["train_loss"] for r in resumed] == [r["train_loss"] for r in straight]  # the partial epoch's sums too


def test_checkpoint_minutes_saves_mid_epoch_by_the_clock(tiny_folder, wrapper, tmp_path):
    # A checkpoint due as soon as the last one is written (checkpoint_minutes ~ 0): a save after
    # every step, so a kill before the 5th loses nothing but that step. At the default 10 minutes
    # these tiny runs save at epoch ends only (the kill -9 test above).
    run_dir = tmp_path / "killed"
    args = [PY, str(wrapper), str(REPO / "train.py"), *overrides(tiny_folder, run_dir, "checkpoint_minutes=1e-9")]
    assert_status(launch(args, "step:5"), KILLED)
    saved = load_checkpoint(run_dir / "last.pt")
    assert (saved["epoch"], saved["step"], saved["epoch_partial"]["batches"]) == (0, 4, 4)


@pytest.mark.slow
def test_a_preemption_signal_saves_requeues_and_the_requeued_job_resumes_exactly(
    tiny_folder, wrapper, tmp_path, one_thread, monkeypatch
):
    # sbatch --signal=USR1@120 --requeue: the run saves after the step it is in, asks SLURM to
    # requeue it (a stand-in scontrol records the call), and exits 0; the requeued job resumes.
    common = ("epochs=2", "seed=3")
    run_in_process(tiny_folder, tmp_path / "straight", *common)
    slurm = {"SLURM_JOB_ID": "4321", **stand_in_scontrol(tmp_path)}
    run_dir = tmp_path / "job"
    args = [PY, str(wrapper), str(REPO / "train.py"), *overrides(tiny_folder, run_dir, *common, "resume=true")]
    proc = launch(args, "usr1:8", **slurm)  # epoch 1, batch 2
    assert_status(proc, 0)
    assert "stopped by SIGUSR1" in proc.stderr and "requeued SLURM job 4321" in proc.stderr
    assert (tmp_path / "scontrol.log").read_text().split() == ["requeue", "4321"]
    saved = load_checkpoint(run_dir / "last.pt")
    assert (saved["epoch"], saved["step"], saved["epoch_partial"]["batches"]) == (1, 8, 2)
    for name, value in slurm.items():  # the requeued job, in this process: it resumes from the file
        monkeypatch.setenv(name, value)
    run_in_process(tiny_folder, run_dir, *common, "resume=true")
    assert_same_training(load_checkpoint(tmp_path / "straight" / "last.pt"), load_checkpoint(run_dir / "last.pt"))


def test_a_stop_signal_outside_slurm_saves_and_says_how_to_resume(tiny_folder, wrapper, tmp_path):
    run_dir = tmp_path / "run"
    args = [PY, str(wrapper), str(REPO / "train.py"), *overrides(tiny_folder, run_dir, "epochs=1")]
    proc = launch(args, "usr1:2", SLURM_JOB_ID="")
    assert_status(proc, 3)
    assert "not requeued (not a SLURM job)" in proc.stderr and "Traceback" not in proc.stderr
    assert load_checkpoint(run_dir / "last.pt")["epoch_partial"]["batches"] == 2


# --- stop signals outside SLURM (docker stop, systemd, Ctrl-C) and finished runs ------------


@pytest.fixture(scope="module")
def straight(tiny_folder, tmp_path_factory) -> Path:
    """An uninterrupted 2-epoch run (seed 3), one thread as the subprocesses: the weights and
    results every stopped-and-resumed run below must reach."""
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_in_process(tiny_folder, run_dir, "seed=3")
    finally:
        torch.set_num_threads(threads)
    return run_dir


def untimed_results(run_dir: Path) -> dict:
    results = json.loads((run_dir / "results.json").read_text())
    when = ("wall_seconds", "date", "git_commit", "run_dir", "train_images_per_s", "val_images_per_s")
    return {k: v for k, v in results.items() if k not in when}


@pytest.mark.slow
@pytest.mark.parametrize("kind, status", [("term", 143), ("int", 130), ("hup", 129)])
def test_sigterm_sigint_and_sighup_save_mid_epoch_print_the_resume_command_and_it_resumes_exactly(
    tiny_folder, straight, wrapper, tmp_path, kind, status
):
    run_dir = tmp_path / "run"
    args = [PY, str(wrapper), str(REPO / "train.py"), *overrides(tiny_folder, run_dir, "seed=3")]
    proc = launch(args, f"{kind}:8", SLURM_JOB_ID="")  # epoch 1, batch 2
    assert_status(proc, status)
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr, proc.stderr[-2000:]
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("stopped by")]
    name = {"term": "SIGTERM", "int": "SIGINT", "hup": "SIGHUP"}[kind]
    saved_line = f"stopped by {name}: saved {run_dir / 'last.pt'}; not requeued (not a SLURM job); to go on: "
    assert line.startswith(saved_line), line
    saved = load_checkpoint(run_dir / "last.pt")
    assert (saved["epoch"], saved["step"], saved["epoch_partial"]["batches"]) == (1, 8, 2)
    command = shlex.split(line.split("; to go on: ")[1])
    assert command[:2] == ["python", "train.py"] and f"hydra.run.dir={run_dir}" in command and "resume=true" in command
    resumed = launch([PY, *command[1:]])  # the printed command, as typed
    assert_status(resumed, 0)
    assert "resumed from" in resumed.stdout and "after batch 2 of epoch 2 (step 8)" in resumed.stdout
    assert_same_training(load_checkpoint(straight / "last.pt"), load_checkpoint(run_dir / "last.pt"))
    assert untimed_results(run_dir) == untimed_results(straight)


@pytest.mark.slow
def test_a_closed_terminal_saves_and_train_log_says_how_to_go_on(tiny_folder, wrapper, tmp_path):
    # train.py on a terminal (a pty it controls); the terminal closes mid-epoch: the kernel sends
    # SIGHUP, and every later write to the terminal fails. The run saves, writes its line to
    # train.log and exits 129; nothing of it is lost but the screen.
    run_dir, marker = tmp_path / "run", tmp_path / "paused"
    master, terminal = pty.openpty()

    def control_the_terminal() -> None:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    env = procs.command_env({"FAULT": "pause:8", "FAULT_MARKER": str(marker), "SLURM_JOB_ID": ""})
    args = [PY, str(wrapper), str(REPO / "train.py"), *overrides(tiny_folder, run_dir, "seed=3")]
    proc = subprocess.Popen(args, stdin=terminal, stdout=terminal, stderr=terminal, cwd=REPO, env=env,
                            preexec_fn=control_the_terminal)  # fmt: skip
    os.close(terminal)
    screen = b""
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            if select.select([master], [], [], 0.1)[0]:
                with contextlib.suppress(OSError):
                    screen += os.read(master, 65536)
        assert marker.exists(), screen.decode(errors="replace")[-3000:]
    finally:
        os.close(master)  # the terminal is gone
    try:
        status = proc.wait(timeout=120)
    finally:
        proc.kill()
    assert status == 129, (run_dir / "train.log").read_text()[-3000:]
    log = (run_dir / "train.log").read_text()
    assert f"stopped by SIGHUP: saved {run_dir / 'last.pt'}; not requeued (not a SLURM job); to go on: python " in log
    saved = load_checkpoint(run_dir / "last.pt")
    assert (saved["epoch"], saved["step"], saved["epoch_partial"]["batches"]) == (1, 8, 2)


def test_a_second_ctrl_c_stops_at_once_in_one_line(tiny_folder, wrapper, tmp_path):
    run_dir = tmp_path / "run"
    args = [PY, str(wrapper), str(REPO / "train.py"), *overrides(tiny_folder, run_dir, "epochs=1")]
    line = error_line(launch(args, "int2:2", SLURM_JOB_ID=""), status=130)
    assert line.startswith("error: interrupted twice: stopped at once, without saving")
    assert not (run_dir / "last.pt").exists()


@pytest.mark.slow
def test_a_finished_run_started_again_keeps_its_files_byte_for_byte(tiny_folder, straight, tmp_path, capsys):
    run_dir = tmp_path / "done"
    shutil.copytree(straight, run_dir)
    files = {name: (run_dir / name).read_bytes() for name in ("results.json", "metrics.csv", "steps.csv", "last.pt")}
    top1 = json.loads(files["results.json"])["top1_err"]
    said = f"run in {run_dir} already finished: top-1 err {top1:.2f}%; results.json kept"
    proc = train_script(*overrides(tiny_folder, run_dir, "seed=3", "resume=true"))  # as a command: status 0
    assert_status(proc, 0)
    assert said in proc.stdout and "resumed from" not in proc.stdout and "Traceback" not in proc.stderr
    last = proc.stdout.strip().splitlines()[-1]  # what to do with it instead: evaluate its last.pt
    assert last == f"evaluate it: python eval.py weights={run_dir / 'last.pt'} data=imagefolder data.root={tiny_folder}"
    assert {name: (run_dir / name).read_bytes() for name in files} == files
    for extra in (("resume=false",), ("resume=true", "data.workers=1")):  # the same check, in this process
        assert run_in_process(tiny_folder, run_dir, "seed=3", *extra) == json.loads(files["results.json"])
        assert said in capsys.readouterr().out
        assert {name: (run_dir / name).read_bytes() for name in files} == files
    # a finished run of another config is not "finished" for this one: refused in one line, nothing written
    line = config_error(tiny_folder, run_dir, "seed=4", "resume=true")
    assert f"{run_dir} holds a finished run of another config" in line and "seed=3, this run has 4" in line
    assert {name: (run_dir / name).read_bytes() for name in files} == files


@pytest.mark.slow
def test_a_stop_during_the_last_validation_or_before_results_ends_with_the_uninterrupted_results(
    tiny_folder, straight, wrapper, tmp_path, capsys, one_thread
):
    # Under SLURM (a stand-in scontrol records any requeue): USR1 during the final validation is
    # after the last epoch's training: the run writes its results, exits 0, and requeues nothing.
    slurm = {"SLURM_JOB_ID": "4321", **stand_in_scontrol(tmp_path)}
    run_dir = tmp_path / "usr1"
    args = [PY, str(wrapper), str(REPO / "train.py"), *overrides(tiny_folder, run_dir, "seed=3", "resume=true")]
    proc = launch(args, "usr1val:2", **slurm)
    assert_status(proc, 0)
    assert "note: SIGUSR1 arrived after the last epoch was saved; the run is complete, not requeued" in proc.stdout
    assert not (tmp_path / "scontrol.log").exists()
    assert untimed_results(run_dir) == untimed_results(straight)
    # Killed after the last checkpoint, before results.json (a requeue, a node failure): the rerun
    # trains nothing and writes the results the uninterrupted run wrote, from the saved history.
    run_dir = tmp_path / "killed"
    args = [PY, str(wrapper), str(REPO / "train.py"), *overrides(tiny_folder, run_dir, "seed=3", "resume=true")]
    assert_status(launch(args, "finish:1"), KILLED)
    assert not (run_dir / "results.json").exists() and load_checkpoint(run_dir / "last.pt")["epoch"] == 2
    capsys.readouterr()
    run_in_process(tiny_folder, run_dir, "seed=3", "resume=true")  # what is resumed is the file, not the process
    out, err = capsys.readouterr()
    assert "resumed from" in out and "batches" not in err  # nothing trained again
    assert untimed_results(run_dir) == untimed_results(straight)
    assert [r["epoch"] for r in read_csv(run_dir / "metrics.csv")] == ["1", "2"]


@pytest.mark.parametrize("state", ["RUNNING", "COMPLETING"])
def test_a_signal_during_start_up_requeues_without_a_checkpoint_unless_the_job_was_cancelled(
    tiny_folder, wrapper, tmp_path, state
):
    # RUNNING: a preemption's TERM (its GraceTime running) or a warning: requeued. COMPLETING: what
    # scancel leaves while its TERM arrives: a requeue would undo the user's cancel.
    run_dir = tmp_path / "run"
    args = [PY, str(wrapper), str(REPO / "train.py"), *overrides(tiny_folder, run_dir, "resume=true")]
    proc = launch(args, "termstart:1", SLURM_JOB_ID="77", **stand_in_scontrol(tmp_path, state))
    assert_status(proc, 0 if state == "RUNNING" else 143)
    said = "requeued SLURM job 77" if state == "RUNNING" else "not requeued: SLURM job 77 is COMPLETING"
    assert ("stopped by SIGTERM: before its first step, nothing new to save (no last.pt was written before); "
            f"{said}") in proc.stderr  # fmt: skip
    requeues = (tmp_path / "scontrol.log").read_text().split() if (tmp_path / "scontrol.log").exists() else []
    assert requeues == (["requeue", "77"] if state == "RUNNING" else [])
    assert not (run_dir / "last.pt").exists()


def test_settings_that_may_change_on_resume_are_applied_and_reported(tiny_folder, tmp_path, capsys, one_thread):
    run_in_process(tiny_folder, tmp_path, "epochs=2", "stop_after=1")
    capsys.readouterr()
    run_in_process(tiny_folder, tmp_path, "epochs=2", "resume=true", "log_every=3", "eval_every=2")
    out = capsys.readouterr().out
    assert "changed on resume: eval_every: 1 -> 2; log_every: 2 -> 3" in out
    assert load_checkpoint(tmp_path / "last.pt")["config"]["log_every"] == 3  # recorded: the next resume compares it


def test_device_cuda_without_a_gpu_is_one_line(tiny_folder, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here")
    line = config_error(tiny_folder, tmp_path / "run", "device=cuda")
    assert line.startswith("device=cuda but no CUDA device is visible") and "pass device=cpu" in line


@pytest.mark.slow
def test_a_rank_fed_only_corrupt_files_does_not_hang_ddp(tiny_folder, tmp_path):
    # 2 processes x batch 2, one loader worker each. Every file rank 1 reads in epoch 0 is damaged on
    # disk (empty, cut short, not an image): each of its 6 batches is empty. Both processes skip
    # every step together (rank 0's readable images are counted as unused), validate and end.
    root = tmp_path / "data"
    shutil.copytree(tiny_folder, root)
    classes = find_classes(root / "train")
    files = [Path(path) for path, _ in find_images(root / "train", classes)]
    share = DistributedSampler(range(len(files)), num_replicas=2, rank=1, shuffle=True, seed=0)  # seed=0: train.yaml's
    damage = [lambda b: b"", lambda b: b[: len(b) // 3], lambda b: b"not a JPEG at all"]
    for n, index in enumerate(share):
        files[index].write_bytes(damage[n % 3](files[index].read_bytes()))
    run_dir = tmp_path / "run"
    args = [*procs.torchrun_here(), "train.py",
            *overrides(root, run_dir, "epochs=1", "batch_size=2", "data.workers=1", "max_unreadable=1")]  # fmt: skip
    proc = launch(args, timeout=120)
    assert_status(proc, 0)
    [row] = read_csv(run_dir / "metrics.csv")
    assert (row["skipped_images"], row["empty_steps"], row["unused_images"]) == ("12", "6", "12")
    assert "6 steps skipped on every process" in proc.stdout
    results = json.loads((run_dir / "results.json").read_text())
    assert results["world_size"] == 2 and results["n_val_images"] == 7 and results["skipped_images"] == 12


@pytest.mark.slow
def test_a_loader_worker_killed_mid_epoch_is_one_line_and_resume_goes_on(tiny_folder, wrapper, tmp_path, capsys):
    run = overrides(tiny_folder, tmp_path, "data.workers=1", "resume=true")
    args = [PY, str(wrapper), str(REPO / "train.py"), *run]
    line = error_line(launch(args, "worker:30"), status=1)  # 24 train images an epoch: in the second epoch
    assert line.startswith("error: DataLoader worker (pid") and "was killed by signal 9 (SIGKILL)" in line
    assert "last.pt saved after epoch 1 (step 6) is intact" in line
    assert "lower data.workers or batch_size, then run again with resume=true" in line
    assert load_checkpoint(tmp_path / "last.pt")["epoch"] == 1
    run_in_process(tiny_folder, tmp_path, "data.workers=1", "resume=true")
    assert "after epoch 1" in capsys.readouterr().out
    assert json.loads((tmp_path / "results.json").read_text())["epochs"] == 2


# --- non-finite loss ---------------------------------------------------------------------


def test_nonfinite_loss_stops_naming_the_step_and_keeps_the_last_checkpoint(tiny_folder, tmp_path, monkeypatch):
    # The 9th loss is step 9: epoch 2, batch 3 (6 steps per epoch). train.py prints the message as
    # its one error line, exit status 1, like every RunFailed (test_a_loader_worker_killed_...).
    nan_at(monkeypatch, 9)
    with pytest.raises(NonFiniteLoss) as stopped:
        run_in_process(tiny_folder, tmp_path)
    line = str(stopped.value)
    assert "non-finite loss (nan) at step 9 (epoch 2, batch 3)" in line and "on_nonfinite=skip" in line
    assert "\n" not in line
    checkpoint = load_checkpoint(tmp_path / "last.pt")
    assert checkpoint["epoch"] == 1 and checkpoint["step"] == 6
    assert all(torch.isfinite(t).all() for t in checkpoint["model"].values() if t.is_floating_point())
    assert not (tmp_path / "results.json").exists()


def test_nonfinite_loss_skipped_and_counted(tiny_folder, tmp_path, monkeypatch, one_thread):
    nan_at(monkeypatch, 3)
    run_in_process(tiny_folder, tmp_path, "on_nonfinite=skip", "max_skipped=0.2")  # 1 of 6 steps
    rows = read_csv(tmp_path / "metrics.csv")
    assert [r["skipped_steps"] for r in rows] == ["1", "0"]
    assert [r["step"] for r in rows] == ["5", "11"]  # a skipped step is not an optimizer step
    assert load_checkpoint(tmp_path / "last.pt")["step"] == 11


def test_skipping_most_steps_stops_in_one_line_and_keeps_the_epoch_before(tiny_folder, tmp_path, monkeypatch):
    # every loss from the 8th on is NaN: epoch 2 skips 5 of its 6 steps, more than max_skipped=0.05
    nan_at(monkeypatch, 8, onwards=True)
    with pytest.raises(NonFiniteLoss) as stopped:
        run_in_process(tiny_folder, tmp_path, "on_nonfinite=skip")
    line = str(stopped.value)
    assert "on_nonfinite=skip skipped 5 of the 6 steps of epoch 2 (83%, more than max_skipped=0.05)" in line
    assert "last.pt saved after epoch 1 (step 6) is intact" in line and "\n" not in line
    assert load_checkpoint(tmp_path / "last.pt")["epoch"] == 1 and not (tmp_path / "results.json").exists()


def test_a_state_gone_non_finite_is_never_saved_and_a_lower_lr_resumes_from_the_last_finite_one(
    tiny_folder, tmp_path, monkeypatch, capsys, one_thread
):
    # optim.lr=1e6: losses can stay finite while an update overflows the weights. Whatever stops the
    # run (the state check at a save, or a non-finite loss), it is one line and last.pt holds only
    # finite tensors (there, huge ones: a state that diverged that far fails again at a lower LR).
    with pytest.raises((NonFiniteLoss, RunFailed)) as stopped:
        run_in_process(tiny_folder, tmp_path / "huge", "optim.lr=1e6", "checkpoint_every=1")
    assert "\n" not in str(stopped.value)
    saved = load_checkpoint(tmp_path / "huge" / "last.pt")
    tensors = [*saved["model"].values(), *(t for s in saved["optimizer"]["state"].values() for t in s.values())]
    assert all(torch.isfinite(t).all() for t in tensors if t.is_floating_point())

    # The 5th update overflows one weight while every loss so far was finite: its save is refused,
    # last.pt keeps step 4, and the advised resume with a lower LR trains on to the end.
    real = engine_run.build_optimizer

    def overflowing(*args, **kwargs):
        optimizer, calls = real(*args, **kwargs), [0]

        def after_step(opt, args, kwargs):
            calls[0] += 1
            if calls[0] == 5:
                with torch.no_grad():
                    weight = opt.param_groups[0]["params"][0]
                    weight[(0,) * weight.dim()] = float("inf")

        optimizer.register_step_post_hook(after_step)
        return optimizer

    monkeypatch.setattr(engine_run, "build_optimizer", overflowing)
    with pytest.raises(RunFailed, match=r"^the training state went non-finite by step 5 \(") as stopped:
        run_in_process(tiny_folder, tmp_path / "run", "checkpoint_every=1")
    assert "last.pt saved after batch 4 of epoch 1 (step 4) is intact. Resume from it with a lower LR" in str(
        stopped.value
    )
    monkeypatch.setattr(engine_run, "build_optimizer", real)
    capsys.readouterr()
    run_in_process(tiny_folder, tmp_path / "run", "checkpoint_every=1", "resume=true", "optim.lr=0.2")
    assert "changed on resume: optim.lr: 0.4 -> 0.2" in capsys.readouterr().out
    done = load_checkpoint(tmp_path / "run" / "last.pt")
    assert done["epoch"] == 2 and all(torch.isfinite(t).all() for t in done["model"].values() if t.is_floating_point())


def test_the_save_refuses_a_non_finite_state_and_keeps_the_file(tiny_folder, tmp_path, one_thread, monkeypatch):
    from resnet.job.checkpointer import NonFiniteState

    run_in_process(tiny_folder, tmp_path, "stop_after=1")
    before = (tmp_path / "last.pt").read_bytes()
    real_save = engine_run.Checkpointer.save

    def poisoned(self, *args, **kwargs):
        with torch.no_grad():
            weight = next(self.training.model.parameters())
            weight[(0,) * weight.dim()] = float("inf")
        return real_save(self, *args, **kwargs)

    monkeypatch.setattr(engine_run.Checkpointer, "save", poisoned)
    with pytest.raises(NonFiniteState) as refused:
        run_in_process(tiny_folder, tmp_path, "epochs=2", "resume=true")
    assert str(refused.value).startswith("the training state went non-finite by step 12 (1 tensors, e.g. model.")
    assert "not saved; the previous last.pt is intact" in str(refused.value)
    assert (tmp_path / "last.pt").read_bytes() == before


# --- hostile checkpoints -----------------------------------------------------------------


class _Payload:
    """Unpickling this creates a file: stands in for any code an attacker would run."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').close()",)


def test_pickled_code_is_refused_by_train_and_eval(tiny_folder, tmp_path):
    marker, hostile = tmp_path / "pwned", tmp_path / "hostile.pt"
    torch.save({"model": {}, "meta": {}, "epoch": 1, "step": 1, "optimizer": _Payload(marker)}, hostile)

    line = config_error(tiny_folder, tmp_path / "run", f"resume={hostile}")
    assert "refusing to load" in line and str(hostile) in line
    assert not marker.exists()

    results = tmp_path / "r.jsonl"
    with pytest.raises(WeightsError, match="refusing to load"):
        run_eval(*folder_overrides(tiny_folder, hostile, results))
    assert not marker.exists() and not results.exists()

    torch.load(hostile, weights_only=False)  # control: the payload is live
    assert marker.exists()


def test_resuming_another_architecture_optimizer_schedule_or_a_damaged_file_is_one_line(tiny_folder, tmp_path):
    run_in_process(tiny_folder, tmp_path / "tiny", "epochs=1")
    last = tmp_path / "tiny" / "last.pt"
    line = config_error(tiny_folder, tmp_path / "small", f"resume={last}", "model=resnet_small")
    assert f"{last} was trained with model.arch=resnet_tiny, this run has resnet_small" in line
    assert "(model=resnet_tiny) to resume it" in line
    line = config_error(tiny_folder, tmp_path / "adamw", f"resume={last}", "optim=adamw")
    assert "was trained with optim.name=sgd, this run has adamw (and " in line and "pass the optim= it" in line
    line = config_error(tiny_folder, tmp_path / "cosine", f"resume={last}", "sched=cosine")
    assert "was trained with sched.name=onecycle, this run has cosine" in line and "pass the sched= it" in line
    # the padding as built: +padding=asymmetric on a run trained under the model's own (symmetric) one
    line = config_error(tiny_folder, tmp_path / "asym", f"resume={last}", "+padding=asymmetric")
    assert f"{last} was trained with padding=symmetric, this run has asymmetric" in line
    assert "pass +padding=symmetric to resume it" in line
    half = tmp_path / "half.pt"
    half.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    line = config_error(tiny_folder, tmp_path / "half", f"resume={half}")
    assert line.startswith(f"{half} is cut short or damaged")
    for run in ("small", "adamw", "cosine", "asym", "half"):  # refused before anything was written
        assert not list((tmp_path / run).glob("*.csv")) + list((tmp_path / run).glob("*.pt"))


# --- bad configuration and data layouts ---------------------------------------------------


def config_error(root: Path, run_dir: Path, *extra: str) -> str:
    """The ConfigError an in-process run raises; train.py prints exactly this as its one line
    (the subprocess tests below check that wrapper once)."""
    with pytest.raises(ConfigError) as raised:
        run_in_process(root, run_dir, *extra)
    message = str(raised.value)
    assert "\n" not in message, message
    return message


def test_a_bad_value_is_one_error_line_from_the_command_line(tiny_folder, tmp_path):
    line = error_line(train_script(*overrides(tiny_folder, tmp_path / "run"), "batch_size=-4"))
    assert line == "error: batch_size=-4: expected a whole number >= 1, e.g. batch_size=128"
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").glob("*.pt"))


@pytest.mark.parametrize(
    "override, message",
    [
        ("batch_size=-4", "batch_size=-4: expected a whole number >= 1, e.g. batch_size=128"),
        ("+padding.stem_pool=sideways", "stem_pool"),
        ("+padding.preset=sideways", "unknown padding preset 'sideways'; choose one of"),
        ("data.root={file}", "is a file; imagefolder needs a directory"),
        ("data.workers=-1", "data.workers=-1 is out of range"),
        ("data.workers=100000", "to the {cores} CPU cores this process may use (torch warns above that)"),
        ("data.workers=many", "data.workers=many is out of range"),
    ],
)
def test_bad_values_fail_before_any_work_in_one_line(tiny_folder, tmp_path, override, message):
    (tmp_path / "file").write_text("not a dataset")
    message = message.format(cores=len(os.sched_getaffinity(0)))
    assert message in config_error(tiny_folder, tmp_path / "run", override.format(file=tmp_path / "file"))
    assert not list((tmp_path / "run").glob("*.csv")) + list((tmp_path / "run").glob("*.pt"))  # nothing started


@pytest.mark.parametrize(
    "command", [("+padding.stem_conv=foo",), ("+padding=asymmetric", "padding.stem_conv=foo")], ids=["site", "preset"]
)
def test_a_bad_scheme_suggests_an_override_that_works_as_typed(tiny_folder, tmp_path, command):
    line = config_error(tiny_folder, tmp_path / "run", *command)
    assert line.startswith("unknown stem_conv scheme 'foo'; choose one of symmetric, same")
    hint = re.search(r"\(e\.g\. (\S+)\)$", line).group(1)
    assert hint.endswith("padding.stem_conv=symmetric")
    cfg = compose_config("train", *tiny_overrides(tiny_folder, tmp_path / "run", *command[:-1], hint))  # composes
    check_run_config(cfg)  # and passes
    assert cfg.padding.stem_conv == "symmetric"


def test_unknown_preset_name_is_hydras_message_listing_the_choices(tiny_folder, tmp_path):
    proc = train_script(*overrides(tiny_folder, tmp_path / "run"), "+padding=sideways")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "Could not find 'padding/sideways'" in proc.stderr and "asymmetric" in proc.stderr


@pytest.mark.parametrize(
    "train, val, message",
    [
        ({"a": 2, "b": 2, "c": 0}, {"a": 1, "b": 1, "c": 1}, "has no images"),
        ({"a": 2, "b": 2, "c": 2}, {"a": 1, "b": 1}, "missing in val: c; only in val: -"),
        ({"a": 2, "b": 2, "c": 2}, {"a": 1, "b": 1, "c": 1, "d": 1}, "missing in val: -; only in val: d"),
    ],
    ids=["empty-class", "class-missing-from-val", "class-only-in-val"],
)
def test_bad_dataset_layout_is_one_line(tmp_path, train, val, message):
    make_folder(tmp_path / "data" / "train", train, size=(40, 36))
    make_folder(tmp_path / "data" / "val", val, size=(40, 36))
    assert message in config_error(tmp_path / "data", tmp_path / "run")
    assert not (tmp_path / "run" / "last.pt").exists()


@pytest.mark.slow
def test_a_full_disk_while_writing_the_run_logs_is_one_line_and_the_resume_is_exact(
    tiny_folder, straight, tmp_path, monkeypatch, one_thread
):
    # The disk fills as epoch 2's rows are flushed to steps.csv: one line naming the file and what is
    # kept (epoch 1's last.pt), no steps.csv.tmp left; freed, resume=true ends as the uninterrupted run.
    real_fsync, calls = os.fsync, []

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("steps.csv.tmp"):
            calls.append(fd)
            if len(calls) == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    run_dir = tmp_path / "run"
    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(RunFailed) as failed:
        run_in_process(tiny_folder, run_dir, "seed=3")
    assert str(failed.value) == (f"could not write {run_dir / 'steps.csv'} (No space left on device); last.pt saved "
                                 "after epoch 1 (step 6) is intact: free space or pass another hydra.run.dir, then "
                                 "run again with resume=true")  # fmt: skip
    assert sorted(p.name for p in run_dir.glob("*.tmp")) == []
    monkeypatch.setattr(os, "fsync", real_fsync)
    run_in_process(tiny_folder, run_dir, "seed=3", "resume=true")
    assert_same_training(load_checkpoint(straight / "last.pt"), load_checkpoint(run_dir / "last.pt"))
    assert [r["epoch"] for r in read_csv(run_dir / "metrics.csv")] == ["1", "2"]
    untimed = [[{k: v for k, v in r.items() if k != "images_per_s"} for r in read_csv(d / "steps.csv")]
               for d in (run_dir, straight)]  # fmt: skip
    assert untimed[0] == untimed[1]  # every step's row once, epoch 2's written by the resume


def test_metrics_and_results_are_replaced_whole_never_left_half_written(tmp_path, monkeypatch):
    # A run killed inside a write (here: the rename never happens) leaves the file as it was before it.
    from resnet.engine.runlog import CsvLog, write_json

    log = CsvLog(tmp_path / "metrics.csv")
    log.write({"epoch": 1, "train_loss": 0.5})
    write_json(tmp_path / "results.json", {"top1_err": 7.0})
    before = {name: (tmp_path / name).read_bytes() for name in ("metrics.csv", "results.json")}

    def killed(src, dst):
        raise KeyboardInterrupt  # stands in for the process dying between the write and the rename

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        log.write({"epoch": 2, "train_loss": 0.4})
    with pytest.raises(KeyboardInterrupt):
        write_json(tmp_path / "results.json", {})
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    monkeypatch.undo()
    log.write({"epoch": 2, "train_loss": 0.4}, {"epoch": 3, "train_loss": 0.3})
    assert [r["epoch"] for r in read_csv(tmp_path / "metrics.csv")] == ["1", "2", "3"]


def test_a_row_with_a_new_key_widens_the_csv_keeping_every_row(tmp_path, monkeypatch):
    # A run resumed from before a metric was added: its metrics.csv has fewer columns than the new rows.
    # The file is rewritten whole (a temporary file, then os.replace) under the wider header; no row is lost.
    from resnet.engine.runlog import CsvLog

    path = tmp_path / "metrics.csv"
    path.write_text("epoch,train_loss\n1,0.5\n2,0.4\n")
    renames = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (renames.append((src, dst)), real_replace(src, dst)))
    log = CsvLog(path)  # as a resumed run opens it
    log.write({"epoch": 3, "train_loss": 0.3, "train_top5_err": 12.5})
    assert renames == [(path.with_suffix(".csv.tmp"), path)] and not path.with_suffix(".csv.tmp").exists()
    assert path.read_text() == "epoch,train_loss,train_top5_err\n1,0.5,\n2,0.4,\n3,0.3,12.5\n"
    log.write({"epoch": 4, "train_loss": 0.2, "train_top5_err": 10.0})  # the wider header, appended to
    log.write({"epoch": 5, "val_top1_err": 50.0})  # a key of its own, another missing: both kept
    assert [list(r.values()) for r in read_csv(path)] == [
        ["1", "0.5", "", ""],
        ["2", "0.4", "", ""],
        ["3", "0.3", "12.5", ""],
        ["4", "0.2", "10.0", ""],
        ["5", "", "", "50.0"],
    ]
    assert list(read_csv(path)[0]) == ["epoch", "train_loss", "train_top5_err", "val_top1_err"]
