"""Stop cleanly when the cluster or a person says so: save at the next step boundary, then requeue
(the signals, and the exit status of each: docs/faults.md and docs/cluster.md).

The training loop reads the stop record (:mod:`resnet.job.signals`) at every step boundary; under
DDP the ranks agree on it in the all-reduce they already make per step, so every rank stops after
the same step. A signal during start-up is acted on before the first step. The run then saves
``last.pt`` (mid-epoch: position, partial epoch statistics, RNG states) and calls
:meth:`StopRequest.hand_over`: launched by submitit, submitit's own handler runs on rank 0; else,
inside a SLURM job, rank 0 runs ``scontrol requeue $SLURM_JOB_ID`` whatever the signal (a preempted
job that ended by itself within its grace time would not be requeued); outside SLURM, nothing: the
message says how to resume. With ``resume=true`` and a run dir that does not change across requeues
(``hydra.run.dir=...$SLURM_JOB_ID``) the requeued job resumes to the weights an uninterrupted run
would have had.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..runtime.distributed import DistEnv, all_reduce_sum, on_rank0
from . import signals as signals

# exit status of a stop that nothing requeues: the shell's 128 + n for TERM, INT and HUP; 3 for the warnings
NOT_REQUEUED_STATUS = {sig: 128 + sig for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}


class Stopped(RuntimeError):
    """Training stopped early on a signal, after saving; ``requeued``: the job will go on."""

    def __init__(self, message: str, requeued: bool, status: int):
        super().__init__(message)
        self.requeued = requeued
        self.status = 0 if requeued else status  # status: StopRequest.status, the stop's own


@dataclass(frozen=True)
class Handover:
    """What :meth:`StopRequest.hand_over` did: a phrase for the message, and whether the job goes on."""

    text: str
    requeued: bool = False


class StopRequest:
    """This run's view of the stop record: :meth:`install` while training, :meth:`restore` after."""

    def __init__(self, env: DistEnv):
        self.env = env
        self.signum: int | None = None
        self._placed: tuple[int, ...] = ()  # the handlers this object put in place (none after train.py's own)

    @property
    def requested(self) -> bool:
        if self.signum is None:
            self.signum = signals.pending()
        return self.signum is not None

    @property
    def name(self) -> str:
        """The signal's name (``SIGTERM``), once one is :attr:`requested`."""
        return signal.Signals(self.signum).name

    @property
    def status(self) -> int:
        """train.py's exit status for this stop when nothing requeues the job."""
        return NOT_REQUEUED_STATUS.get(self.signum, 3)

    def install(self) -> StopRequest:
        """Catch the stop signals (and submitit's, where it launched us) unless train.py already does."""
        self._placed = signals.catch(*self._submitit_signal())
        return self

    def restore(self) -> None:
        signals.release(self._placed)
        self._placed = ()

    def votes(self) -> list[float]:
        """This process's signal as one count per signal of :data:`resnet.job.signals.PRECEDENCE`, to be summed
        over processes (:meth:`agree` reads the sum)."""
        mine = self.signum if self.requested else None
        other = mine is not None and mine not in signals.PRECEDENCE  # another signal caught on request
        return [float(mine == signum) for signum in signals.PRECEDENCE] + [float(other)]

    def agree(self, votes: list[float]) -> bool:
        """Take the all-reduced :meth:`votes`: every process stops, under the signal of highest
        precedence that any of them received (its name and exit status, on every rank)."""
        arrived = [signum for signum, count in zip(signals.PRECEDENCE, votes) if count > 0]
        if arrived:
            self.signum = arrived[0]
        elif votes[-1] > 0 and not self.requested:  # another process's signal outside PRECEDENCE
            self.signum = signal.SIGUSR1
        return bool(arrived) or votes[-1] > 0

    def agreed(self) -> bool:
        """Whether any process was asked to stop (a collective: every process calls it)."""
        votes = self.votes()
        if not self.env.distributed:
            return self.agree(votes)
        summed = all_reduce_sum(torch.tensor(votes, device=self.env.device), self.env)
        return self.agree(summed.tolist())

    def _submitit_signal(self) -> tuple[int, ...]:
        launch = self.env.launch
        return signals.submitit_signal(launched=launch is not None and launch.launcher == "submitit")

    def _released(self) -> tuple[tuple[Callable | int | None, int] | None, str | None]:
        """The handlers put back; (submitit's handler, its signal) where submitit launched us, and
        the SLURM job id (None outside SLURM)."""
        launch = self.env.launch
        submitit = self._submitit_signal()
        handler = signals.previous_handler(submitit[0]) if submitit else None
        self.restore()
        job_id = launch.job_id if launch is not None else os.environ.get("SLURM_JOB_ID")
        if not submitit:
            return None, job_id
        return (handler if handler is not None else signal.getsignal(submitit[0]), submitit[0]), job_id

    def hand_over(self) -> Handover:
        """After the checkpoint is saved (a collective: every rank calls it): requeue the job. Under
        submitit, rank 0 calls its handler (:func:`submitit_requeue`) and every rank learns the
        outcome, so that none leaves without its result file (submitit's sweep would wait for it forever)."""
        submitit, job_id = self._released()
        if submitit:
            return on_rank0(self.env, lambda: submitit_requeue(*submitit))
        if not job_id:
            return Handover("not requeued (not a SLURM job)")
        if not self.env.is_main:
            return Handover(f"rank 0 requeues SLURM job {job_id}", requeued=True)
        return requeue(job_id)

    def hand_over_alone(self, first: bool) -> Handover:
        """:meth:`hand_over` without a collective, for a job that lost a process: ``first``, the
        lowest surviving rank, requeues the SLURM job (or calls submitit's handler)."""
        submitit, job_id = self._released()
        if not submitit and not job_id:
            return Handover("not requeued (not a SLURM job)")
        if not first:
            return Handover("the lowest surviving rank requeues the job", requeued=True)
        return submitit_requeue(*submitit) if submitit else requeue(job_id)


