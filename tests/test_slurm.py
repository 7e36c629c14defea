"""Against a real SLURM: slurmctld and two slurmd nodes, each node in its own network namespace
(tests/cluster/slurm_up.sh). Every job here is submitted to slurmctld and checked there
(``scontrol show job``), so a stand-in srun or scontrol cannot pass these tests.

- the README's ``sbatch scripts/slurm.sbatch`` on 2 nodes x 1 task ends with the weights of a
  2-process torchrun run of the same config, its two tasks in two network namespaces;
- ``scancel --signal=USR1 --batch`` mid-epoch: the job saves, the real ``scontrol requeue`` runs,
  and the requeued job resumes in the same run dir to the weights of the uninterrupted run;
- the README's ``hydra/launcher=submitit_slurm`` sweep (2 jobs x 2 tasks) runs through submitit's
  SLURM executor, each job one 2-process group.

Skipped, with one line saying how to enable them, where SLURM is not installed or we are not root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.helpers import procs

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
TORCHRUN = str(Path(PY).with_name("torchrun"))
UP = REPO / "tests" / "cluster" / "slurm_up.sh"

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.xdist_group("slurm")]

TASK_LOG = """#!/bin/sh
# PYTHON for the sbatch script: note where this task runs, then run the real interpreter.
echo "$SLURM_PROCID $SLURMD_NODENAME $(readlink /proc/self/ns/net) $(getent hosts "$(hostname)" | cut -d' ' -f1)" \\
    >> "$TASK_LOG"
exec {python} "$@"
"""

PAUSE = '''"""train.py whose rank 0 waits at its 8th loss (epoch 1, batch 2) until a stop signal has
arrived, once (a marker file): the test sends it with scancel while the job is there."""
import os, runpy, sys, time
from pathlib import Path

import resnet.engine.run as engine_run
from resnet.engine.preempt import StopRequest

marker, seen, calls = Path(os.environ["PAUSE_MARKER"]), [], 0
record = StopRequest._record
StopRequest._record = lambda self, signum, frame: (seen.append(signum), record(self, signum, frame))
loss_and_augment = engine_run.loss_and_augment


def pausing(cfg, num_classes, device):
    loss_fn, augment = loss_and_augment(cfg, num_classes, device)

    def loss(logits, labels):
        global calls
        calls += 1
        if calls == 8 and os.environ["SLURM_PROCID"] == "0" and not marker.exists():
            marker.write_text(os.environ["SLURM_JOB_ID"])
            deadline = time.monotonic() + 90
            while not seen and time.monotonic() < deadline:
                time.sleep(0.05)
        return loss_fn(logits, labels)

    return loss, augment


engine_run.loss_and_augment = pausing
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, str]]:
    """The environment that reaches the test cluster (SLURM_CONF), started if it is not up."""
    missing = [tool for tool in ("slurmctld", "slurmd", "munged", "sbatch") if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        pytest.skip("real SLURM tests need root and `apt-get install slurm-wlm munge` (scripts/test.sh does it "
                    "where apt works); then `bash tests/cluster/slurm_up.sh`")  # fmt: skip
    up = subprocess.run(["bash", str(UP)], capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    conf = re.fullmatch(r"export SLURM_CONF=(\S+)\n", up.stdout)
    assert conf, up.stdout
    yield {"SLURM_CONF": conf.group(1), "OMP_NUM_THREADS": "1"}
    if "already up" not in up.stderr:  # started here: stopped here, the machine left as it was found
        subprocess.run(["bash", str(UP.with_name("slurm_down.sh"))], capture_output=True, timeout=120)


def config(data: Path) -> list[str]:
    """6 steps of 2 x 2 images per epoch; with scripts/slurm.sbatch's own resume= and checkpoint_every=."""
    return ["model=resnet_tiny", "data=imagefolder", f"data.root={data}", "data.num_classes=3",
            "data.image_size=32", "data.workers=0", "batch_size=2", "epochs=2", "seed=3", "log_every=2",
            "resume=true", "checkpoint_every=500"]  # fmt: skip


@pytest.fixture(scope="module")
def torchrun_reference(tiny_folder, tmp_path_factory) -> dict:
    """The same config as a 2-process torchrun run on this host: the weights every job must reach."""
    run_dir = tmp_path_factory.mktemp("torchrun") / "run"
    args = [TORCHRUN, "--standalone", "--nproc_per_node=2", "train.py", *config(tiny_folder),
            f"hydra.run.dir={run_dir}"]
    proc = procs.run(args, {"OMP_NUM_THREADS": "1"}, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(run_dir / "last.pt", weights_only=True)


def sbatch(env: dict, *args: str) -> str:
    done = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True, cwd=REPO, timeout=60,
                          env={**os.environ, **env})  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def job_fields(env: dict, job: str) -> dict[str, str]:
    shown = subprocess.run(["scontrol", "show", "job", "--oneliner", job], capture_output=True, text=True,
                           timeout=30, env={**os.environ, **env})  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    return dict(field.split("=", 1) for field in shown.stdout.split() if "=" in field)


