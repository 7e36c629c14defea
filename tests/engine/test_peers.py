"""One process of a 2-process torchrun job (gloo) stalls, dies or is signalled alone; the launch
itself, where it makes folders and how torchrun reports a refusal. Each ends in one line that
names the process and the step, keeps the last checkpoint, and goes on exactly from it.

Faults come from the test-only wrapper (:data:`tests.helpers.faults.WRAPPER`): SIGSTOP or SIGKILL
of one rank before a chosen step, a signal to one rank, a pause until a signal arrives.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import time
from pathlib import Path

import pytest
import torch

from resnet.checkpoint import load_checkpoint
from resnet.job.checkpointer import CheckpointWriteError
from resnet.job.peers import Census, describe, failure_kind, first_survivor, process_state
from resnet.runtime.distributed import DistEnv, Launch
from tests.helpers import procs
from tests.helpers.faults import WRAPPER, assert_same_training, launch
from tests.helpers.training import REPO, launcher_overrides


def torchrun_launch(test):
    """A test that launches torchrun: slow, and on the worker that holds the reference runs."""
    return pytest.mark.slow(pytest.mark.xdist_group("one_process")(test))


# 2 processes x batch 2 of 24 images: 6 steps an epoch; the 9th loss is epoch 2's 3rd step, and with
# checkpoint_every=2 the last save before it is after batch 2 of epoch 2 (step 8)
SAVED_BEFORE_STEP_9 = "last.pt saved after batch 2 of epoch 2 (step 8) is intact"


@pytest.fixture(scope="module")
def wrapper(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("wrapper") / "faulty_train.py"
    path.write_text(WRAPPER)
    return path


def faulty(wrapper: Path, root: Path, run_dir: Path, *extra: str) -> list[str]:
    return [*procs.torchrun_here(), str(wrapper), str(REPO / "train.py"), *launcher_overrides(root, run_dir, 2),
            "resume=true", "checkpoint_every=2", *extra]  # fmt: skip


def errors(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error: ")]


def worker_exits(proc) -> list[int]:
    """The exit status of each worker, from torchrun's closing report."""
    return [int(code) for code in re.findall(r"^\s*exitcode\s*:\s*(-?\d+)", proc.stderr, re.MULTILINE)]


def assert_no_traceback_of_ours(proc) -> None:
    """torchrun ends a failed launch with its own traceback; no worker prints one (gloo's, ours)."""
    ours = (str(REPO / "resnet"), str(REPO / "data"), 'train.py", line', "distributed_c10d.py")
    frames = [
        line for line in proc.stderr.splitlines() if line.strip().startswith('File "') and any(o in line for o in ours)
    ]
    assert not frames, proc.stderr[-4000:]
    assert "GLHF" not in proc.stderr and "Connection reset" not in proc.stderr


