"""How a run spends the CPUs it may use (:mod:`resnet.runtime.cpus`): its share of them beside the node's
other processes, ``data.workers=auto`` (at most :data:`AUTO_WORKERS_CAP`), and torch's intra-op
threads beside those workers (:func:`share_cpus`)."""

from __future__ import annotations

import os

from .cpus import cpu_share
from .distributed import LaunchError, detect_launch

AUTO_WORKERS_CAP = 16  # past this, more decode processes mostly add memory (each holds its own copy of the dataset)


def intra_op_threads(workers: int, local_world_size: int = 1) -> int:
    """torch's intra-op threads for a process with ``workers`` loader workers: its share of the
    CPUs less one per worker (each decodes on a CPU of its own), at least 1."""
    return max(cpu_share(local_world_size) - workers, 1)


def share_cpus(workers: int, local_world_size: int = 1) -> str | None:
    """Lower torch's intra-op threads to :func:`intra_op_threads` (never raise them; leave them
    alone where ``OMP_NUM_THREADS`` chose them). The line saying so, or None if unchanged."""
    import torch  # here: composing a config imports this module, and must stay fast

    if os.environ.get("OMP_NUM_THREADS"):
        return None
    threads, was = intra_op_threads(workers, local_world_size), torch.get_num_threads()
    if threads >= was:
        return None
    torch.set_num_threads(threads)
    return (
        f"threads: {threads} intra-op + {workers} loader worker(s) on {cpu_share(local_world_size)} "
        f"usable CPU(s) (torch would use {was}; OMP_NUM_THREADS=N sets your own)"
    )


def auto_workers(local_world_size: int | None = None) -> int:
    """What ``data.workers=auto`` means here: this process's share of the cores, at most
    :data:`AUTO_WORKERS_CAP`. ``local_world_size``: processes on this node (default: the launcher's)."""
    if local_world_size is None:
        try:
            local_world_size = detect_launch().local_world_size
        except LaunchError:  # join_job reports it, in its own line
            local_world_size = 1
    return min(cpu_share(local_world_size), AUTO_WORKERS_CAP)


def data_workers(workers: int | str, local_world_size: int | None = None) -> int:
    """``data.workers`` as a number (``auto``: :func:`auto_workers`); :func:`resnet.config.check_data_config`
    checks it first."""
    return auto_workers(local_world_size) if str(workers) == "auto" else int(workers)
