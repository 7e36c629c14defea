"""Stop signals, caught from a training process's first instruction (which signal comes from
where, and what each does: docs/faults.md).

Python's defaults end the process on the spot (USR1, USR2, TERM, HUP) or wherever it is (INT), and
the epoch is lost. :func:`catch` puts a recorder in their place: the first signal is kept
(:func:`pending`) for the training loop to act on at its next step boundary (:mod:`resnet.job.preempt`);
a second Ctrl-C ends the process at once (``KeyboardInterrupt``): a person who insists. train.py
calls it before it imports anything slow, so that a signal during start-up is acted on too, and the
recorder stays until the process ends: a signal after the results are written changes nothing.

SIGHUP that is ignored when this process starts (``nohup python train.py``) stays ignored, except
under torchrun, whose agent catches it itself, passes it on to its workers and kills them 30 s later.
Once a SIGHUP has come, the standard streams that were a terminal point at ``/dev/null``: a write
to a closed terminal would fail (EIO) in the middle of the save; train.log still gets every line.

Standard library only: importing this must not import torch.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Where processes of a job received different signals, the one they all report (and exit with):
# the first of these that any of them received.
PRECEDENCE = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGUSR2, signal.SIGUSR1)
SUBMITIT_SIGNAL_ENV = "SUBMITIT_PREEMPT_SIGNAL"  # submitit's own variable: the name of its signal, USR2 by default


class _Record:
    signum: int | None = None  # the first stop signal since catch(), or since release() released everything
    interrupts = 0  # SIGINTs seen: the second ends the process
    previous: dict[int, Callable | int | None] = {}  # the handlers catch() replaced (submitit's, for one)
    at_exit = False  # whether _ignore_from_now_on is registered
    terminals: tuple[int, ...] = ()  # the standard streams that were a terminal at catch() (a hung-up one is not a tty)


_record = _Record()


def submitit_signal(launched: bool | None = None) -> tuple[int, ...]:
    """submitit's preemption signal when submitit started this process (``launched``; None: where it
    set SUBMITIT_FOLDER), else ()."""
    if not ("SUBMITIT_FOLDER" in os.environ if launched is None else launched):
        return ()
    return (getattr(signal, "SIG" + os.environ.get(SUBMITIT_SIGNAL_ENV, "USR2")),)


def catch(*extra: int) -> tuple[int, ...]:
    """Record :data:`STOP_SIGNALS`, submitit's signal where it launched us, and ``extra`` from now
    on. Returns the signals whose handler this call replaced (none: already caught, or not the
    main thread, where Python cannot set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return ()
    if not _record.at_exit:
        atexit.register(_ignore_from_now_on)
        _record.at_exit = True
        _record.terminals = tuple(fd for fd in (0, 1, 2) if os.isatty(fd))
    placed = []
    torchrun = "TORCHELASTIC_RUN_ID" in os.environ or "TORCHELASTIC_RESTART_COUNT" in os.environ
    for signum in dict.fromkeys((*STOP_SIGNALS, *submitit_signal(), *extra)):
        current = signal.getsignal(signum)
        if current is _handler or (signum == signal.SIGHUP and current == signal.SIG_IGN and not torchrun):
            continue  # caught already; nohup's ignored SIGHUP
        _record.previous[signum] = current
        signal.signal(signum, _handler)
        placed.append(signum)
    return tuple(placed)


def release(signums: tuple[int, ...]) -> None:
    """Put back the handlers that :func:`catch` replaced for ``signums`` (what it returned, for an
    in-process caller such as a test that trains more than once); once nothing is caught any more,
    forget what was recorded."""
    for signum in signums:
        handler = _record.previous.pop(signum, None)
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    if not _record.previous:
        _record.signum, _record.interrupts = None, 0


def pending() -> int | None:
    """The first stop signal received since :func:`catch`, or None."""
    return _record.signum


def previous_handler(signum: int) -> Callable | int | None:
    """The handler ``signum`` had before :func:`catch` (submitit's requeue, for its signal)."""
    return _record.previous.get(signum)


def _ignore_from_now_on() -> None:
    """At exit (atexit runs before the interpreter's last steps): ignore the caught signals. Python
    puts back the default action of every signal it handles as it finalises, and a stop that came
    then (an srun passing a late warning on) would kill a process that had finished its work."""
    for signum in list(_record.previous):
        if signal.getsignal(signum) is _handler:
            signal.signal(signum, signal.SIG_IGN)


def _detach_from_terminal() -> None:
    """Point the standard streams that were a terminal at /dev/null (after SIGHUP: it is gone)."""
    for fd in _record.terminals:
        with contextlib.suppress(OSError):
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, fd)
            os.close(null)


def _handler(signum: int, frame) -> None:
    if signum == signal.SIGHUP:
        _detach_from_terminal()
    if signum == signal.SIGINT:
        _record.interrupts += 1
        if _record.interrupts > 1:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now, without the save
    if _record.signum is None:
        _record.signum = signum
