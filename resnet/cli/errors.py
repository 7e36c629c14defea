"""What every command does with an error the user can fix: one line on stderr, no traceback."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# torch's words for an exception a loader worker raised and handed over (torch.utils.data._utils.worker):
# the worker is alive and the exception is the cause, not memory.
_RAISED_IN_WORKER = re.compile(r"Caught \w+ in DataLoader worker process \d+\.\nOriginal Traceback")


@contextmanager
def one_line_errors(program: str, training: bool = False) -> Iterator[None]:
    """Inside: a bad config value or data layout (:class:`resnet.config.ConfigError`) prints
    ``error: ...`` and exits with status 2; bad or missing weights (:class:`resnet.weights.WeightsError`)
    exit with ``<program>: ...``; a dead loader worker (:mod:`data.dataloader`) says what to lower,
    while an exception a live worker raised keeps its traceback, which ends with the worker's own.
    ``training`` (train.py): a run that failed (:class:`resnet.engine.loop.NonFiniteLoss`,
    :class:`resnet.engine.run.RunFailed`) prints ``error: ...`` and exits with status 1; a
    preemption (:class:`resnet.engine.preempt.Stopped`, saved) prints its line and exits with 0
    when the requeued job goes on, else 3. Anything else is a bug and keeps its traceback."""
    from ..config import ConfigError
    from ..weights import WeightsError

    try:
        yield
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except WeightsError as err:
        raise SystemExit(f"{program}: {err}") from None
    except RuntimeError as err:
        cause = raised_in_worker(err)
        if cause is not None:  # a bug in the data code, not a dead worker: lowering workers would not help
            raise cause from None
        if training:
            _training_error(err)
        if "DataLoader worker" not in str(err):
            raise
        print(f"error: {err}: lower data.workers or batch_size, then run again", file=sys.stderr)
        raise SystemExit(1) from None


def _training_error(err: RuntimeError) -> None:
    """Exit as train.py does for a run that failed or was stopped; return for any other error."""
    from ..engine.loop import NonFiniteLoss
    from ..engine.preempt import Stopped
    from ..engine.run import RunFailed

    if isinstance(err, (NonFiniteLoss, RunFailed)):  # one line, no traceback: the run failed
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    if isinstance(err, Stopped):  # a preemption signal: saved; 0 when the requeued job goes on, else 3
        print(err, file=sys.stderr)
        raise SystemExit(0 if err.requeued else 3) from None


def raised_in_worker(err: BaseException | None) -> BaseException | None:
    """The exception a live loader worker raised, as torch hands it over ("Caught NotImplementedError
    in DataLoader worker process 0" and the worker's traceback), when ``err`` is it or was raised
    while handling it (training words it as a dead worker: :class:`resnet.engine.run.LoaderWorkerDied`);
    else None."""
    seen = 0
    while err is not None and seen < 3:
        if _RAISED_IN_WORKER.match(str(err)):
            return err
        err, seen = err.__context__, seen + 1
    return None
