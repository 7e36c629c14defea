"""One run at a time in a run directory.

Two trainings writing into one directory interleave their ``metrics.csv`` rows and overwrite each
other's ``last.pt`` and ``results.json``. The first to start holds an exclusive ``flock`` on
``<run dir>/.lock`` (rank 0, for the whole job) and writes who it is into it; a second one is refused
with one line naming that holder. The kernel drops a flock when its process dies, however it dies,
so a run killed with ``kill -9`` (or a requeued SLURM job) leaves a file nobody locks: the next run
takes it over, says so, and ``resume=true`` goes on as usual. A run that ends normally removes it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..config import ConfigError
from ..runtime.distributed import DistEnv, on_rank0

LOCK_NAME = ".lock"


class RunDirBusy(ConfigError):
    """Another live run holds the run directory."""


class RunDirLock:
    """An exclusive, non-blocking lock on ``run_dir/.lock`` holding this process's host, pid and start."""

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / LOCK_NAME
        self._file = None

    def acquire(self) -> str | None:
        """Take the lock. Returns a note to print, or None: "took over ..." naming the previous
        holder (host, pid, start) when it ended without releasing it, or, on a file system without
        flock (some Lustre mounts), that nothing is locked. Raises :class:`RunDirBusy` while a live
        run holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            file = open(self.path, "a+")  # noqa: SIM115 (held open for the whole run)
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(file)
                file.close()
                raise RunDirBusy(
                    f"{self.path.parent} is in use by another run ({holder or 'holder unknown'}); wait for it to "
                    "end, stop it, or pass another hydra.run.dir=<dir>"
                ) from None
            except OSError as err:
                file.close()
                if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    return f"not locked: this file system has no flock ({err.strerror})"
                raise
            if _same_file(file, self.path):
                break
            file.close()  # its last holder removed it between our open and our lock: start again
        previous = _holder(file)
        file.seek(0)
        file.truncate()
        me = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        file.write(json.dumps(me))
        file.flush()
        self._file = file
        if previous:
            return f"took over {self.path.parent} from a run that ended without releasing it ({previous})"
        return None

    def release(self) -> None:
        if self._file is None:
            return
        self.path.unlink(missing_ok=True)  # before unlocking: nobody can lock the old file and keep it
        self._file.close()
        self._file = None


def _holder(file) -> str | None:
    file.seek(0)
    try:
        who = json.loads(file.read() or "null")
    except ValueError:
        return None
    if not isinstance(who, dict):
        return None
    return f"host {who.get('host')}, pid {who.get('pid')}, started {who.get('started')}"


def _same_file(file, path: Path) -> bool:
    try:
        return os.fstat(file.fileno()).st_ino == path.stat().st_ino
    except FileNotFoundError:
        return False


@contextmanager
def own_run_dir(run_dir: Path, env: DistEnv) -> Iterator[None]:
    """Hold ``run_dir`` for the job: rank 0 locks it and every rank learns the outcome, so that a
    refusal ends every process with the same one line (a collective: every rank calls it)."""
    lock = RunDirLock(run_dir) if env.is_main else None
    note = on_rank0(env, lambda: lock.acquire(), RunDirBusy)
    if note and env.is_main:
        print(f"note: {note}", flush=True)
    try:
        yield
    finally:
        if lock is not None:
            lock.release()
