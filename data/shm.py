"""Room in /dev/shm for the batches loader workers hand to the training process.

Docker gives a container 64 MB of /dev/shm unless run with ``--shm-size`` or ``--ipc=host``;
224-px batches of 128 need 19 MB each, and each worker keeps ``prefetch_factor`` (2) in flight.
Without the room torch fails mid-epoch ("unable to allocate shared memory ... No space left on
device"), or a worker hangs for good. :func:`check_room` refuses before any worker starts, in one
line that names the fix.
"""

from __future__ import annotations

import os
import re

SHM = "/dev/shm"
PREFETCH = 2  # torch's DataLoader prefetch_factor, batches per worker in flight
ENCODED_BYTES = 150_000  # data.decode=gpu: a JPEG as read (ImageNet's mean is ~110 kB)


def batch_bytes(batch_size: int, image_size: int, channels: int = 3, encoded: bool = False) -> int:
    """One batch as a worker hands it over: uint8 NCHW pixels, or the encoded files."""
    return batch_size * (ENCODED_BYTES if encoded else channels * image_size * image_size)


def check_room(workers: int, largest_batch: int, where: str = SHM, processes: int = 1) -> None:
    """ValueError, one line, where ``where`` has less room than ``processes`` (the training processes
    of this node, which share it) x ``workers`` x :data:`PREFETCH` batches of ``largest_batch`` bytes,
    and one more each being read, need. No workers: nothing to check."""
    if workers <= 0:
        return
    try:
        stats = os.statvfs(where)
    except OSError:
        return  # no /dev/shm to measure (not Linux): torch uses what the system offers
    free = stats.f_bavail * stats.f_frsize
    need = processes * (workers * PREFETCH + 1) * largest_batch
    if need <= free:
        return
    who = f"{workers} loader worker(s)" + (f" of each of this node's {processes} processes" if processes > 1 else "")
    raise ValueError(
        f"{where} has {free / 2**20:,.0f} MiB free, but {who} need about {need / 2**20:,.0f} MiB for the batches in "
        f"flight ({largest_batch / 2**20:,.1f} MiB each): in Docker run with --shm-size=2g (or --ipc=host); "
        "elsewhere lower data.workers or batch_size"
    )


# torch's words for a worker that found /dev/shm full while handing a batch over: raised in the
# worker (torch's allocator, mmap), or its death by SIGBUS (a page of a full tmpfs written to).
_OUT_OF_ROOM = re.compile(
    r"unable to allocate shared memory|unable to (write to file|mmap \d+ bytes from file) </torch_|"
    r"Bus error|signal 7 \(SIGBUS\)|out of shared memory",
)


def out_of_room(err: BaseException | None, where: str = SHM) -> str | None:
    """One line for a loader error whose cause is shared memory, at any point of a run (another
    job, NCCL, a tmpfs shrunk since :func:`check_room`): what ran out, how much ``where`` has free
    now, and what to pass; None for any other error. Looks along ``err``'s chain of causes."""
    for _ in range(4):
        if err is None:
            return None
        if _OUT_OF_ROOM.search(str(err)):
            break
        err = err.__cause__ or err.__context__
    else:
        return None
    try:
        stats = os.statvfs(where)
        free, size = (count * stats.f_frsize / 2**20 for count in (stats.f_bavail, stats.f_blocks))
        room = f"{where} has {free:,.0f} MiB free of {size:,.0f} MiB"
    except OSError:
        room = f"{where} could not be measured"
    return (
        f"a loader worker could not get shared memory for a batch ({room}; another job or NCCL may hold the rest): "
        "in Docker run with --shm-size=2g (or --ipc=host); elsewhere free it, or lower data.workers or batch_size"
    )
