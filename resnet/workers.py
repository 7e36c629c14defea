"""How many loader worker processes a run gets: the CPU cores this process may use, its share
of them beside the node's other processes, ``data.workers=auto`` (at most :data:`AUTO_WORKERS_CAP`)."""

from __future__ import annotations

import os

from omegaconf import DictConfig

from .distributed import LaunchError, detect_launch

AUTO_WORKERS_CAP = 16  # past this, more decode processes mostly add memory (each holds its own copy of the dataset)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: taskset, cgroups, SLURM's binding):
    the bound above which torch's DataLoader warns about too many workers."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cores_per_process(local_world_size: int = 1) -> int:
    """This process's share of the cores: its affinity, split between the processes of this node
    when they all see every core (torchrun), as it is when the launcher bound each to its own
    (srun --cpu-bind, SLURM's cgroups)."""
    cores = usable_cores()
    if cores == (os.cpu_count() or cores) and local_world_size > 1:
        cores //= local_world_size
    return max(cores, 1)


def auto_workers(local_world_size: int | None = None) -> int:
    """What ``data.workers=auto`` means here: this process's share of the cores, at most
    :data:`AUTO_WORKERS_CAP`. ``local_world_size``: processes on this node (default: the launcher's)."""
    if local_world_size is None:
        try:
            local_world_size = detect_launch().local_world_size
        except LaunchError:  # join_job reports it, in its own line
            local_world_size = 1
    return min(cores_per_process(local_world_size), AUTO_WORKERS_CAP)


def data_workers(data_cfg: DictConfig, local_world_size: int | None = None) -> int:
    """``data.workers`` as a number (``auto``: :func:`auto_workers`); :func:`resnet.config.check_data_config`
    checks it first."""
    return auto_workers(local_world_size) if str(data_cfg.workers) == "auto" else int(data_cfg.workers)
