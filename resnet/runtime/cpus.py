"""The CPUs this process may use, in and out of containers: the smallest of its CPU affinity
(taskset, cpusets, SLURM's binding), its cgroup's CPU quota (``docker run --cpus``, Kubernetes
limits, SLURM's cgroups: cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``, on its own group and
every parent), and SLURM's ``--cpus-per-task``. ``os.cpu_count()`` counts the machine's, and a
container that sees 64 CPUs with a quota of 2 runs far slower with 64 threads than with 2."""

from __future__ import annotations

import math
import os
from pathlib import Path

PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def affinity_cpus() -> int:
    """The CPUs this process may run on (its affinity): what torch's DataLoader counts when it
    warns of too many workers."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cpu_share(local_world_size: int = 1, environ: dict[str, str] | None = None) -> int:
    """One process's share of the CPUs, at least 1, where ``local_world_size`` processes of the job
    run on this node. An affinity that is the whole machine is shared by them all (torchrun);
    a narrower one is the launcher's binding of this process alone (srun --cpu-bind). A cgroup
    quota is the container's or the job's, shared by them all. ``--cpus-per-task`` is this task's."""
    environ = os.environ if environ is None else environ
    local = max(local_world_size, 1)
    affinity = affinity_cpus()
    share = affinity // local if affinity == (os.cpu_count() or affinity) else affinity
    quota = cgroup_cpu_quota()
    if quota is not None:
        share = min(share, math.ceil(quota) // local)
    per_task = environ.get("SLURM_CPUS_PER_TASK", "")
    if per_task.isdigit() and int(per_task) > 0:
        share = min(share, int(per_task))
    return max(share, 1)


def cgroup_cpu_quota(proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT) -> float | None:
    """CPUs' worth of time per period that this process's cgroups allow (the tightest along the
    path to the root), or None: no quota, or no cgroup file system to read."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and controllers == "":  # cgroup v2: one tree, cpu.max = "<quota|max> <period>"
            limits += [_v2_limit(d) for d in _ancestors(root, path)]
        elif "cpu" in controllers.split(","):  # cgroup v1: the cpu controller's own tree
            for base in (root / controllers, root / "cpu"):
                if base.is_dir():
                    limits += [_v1_limit(d) for d in _ancestors(base, path)]
                    break
    return min((limit for limit in limits if limit is not None), default=None)


def _ancestors(base: Path, path: str) -> list[Path]:
    """``base/path`` and each of its parents up to ``base`` (a container sees its own group as root)."""
    parts = [p for p in path.strip("/").split("/") if p]
    return [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _v2_limit(folder: Path) -> float | None:
    try:
        quota, period = (folder / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def _v1_limit(folder: Path) -> float | None:
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period