def submitit_requeue(handler: Callable | int | None, signum: int) -> Handover:
    """Call submitit's handler for its signal: it checkpoints the hydra-submitit job, requeues it and
    exits, or raises saying why it will not (too many time-outs, for one)."""
    if not callable(handler):
        return Handover("not requeued: submitit's handler is not in place")
    try:
        handler(signum, None)
        return Handover("not requeued: submitit's handler returned without requeueing")
    except SystemExit:  # submitit requeued the job, then exits
        return Handover("requeued by submitit", requeued=True)
    except Exception as err:  # noqa: BLE001 (submitit's UncompletedJobError: its reason)
        reason = str(err).strip().splitlines()[0].rstrip(".") if str(err).strip() else type(err).__name__
        return Handover(
            f"submitit will not requeue it ({reason}); submit the sweep again with the same "
            "hydra.sweep.dir and resume=true, or raise hydra.launcher.max_num_timeout"
        )


def requeue(job_id: str) -> Handover:
    """``scontrol requeue`` this job: it goes back to pending and starts again (``--requeue``).
    Only a running job: one that is already ending (``scancel``: COMPLETING) was cancelled by
    someone, and a requeue would undo that."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return Handover(f"not requeued: scontrol is not on PATH; run `scontrol requeue {job_id}` yourself")
    state, restarts = job_state(scontrol, job_id)
    # a stock preemption, or an admin's `scontrol requeue`: slurmctld requeues the job itself, and
    # counts the next start already (this one's count: SLURM_RESTART_COUNT)
    if state in REQUEUED_STATES or restarts > int(os.environ.get("SLURM_RESTART_COUNT") or 0):
        return Handover(f"requeued SLURM job {job_id} (by SLURM)", requeued=True)
    if state is not None and state not in ("RUNNING", "SUSPENDED"):
        return Handover(f"not requeued: SLURM job {job_id} is {state} (cancelled, or ending)")
    done = subprocess.run([scontrol, "requeue", job_id], capture_output=True, text=True)
    if done.returncode != 0:
        now, restarts_now = job_state(scontrol, job_id)
        if now in REQUEUED_STATES or restarts_now > restarts:  # slurmctld's own requeue came first
            return Handover(f"requeued SLURM job {job_id} (by SLURM)", requeued=True)
        reason = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no message"]
        return Handover(f"not requeued: scontrol requeue {job_id} failed ({reason[0]}); submit with --requeue")
    return Handover(f"requeued SLURM job {job_id}", requeued=True)


# Where a job is once requeued, until it runs again (``scontrol show job``'s JobState).
REQUEUED_STATES = ("REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "PENDING")


def job_state(scontrol: str, job_id: str) -> tuple[str | None, int]:
    """The job's state and how many times it has been restarted, as slurmctld says (None, 0: unknown)."""
    shown = subprocess.run([scontrol, "show", "job", "-o", job_id], capture_output=True, text=True)
    state = re.search(r"\bJobState=(\w+)", shown.stdout)
    restarts = re.search(r"\bRestarts=(\d+)", shown.stdout)
    return (state.group(1) if state else None), int(restarts.group(1)) if restarts else 0
