"""Stop cleanly when the cluster says so: save at the next step boundary, then requeue.

SLURM warns a job before its time limit or a preemption with a signal (``sbatch
--signal=USR1@120``; submitit uses ``USR2`` by default). The handler here only records it. The
training loop reads the record at the end of every step; under DDP the ranks agree on it in the
all-reduce they already make per step, so every rank stops after the same step. The run then
saves ``last.pt`` (mid-epoch: position, partial epoch statistics, RNG states) and calls
:meth:`StopRequest.hand_over`, which requeues the job:

* launched by submitit, with submitit's signal: submitit's own handler runs (it pickles the
  hydra-submitit-launcher job and requeues it), so the requeued job calls ``train.py`` again;
* otherwise, inside a SLURM job: rank 0 runs ``scontrol requeue $SLURM_JOB_ID``;
* outside SLURM: nothing; the message says how to resume.

With ``resume=true`` and a run dir that does not change across requeues (``hydra.run.dir=...$SLURM_JOB_ID``)
the requeued job resumes to the weights an uninterrupted run would have had.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable

import torch

from ..distributed import DistEnv, all_reduce_sum

SIGNALS = (signal.SIGUSR1,)  # ours, for plain sbatch/srun; submitit's is added when it launched us


class Stopped(RuntimeError):
    """Training stopped early on a signal, after saving; ``requeued``: the job will go on."""

    def __init__(self, message: str, requeued: bool):
        super().__init__(message)
        self.requeued = requeued


class StopRequest:
    """Records the first stop signal; :meth:`install` while training, :meth:`restore` after."""

    def __init__(self, env: DistEnv):
        self.env = env
        self.signum: int | None = None
        self._previous: dict[int, Callable | int | None] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else "none"

    def install(self) -> StopRequest:
        if threading.current_thread() is not threading.main_thread():
            return self  # signal handlers can only be set from the main thread (a library caller's thread)
        for signum in (*SIGNALS, *self._submitit_signal()):
            self._previous[signum] = signal.signal(signum, self._record)
        return self

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()

    def agree(self, anyone: bool) -> bool:
        """Take the all-reduced decision: a rank that saw no signal stops with the others."""
        if anyone and self.signum is None:
            self.signum = next(iter(self._previous), SIGNALS[0])
        return anyone

    def agreed(self) -> bool:
        """Whether any process was asked to stop (a collective: every process calls it)."""
        flag = torch.tensor([float(self.requested)], device=self.env.device)
        return self.agree(bool(all_reduce_sum(flag, self.env).item() > 0))

    def _record(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum = signum

    def _submitit_signal(self) -> tuple[int, ...]:
        launch = self.env.launch
        if launch is None or launch.launcher != "submitit":
            return ()
        from submitit import JobEnvironment

        return (JobEnvironment._usr_sig(),)

    def hand_over(self) -> str:
        """After the checkpoint is saved (on every rank): requeue; returns what was done."""
        previous = self._previous.get(self.signum)
        launch = self.env.launch
        self.restore()
        if callable(previous) and launch is not None and launch.launcher == "submitit":
            previous(self.signum, None)  # submitit checkpoints the job and requeues it (rank 0 exits here)
            return "handed to submitit (rank 0 requeues the job)"
        job_id = launch.job_id if launch is not None else os.environ.get("SLURM_JOB_ID")
        if not job_id:
            return "not requeued (not a SLURM job)"
        if not self.env.is_main:
            return f"rank 0 requeues SLURM job {job_id}"
        scontrol = shutil.which("scontrol")
        if scontrol is None:
            return f"not requeued: scontrol is not on PATH; run `scontrol requeue {job_id}` yourself"
        done = subprocess.run([scontrol, "requeue", job_id], capture_output=True, text=True)
        if done.returncode != 0:
            reason = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no message"]
            return f"not requeued: scontrol requeue {job_id} failed ({reason[0]}); submit with --requeue"
        return f"requeued SLURM job {job_id}"