@torchrun_launch
def test_a_dead_rank_is_named_in_one_line_and_the_printed_command_resumes_exactly(
    launch_folder, two_processes, wrapper, tmp_path
):
    run_dir = tmp_path / "run"
    proc = launch(faulty(wrapper, launch_folder, run_dir, "dist_timeout=60"), "step:9", FAULT_RANK="1")
    [line] = errors(proc)
    assert re.match(rf"error: rank 1 \(\S+, pid \d+\) died \(after step 8\); {re.escape(SAVED_BEFORE_STEP_9)}; "
                    r"not requeued \(not a SLURM job\); to go on: torchrun ", line), line  # fmt: skip
    assert sorted(worker_exits(proc)) == [-signal.SIGKILL, 75]  # the survivor: EX_TEMPFAIL, which requeues
    assert_no_traceback_of_ours(proc)
    assert f"traceback : {line}" in proc.stderr  # torchrun's report names the reason, not its docs link

    command = shlex.split(line.split("; to go on: ")[1])
    assert command[:3] == ["torchrun", "--nproc_per_node=2", "train.py"] and f"hydra.run.dir={run_dir}" in command
    resumed = procs.run([*procs.torchrun_here(), *command[2:]], timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "after batch 2 of epoch 2 (step 8)" in resumed.stdout
    assert_same_training(load_checkpoint(two_processes / "last.pt"), load_checkpoint(run_dir / "last.pt"))


@pytest.mark.slow
def test_with_three_ranks_the_dead_one_is_named_by_each_survivor_and_an_own_error_is_not_requeued(
    tiny_folder, wrapper, tmp_path
):
    # gloo's all-reduce is a ring: only the dead rank's neighbours see its socket close; the third
    # waits behind them. Heartbeats tell the dead rank from the blocked one, on every survivor.
    def three(run_dir: Path, fault: str) -> tuple:
        args = [a if not a.startswith("--nproc_per_node") else "--nproc_per_node=3"
                for a in faulty(wrapper, tiny_folder, run_dir, "dist_timeout=30")]  # fmt: skip
        proc = launch(args, fault, FAULT_RANK="1")
        # each worker's line as torchrun reports it (from its error file): on the shared stderr a
        # line of one rank can land after another's unfinished progress line
        return proc, re.findall(r"^\s*traceback : (error: .*)$", proc.stderr, re.MULTILINE)

    proc, lines = three(tmp_path / "killed", "step:7")
    assert len(lines) == 2, proc.stderr[-4000:]  # ranks 0 and 2, each its own line
    for line in lines:
        assert re.match(r"error: rank 1 \(\S+, pid \d+\) died \(after step 6\); last\.pt saved after ", line), line
    assert sorted(worker_exits(proc)) == [-signal.SIGKILL, 75, 75]

    proc, lines = three(tmp_path / "raised", "raise:7")  # an error of rank 1's own: going on would meet it again
    assert len(lines) == 2, proc.stderr[-4000:]  # rank 1 keeps its traceback (a bug's); the others one line each
    for line in lines:
        assert "failed: RuntimeError: out of memory on this rank (injected) (after step 6)" in line, line
        assert "not requeued: fix that, then go on: torchrun " in line
    assert 75 not in worker_exits(proc)


@pytest.mark.slow
def test_a_stalled_rank_is_named_within_dist_timeout_and_the_checkpoint_is_kept(tiny_folder, wrapper, tmp_path):
    # SIGSTOP: what a hung read, GPU or deadlock looks like from outside. torchrun would wait 30 s
    # before it kills the stopped worker once the other has ended; the test kills it at once.
    run_dir = tmp_path / "run"
    started = time.monotonic()
    launched = procs.start(faulty(wrapper, tiny_folder, run_dir, "dist_timeout=3"),
                           {"FAULT": "stall:9", "FAULT_RANK": "1"})  # fmt: skip
    said = ""
    while "error: rank 1" not in said and time.monotonic() - started < 120 and launched.poll() is None:
        time.sleep(0.2)
        said = (run_dir / "train.log").read_text() if (run_dir / "train.log").exists() else ""
    stalled = re.search(r"error: rank 1 \(\S+, pid (\d+)\)", said)
    assert stalled, said[-3000:]
    os.kill(int(stalled.group(1)), signal.SIGKILL)
    [proc] = procs.wait_all([launched], 60)
    [line] = errors(proc)
    assert re.match(
        r"error: rank 1 \(\S+, pid \d+\) is stopped \(SIGSTOP or a debugger\): rank 0 waited "
        rf"dist_timeout=3 s \(after step 8\); {re.escape(SAVED_BEFORE_STEP_9)}; not requeued",
        line,
    ), line
    assert 75 in worker_exits(proc)
    assert_no_traceback_of_ours(proc)
    saved = load_checkpoint(run_dir / "last.pt")
    assert (saved["epoch"], saved["step"], saved["epoch_partial"]["batches"]) == (1, 8, 2)


@torchrun_launch
def test_a_signal_to_one_rank_stops_every_rank_under_its_name_in_one_run_folder(launch_folder, wrapper, tmp_path):
    # SIGTERM to rank 1 alone; no hydra.run.dir: the run folder is the launch's, one for both workers.
    args = [a for a in faulty(wrapper, launch_folder, tmp_path) if not a.startswith(("hydra.run.dir=", "resume="))]
    proc = procs.run(args, {"FAULT": "term:9", "FAULT_RANK": "1", "SLURM_JOB_ID": ""}, timeout=180, cwd=tmp_path)
    [run_dir] = [p.parent for p in (tmp_path / "outputs").glob("*/*/.hydra")]  # one folder for the launch
    lines = [line for line in proc.stderr.splitlines() if line.startswith("stopped by")]
    assert lines == [f"stopped by SIGTERM: saved {run_dir / 'last.pt'}; not requeued (not a SLURM job); to go on: "
                     + lines[0].split("; to go on: ")[1]], proc.stderr[-3000:]  # fmt: skip
    assert worker_exits(proc) == [143, 143]  # every rank: the signal that arrived, and its status
    assert load_checkpoint(run_dir / "last.pt")["epoch_partial"]["batches"] == 3


@torchrun_launch
def test_sighup_to_torchrun_itself_saves_and_every_worker_says_so(launch_folder, wrapper, tmp_path):
    # A closed terminal: torchrun's own SIGHUP handler runs first and passes SIGHUP on to its workers.
    run_dir, marker = tmp_path / "run", tmp_path / "paused"
    started = procs.start(faulty(wrapper, launch_folder, run_dir),
                          {"FAULT": "pause:9", "FAULT_MARKER": str(marker), "SLURM_JOB_ID": ""})  # fmt: skip
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline and started.poll() is None:
        time.sleep(0.1)
    assert marker.exists(), "the run never reached its 9th step"
    os.kill(started.pid, signal.SIGHUP)
    [proc] = procs.wait_all([started], 120)
    assert f"stopped by SIGHUP: saved {run_dir / 'last.pt'}; not requeued (not a SLURM job); to go on: " in proc.stderr
    assert proc.stderr.count("stopped by SIGHUP") == 1, proc.stderr[-3000:]  # rank 0's line; torchrun ends on its own
    saved = load_checkpoint(run_dir / "last.pt")
    assert (saved["epoch"], saved["epoch_partial"]["batches"]) == (1, 3)


@torchrun_launch
def test_a_refusal_under_torchrun_is_the_reason_in_torchruns_report_and_no_stray_folder(tmp_path):
    args = [*procs.torchrun_here(), str(REPO / "train.py"), "model=resnet_tiny", "data=imagefolder",
            f"data.root={tmp_path / 'missing'}", "data.num_classes=3"]  # fmt: skip
    proc = procs.run(args, timeout=120, cwd=tmp_path)
    [line] = errors(proc)
    assert line.startswith(f"error: data.root={tmp_path / 'missing'} is not a directory")
    assert worker_exits(proc) == [2, 2] and proc.stderr.count(f"traceback : {line}") == 2
    assert_no_traceback_of_ours(proc)
    assert len(list((tmp_path / "outputs").glob("*/*"))) == 1  # one folder for the launch, not one per worker


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        (
            "[third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 3000ms for recv operation "
            "to complete",
            "timeout",
        ),
        (
            "[third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:13697: Connection reset by "
            "peer. This is typically caused by a remote worker hanging ... GLHF!",
            "closed",
        ),
        ("NCCL communicator was aborted on rank 1.", "closed"),
        ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE)", "timeout"),
        ("CUDA out of memory. Tried to allocate 2.00 GiB", None),  # the process's own failure, not a peer's
        ("DataLoader worker (pid 123) is killed by signal: Killed.", None),  # data.dataloader's case
    ],
)
def test_a_collective_that_failed_because_of_a_peer_is_told_from_any_other_error(message, kind):
    assert failure_kind(RuntimeError(message)) == kind
    assert failure_kind(ValueError(message)) is None
    # the run's own failure, in the same words (a checkpoint on a lost NFS mount): never a peer's
    assert failure_kind(CheckpointWriteError(f"could not write last.pt ({message})")) is None


