"""A DataLoader whose dead workers are reported where the data is asked for, in one form.

A worker process that dies unasked (the kernel's OOM killer, most often) reaches the main process
in one of three ways with plain torch: torch's SIGCHLD handler raises ``RuntimeError`` in the main
thread at whatever line it is running (a progress bar's redraw, a ``finally``, Hydra's own code),
where no ``except`` can be sure to see it; the iterator's own check, every
``MP_STATUS_CHECK_INTERVAL`` (5 s) while it waits, raises ``DataLoader worker (pid(s) N) exited
unexpectedly`` from ``next()``; or a batch in flight fails to unpickle with ``EOFError`` or
``ConnectionResetError`` from ``next()``.

:class:`DataLoader` puts SIGCHLD back to its default disposition once torch has set its handler
(children stay waitable; the iterator polls them) and turns either of the last two into one
``RuntimeError``: ``DataLoader worker (pid N) was killed by signal 9 (SIGKILL)``, at most 5 s
after the death, from the ``for batch in loader`` line, where the caller's ``except`` sees it.

A batch that a worker cannot hand over (pickled into shared memory by the queue's feeder thread,
with /dev/shm full) would be dropped by Python's queue and waited for forever: the worker instead
exits with :data:`OUT_OF_ROOM_STATUS` (or :data:`DROPPED_STATUS`), which ``next()`` then reports.
"""

from __future__ import annotations

import multiprocessing.queues
import os
import re
import signal
import sys
import threading
import time
from functools import partial

import torch.utils.data

__all__ = ["DataLoader"]

_TORCH_HANDLER_MODULE = "torch.utils.data._utils.signal_handling"
_EXIT_WAIT_S = 2.0  # a worker's pipes close a moment before it can be waited for
OUT_OF_ROOM_STATUS = 117  # a worker's exit status: no shared memory left for the batch it was handing over
DROPPED_STATUS = 118  # a worker's exit status: its batch could not be handed over, for another reason


class DataLoader(torch.utils.data.DataLoader):
    """``torch.utils.data.DataLoader``; a dead worker is one ``RuntimeError`` from ``next()``."""

    def __init__(self, *args, **kwargs):
        kwargs["worker_init_fn"] = partial(_exit_on_dropped_batch, kwargs.get("worker_init_fn"))
        super().__init__(*args, **kwargs)

    def __iter__(self):
        iterator = super().__iter__()
        if self.num_workers == 0:
            return iterator
        _leave_worker_checks_to_the_iterator()
        return _Reporting(iterator)

    def close(self) -> None:
        """Stop the persistent workers now. Left to the garbage collector (a loader sits in
        reference cycles), they go at some later moment, often after their queues were torn down,
        and each then costs torch's 5 s join timeout: seconds a run in a sweep, or a test, waits
        for nothing. torch has no public call for this; the iterator's own shutdown is used."""
        iterator = getattr(self, "_iterator", None)  # set only with persistent_workers=True
        if iterator is not None:
            iterator._shutdown_workers()
            self._iterator = None


class _Reporting:
    """The loader's iterator; an error while a worker is dead becomes the one worker error."""

    def __init__(self, iterator):
        self._iterator = iterator

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self._iterator)

    def __next__(self):
        try:
            return next(self._iterator)
        except StopIteration:
            raise
        except Exception as err:
            lost = isinstance(err, (EOFError, ConnectionError)) or "DataLoader worker" in str(err)
            dead = _dead_worker(self._iterator, wait_s=_EXIT_WAIT_S if lost else 0.0)
            if dead is None:
                raise
            raise RuntimeError(dead) from err


def _dead_worker(iterator, wait_s: float) -> str | None:
    """'DataLoader worker (pid N) was killed by signal S (NAME)' for a worker that died, else None;
    waits up to ``wait_s`` for one to become visible as dead."""
    workers = list(getattr(iterator, "_workers", ()))  # the multiprocessing.Process of each worker
    deadline = time.monotonic() + wait_s
    while True:
        for worker in workers:
            code = worker.exitcode
            if code is not None and code < 0:
                name = {s.value: s.name for s in signal.Signals}.get(-code, "unknown")
                return f"DataLoader worker (pid {worker.pid}) was killed by signal {-code} ({name})"
            if code == OUT_OF_ROOM_STATUS:
                return f"DataLoader worker (pid {worker.pid}) ran out of shared memory handing a batch over"
            if code is not None and code != 0:
                return f"DataLoader worker (pid {worker.pid}) exited with status {code}"
        if not workers or time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def _exit_on_dropped_batch(user_init, worker_id: int) -> None:
    """A worker's ``worker_init_fn``: the user's, after making the worker exit where its queue's
    feeder thread fails to send a batch (Python's queue prints the error and drops the batch)."""
    multiprocessing.queues.Queue._on_queue_feeder_error = staticmethod(_batch_dropped)
    if user_init is not None:
        user_init(worker_id)


def _batch_dropped(err: BaseException, obj: object) -> None:
    """In a worker: a batch could not be handed over; exit at once, so that the main process,
    which would wait for it forever, sees a dead worker instead (:func:`_dead_worker`)."""
    from .shm import out_of_room

    if out_of_room(err) is not None:  # the main process says so, with /dev/shm's room
        os._exit(OUT_OF_ROOM_STATUS)
    print(f"loader worker {os.getpid()}: cannot hand a batch over: {err}", file=sys.stderr, flush=True)
    os._exit(DROPPED_STATUS)


def _leave_worker_checks_to_the_iterator() -> None:
    """Put SIGCHLD back to its default once torch's handler is in."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGCHLD"):
        return  # torch sets no handler there either
    if getattr(signal.getsignal(signal.SIGCHLD), "__module__", None) == _TORCH_HANDLER_MODULE:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)


# torch's words for an exception a loader worker raised and handed over (torch.utils.data._utils.worker):
# the worker is alive and the exception is the cause, not memory.
_RAISED_IN_WORKER = re.compile(r"Caught \w+ in DataLoader worker process \d+\.\nOriginal Traceback")


def raised_in_worker(err: BaseException | None) -> BaseException | None:
    """The exception a live loader worker raised, as torch hands it over ("Caught NotImplementedError
    in DataLoader worker process 0" and the worker's traceback), when ``err`` is it or was raised
    while handling it (a training words it as a dead worker);
    else None."""
    seen = 0
    while err is not None and seen < 3:
        if _RAISED_IN_WORKER.match(str(err)):
            return err
        err, seen = err.__context__, seen + 1
    return None