def wait_for_end(env: dict, job: str, log: Path, timeout: float = 300) -> dict[str, str]:
    """Poll slurmctld until the job has ended for good; cancelled if it does not within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fields = job_fields(env, job)
        if fields["JobState"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            return fields
        time.sleep(0.5)
    subprocess.run(["scancel", job], env={**os.environ, **env}, timeout=30)
    pytest.fail(f"SLURM job {job} still {fields['JobState']} after {timeout} s\n{read(log)[-3000:]}")


def read(path: Path) -> str:
    return path.read_text().replace("\r", "\n") if path.exists() else f"({path} not written)"


def assert_same_weights(a: dict, b: dict) -> None:
    assert (a["epoch"], a["step"]) == (b["epoch"], b["step"])
    for key, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][key]), key
    untimed = [[{k: v for k, v in row.items() if not k.endswith(("_per_s", "_seconds"))} for row in run["history"]]
               for run in (a, b)]  # fmt: skip
    assert untimed[0] == untimed[1]  # each epoch's loss and val errors too, bit for bit


def python_shim(tmp_path: Path, python: str) -> Path:
    shim = tmp_path / "python"
    shim.write_text(TASK_LOG.format(python=python))
    shim.chmod(0o755)
    return shim


def test_sbatch_on_two_nodes_over_a_real_interface_equals_torchrun(cluster, tiny_folder, torchrun_reference, tmp_path):
    run_dir, log, tasks = tmp_path / "run", tmp_path / "job.out", tmp_path / "tasks.log"
    env = {**cluster, "PYTHON": str(python_shim(tmp_path, PY)), "TASK_LOG": str(tasks), "RUN_DIR": str(run_dir)}
    job = sbatch(env, "--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=0", "--cpus-per-task=1", f"--output={log}",
                 "scripts/slurm.sbatch", *config(tiny_folder))  # fmt: skip
    fields = wait_for_end(env, job, log)
    assert fields["JobState"] == "COMPLETED" and fields["NodeList"] == "node[1-2]", read(log)[-3000:]
    ranks = sorted(line.split() for line in tasks.read_text().splitlines())
    # Two tasks on two nodes, in two network namespaces whose only link is the bridge: the
    # rendezvous and gloo's traffic cannot have gone over loopback.
    assert [(r[0], r[1], r[3]) for r in ranks] == [("0", "node1", "10.231.0.1"), ("1", "node2", "10.231.0.2")]
    assert ranks[0][2] != ranks[1][2]
    results = json.loads((run_dir / "results.json").read_text())
    assert (results["world_size"], results["global_batch"], results["n_val_images"]) == (2, 4, 7)
    assert_same_weights(torchrun_reference, torch.load(run_dir / "last.pt", weights_only=True))


def test_a_usr1_to_the_batch_shell_requeues_for_real_and_the_job_resumes_exactly(
    cluster, tiny_folder, torchrun_reference, tmp_path
):
    run_dir, log, marker = tmp_path / "run", tmp_path / "job.out", tmp_path / "paused"
    (tmp_path / "pause.py").write_text(PAUSE)
    env = {**cluster, "PYTHON": str(python_shim(tmp_path, f"{PY} {tmp_path / 'pause.py'}")),
           "TASK_LOG": str(tmp_path / "tasks.log"), "RUN_DIR": str(run_dir), "PAUSE_MARKER": str(marker)}  # fmt: skip
    job = sbatch(env, "--nodes=1", "--ntasks-per-node=2", "--gpus-per-node=0", "--cpus-per-task=1", f"--output={log}",
                 "scripts/slurm.sbatch", *config(tiny_folder))  # fmt: skip
    deadline = time.monotonic() + 300  # a busy machine: the job may wait for the last one's node
    while not marker.exists():  # rank 0 waits mid-epoch 1 until the signal has reached it
        assert time.monotonic() < deadline and job_fields(env, job)["JobState"] in ("PENDING", "RUNNING"), read(log)
        time.sleep(0.2)
    cancel = subprocess.run(["scancel", "--signal=USR1", "--batch", job], capture_output=True, text=True, timeout=30,
                            env={**os.environ, **env})  # fmt: skip
    assert cancel.returncode == 0, cancel.stderr
    fields = wait_for_end(env, job, log)
    out = read(log)
    assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "1", out[-3000:]  # requeued once by slurmctld
    assert f"stopped by SIGUSR1: saved {run_dir / 'last.pt'}; requeued SLURM job {job}" in out
    assert "DUE TO JOB REQUEUE" in out  # slurmstepd's own words: the real scontrol requeue ended the first run
    assert f"resumed from {run_dir / 'last.pt'} after epoch 1, batch 2 (step 8)" in out
    assert_same_weights(torchrun_reference, torch.load(run_dir / "last.pt", weights_only=True))


def test_the_readme_submitit_sweep_runs_through_submitits_slurm_executor(cluster, tiny_folder, tmp_path):
    sweep = tmp_path / "sweep"
    args = [PY, "train.py", "-m", "hydra/launcher=submitit_slurm", "hydra.launcher.nodes=1",
            "hydra.launcher.tasks_per_node=2", "hydra.launcher.cpus_per_task=1", "hydra.launcher.timeout_min=10",
            f"hydra.sweep.dir={sweep}", *config(tiny_folder)[:-2], "epochs=1",
            "+padding=symmetric,asymmetric"]  # fmt: skip
    proc = procs.run(args, cluster, timeout=360)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    jobs = sorted(path.name for path in (sweep / ".submitit").iterdir() if re.fullmatch(r"\d+_\d+", path.name))
    assert len(jobs) == 2, jobs  # one SLURM job array, a task each
    for job in jobs:  # slurmctld ran each as one 2-task job (the result files alone could be the local executor's)
        fields = wait_for_end(cluster, job, sweep / ".submitit" / job / f"{job}_0_log.err", timeout=60)  # exiting
        assert (fields["JobState"], fields["NumTasks"]) == ("COMPLETED", "2"), fields
    for n, scheme in enumerate(("symmetric", "asymmetric")):
        results = json.loads((sweep / str(n) / "results.json").read_text())
        assert (results["padding_name"], results["world_size"], results["global_batch"]) == (scheme, 2, 4)
        assert results["n_val_images"] == 7
