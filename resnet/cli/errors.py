"""What every command does with an error the user can fix: one line on stderr, no traceback."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from hydra.errors import CompactHydraException

# docs/faults.md: a config error exits with status 2, under every launcher. (torchrun then adds its own
# report of a failed worker below the one line; a status of 0 would spare it, and tell a script
# or a scheduler that a run which never started had succeeded.)
CONFIG_ERROR_STATUS = 2


@contextmanager
def one_line_errors(program: str, training: bool = False) -> Iterator[None]:
    """Inside: a bad config value or data layout (:class:`resnet.config.ConfigError`) prints
    ``error: ...`` and exits with status 2; bad or missing weights (:class:`resnet.weights.WeightsError`)
    exit with ``<program>: ...``; a dead loader worker (:mod:`data.dataloader`) says what to lower,
    while an exception a live worker raised keeps its traceback, which ends with the worker's own.
    ``training`` (train.py): a run that failed (:class:`resnet.engine.loop.NonFiniteLoss`,
    :class:`resnet.engine.run.RunFailed`) prints ``error: ...`` and exits with status 1 (75 where
    another process of the job stalled or died: :class:`resnet.job.peers.PeerLost`); a
    stop signal (:class:`resnet.job.preempt.Stopped`, saved) prints its line and exits with 0
    when the requeued job goes on, else 143 (TERM), 130 (INT), 129 (HUP) or 3 (USR1); a second Ctrl-C, which
    stops at once, 130. Under submitit, :func:`leave` raises instead of exiting. Anything else is a
    bug and keeps its traceback."""
    from ..config import ConfigError
    from ..weights import WeightsError

    try:
        yield
    except ConfigError as err:  # every rank sees the same config: the line is printed once, by rank 0
        leave(f"error: {err}", CONFIG_ERROR_STATUS, show=launched_rank() == 0)
    except WeightsError as err:
        leave(f"{program}: {err}", 1)
    except RuntimeError as err:
        from data.dataloader import raised_in_worker
        from data.shm import out_of_room

        room = out_of_room(err)  # /dev/shm full: the worker's exception is the symptom, not a bug to show
        if room is not None:
            if training:
                _training_error(err)  # resnet.job.ending's line, saying what last.pt holds
            leave(f"error: {room}, then run again", 1)
        cause = raised_in_worker(err)
        if cause is not None:  # a bug in the data code, not a dead worker: lowering workers would not help
            raise cause from None
        if training:
            _training_error(err)
        if "DataLoader worker" not in str(err):
            raise
        leave(f"error: {err}: lower data.workers or batch_size, then run again", 1)
    except KeyboardInterrupt:
        if not training:
            raise
        leave(
            "error: interrupted twice: stopped at once, without saving; resume=true goes on from the last "
            "last.pt saved",
            130,
        )


def _training_error(err: RuntimeError) -> None:
    """Exit as train.py does for a run that failed or was stopped; return for any other error."""
    from ..engine.loop import NonFiniteLoss
    from ..engine.run import RunFailed
    from ..engine.runlog import ending_line  # the same words as the run's train.log ends with
    from ..job.checkpointer import AgreedFailure
    from ..job.preempt import Stopped

    if isinstance(err, (NonFiniteLoss, RunFailed)):  # one line, no traceback: the run failed (a peer lost: 75)
        agreed = isinstance(err, AgreedFailure)  # every rank has it: rank 0 says it
        leave(ending_line(err), getattr(err, "status", 1), show=not agreed or launched_rank() == 0)
    if isinstance(err, Stopped):  # a stop signal: saved; 0 when the requeued job goes on, else 143, 130, 129 or 3
        leave(ending_line(err), err.status, show=launched_rank() == 0)  # every rank stopped at one step: one line


def launched_rank() -> int:
    """This process's rank as its launcher set it (torchrun, srun, submitit), 0 for a plain run."""
    from ..runtime.distributed import LaunchError, detect_launch

    try:
        return detect_launch().rank
    except (LaunchError, ValueError, ImportError):  # a launcher's variables half set: say it anyway
        return 0


def exit_config_error(message: str) -> NoReturn:
    """Print ``error: <message>`` on rank 0 only (every rank sees the same config) and exit with
    :data:`CONFIG_ERROR_STATUS`: a value a command cannot use, whether Hydra found it composing the
    config (:func:`resnet.cli.hydra_app.run_main`) or a check did afterwards."""
    if launched_rank() == 0:
        print(f"error: {' '.join(message.split())}", file=sys.stderr, flush=True)
    raise SystemExit(CONFIG_ERROR_STATUS)


def tell_torchrun(line: str) -> None:
    """Under torchrun: ``line`` into this worker's error file, which torchrun's closing report then
    shows as the worker's reason (in place of its "To enable traceback see: ..." link)."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path:
        with contextlib.suppress(OSError), open(path, "w") as file:
            json.dump({"message": line, "timestamp": int(time.time())}, file)


class JobEnded(CompactHydraException):
    """The line a task launched by submitit ends with (Hydra prints it alone in the sweep)."""


def leave(line: str, status: int, show: bool = True) -> NoReturn:
    """Print ``line`` and exit with ``status``. Under submitit a failure is raised instead: submitit
    writes a task's result file only when its function returns or raises, never on an exit, and
    the sweep that launched it would wait for that file forever."""
    if show:
        print(line, file=sys.stderr, flush=True)
    if status:
        tell_torchrun(line)
    if status and "SUBMITIT_FOLDER" in os.environ:
        raise JobEnded(line) from None
    raise SystemExit(status) from None
