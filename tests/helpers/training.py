"""Small training runs: the overrides of a tiny run, train() in this process, SLURM tasks started
as srun would, and reading what a run wrote."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

from resnet.command_lines import override
from resnet.engine.run import train
from tests.helpers import procs
from tests.helpers.compose import compose_config

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


def tiny_overrides(root: Path, run_dir: Path, *extra: str) -> list[str]:
    return [
        "model=resnet_tiny",
        "data=imagefolder",
        override("data.root", root),
        "data.num_classes=3",
        "data.image_size=32",
        "data.workers=0",
        "batch_size=4",
        "epochs=2",
        "log_every=2",
        override("run_dir", run_dir),
        *extra,
    ]


SAME_MATHS = ["sync_bn=true", "data.augment=false", "epochs=2", "seed=1"]  # global-batch BN, no augmentation


def launcher_overrides(root: Path, run_dir: Path, batch_size: int) -> list[str]:
    """:data:`SAME_MATHS` at ``batch_size`` per process, into ``run_dir``: what a launch of N
    processes trains to (within rounding) where one process trains with N times the batch."""
    args = tiny_overrides(root, run_dir, *SAME_MATHS, f"batch_size={batch_size}", f"hydra.run.dir={run_dir}")
    return [o for o in args if not o.startswith("run_dir")]


def run_in_process(root: Path, run_dir: Path, *extra: str) -> dict:
    return train(compose_config("train", *tiny_overrides(root, run_dir, *extra)))


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def slurm_task_env(rank: int, job_id: int, **extra: str) -> dict[str, str]:
    """What srun gives task ``rank`` of a 2-node x 1-task step (the nodes are two loopback addresses)."""
    return {
        "SLURM_JOB_ID": str(job_id), "SLURM_NTASKS": "2", "SLURM_NNODES": "2", "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_PROCID": str(rank), "SLURM_LOCALID": "0", "SLURM_NODEID": str(rank),
        "SLURM_STEP_NODELIST": "127.0.0.[1-2]", "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "OMP_NUM_THREADS": "1",
        **extra,
    }  # fmt: skip


def run_slurm_tasks(args: list[str], job_id: int, timeout: int = 240) -> list[subprocess.CompletedProcess]:
    """Start the two tasks as srun would, wait for both; past ``timeout`` both are killed and the test fails."""
    return procs.wait_all([procs.start(args, slurm_task_env(rank, job_id)) for rank in range(2)], timeout)