def test_without_the_stores_host_every_survivor_requeues_and_with_it_the_lowest_left():
    # srun: rank 0 hosts the job's store; when it dies, no census can be taken, so every survivor
    # requeues (a second request finds the job requeued already).
    env = DistEnv(1, 3, 1, torch.device("cpu"), Launch("srun", 1, 3, job_id="7"),
                  peers=(("gpu01", 10), ("gpu01", 11), ("gpu02", 12)), timeout=60)  # fmt: skip
    assert describe(env, "closed", None, 42) == "rank 1 lost the job's store (rank 0 on gpu01) after step 42: its " \
        "connection closed"  # fmt: skip
    assert first_survivor(env, None)
    found = Census(gone=[1], failed={}, steps={0: 42, 2: 42})
    assert first_survivor(DistEnv(0, 3, 0, torch.device("cpu"), env.launch, peers=env.peers), found)
    assert not first_survivor(DistEnv(2, 3, 0, torch.device("cpu"), env.launch, peers=env.peers), found)
    # every rank still beats, one is behind the others: it is the one waited for
    behind = describe(env, "timeout", Census(gone=[], failed={}, steps={0: 42, 2: 40}), 42)
    assert behind == "rank 2 (gpu02, pid 12) is stuck at step 40: rank 1 waited dist_timeout=60 s (after step 42)"


def test_a_process_on_this_host_is_told_dead_stopped_or_running(tmp_path):
    import socket
    import subprocess

    here = socket.gethostname()
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert process_state(here, child.pid) == "running"
        os.kill(child.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while process_state(here, child.pid) != "stopped" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process_state(here, child.pid) == "stopped"
        child.kill()
        deadline = time.monotonic() + 10
        while process_state(here, child.pid) != "dead" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process_state(here, child.pid) == "dead"  # a zombie until reaped
    finally:
        child.kill()
        child.wait()
    assert process_state(here, child.pid) == "dead"  # gone
    assert process_state("another-host", os.getpid()) is None
