"""``last.pt``, written by rank 0 for every rank, and what is intact when a write fails."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from ..checkpoint.errors import error_line
from ..checkpoint.training_state import TrainingState, saved_at
from ..engine.optim import scheduler_state
from ..engine.seeding import rng_state
from ..runtime.distributed import DistEnv, gather_objects, on_rank0


class RunFailed(RuntimeError):
    """The run cannot go on, for a reason outside the config; one line says what is kept and what to do."""


class AgreedFailure(RunFailed):
    """A :class:`RunFailed` every process raises at the same point with the same line (its figures
    were summed over the processes): rank 0 alone prints it."""


class CheckpointWriteError(RunFailed):
    """``last.pt`` could not be written (a full disk, a quota); the previous one is intact."""


class NonFiniteState(RunFailed):
    """The weights, their EMA or the optimizer's state hold NaN or inf: not saved, the last finite
    ``last.pt`` kept. (A step whose loss was finite can still overflow its update.)"""


class Checkpointer:
    """Saves a run's training state to ``path``. :meth:`save` is a collective (every rank's RNG
    state and epoch totals go to rank 0, then whether the write worked comes back), so every rank
    calls it, and every rank raises :class:`CheckpointWriteError` when it failed. :attr:`kept` says
    what a user still has, for the messages of a run that fails later."""

    def __init__(self, path: Path, training, env: DistEnv, config: dict, layout: dict, history: list[dict]):
        self.path, self.training, self.env = path, training, env
        self.config, self.layout, self.history = config, layout, history  # history: the run's list, appended to
        self.kept = "the previous last.pt is intact" if path.exists() else "no last.pt was written before"
        self.writes = 0  # saves of this run that worked
        self.saved_at = time.monotonic()  # the last save that worked (or the run's start)

    def save(self, epoch_done: int, step: int, epoch_partial: dict | None = None) -> None:
        """The state after ``epoch_done`` epochs and ``step`` optimizer steps; ``epoch_partial``:
        this rank's totals of an epoch saved mid-way (:meth:`resnet.engine.loop.EpochStats.state`)."""
        rng = gather_objects(rng_state(), self.env)  # every rank's, on rank 0
        partials = gather_objects(epoch_partial, self.env) if epoch_partial is not None else None  # likewise
        # rank 0 writes; its error is raised on every rank, and nobody runs ahead of the write
        on_rank0(self.env, lambda: self._write(epoch_done, step, rng, partials), RunFailed)
        # every rank can say what is kept (a survivor of a lost rank 0 does); worded as the resume line
        batches = epoch_partial["batches"] if epoch_partial is not None else None
        self.kept = f"last.pt saved {saved_at(epoch_done, batches)} (step {step}) is intact"
        self.writes += 1
        self.saved_at = time.monotonic()

    def due_every(self, minutes: float):
        """A ``save_due`` for :class:`resnet.engine.loop.StepContext`: whether ``minutes`` have passed
        since the last save; None for 0 (by the clock: never)."""
        if not minutes:
            return None
        return lambda: time.monotonic() - self.saved_at >= 60 * minutes

    def _write(self, epoch_done: int, step: int, rng: list, partials: list | None) -> None:
        training = self.training
        bad = nonfinite(training)
        if bad:
            raise NonFiniteState(
                f"the training state went non-finite by step {step} ({len(bad)} tensors, e.g. {bad[0]}): not "
                f"saved; {self.kept}. Resume from it with a lower LR (resume=true optim.lr=<lower>), or set "
                "grad_clip=1.0"
            )
        try:
            TrainingState(
                epoch=epoch_done,
                step=step,
                optimizer=training.optimizer.state_dict(),
                scheduler=scheduler_state(training.scheduler),
                rng=rng,
                history=self.history,
                config=self.config,
                layout=self.layout,
                grid=training.grid or None,
                scaler=training.scaler.state_dict() if training.scaler is not None else None,
                ema=training.ema.module.state_dict() if training.ema is not None else None,
                epoch_partial=partials[0] if partials is not None else None,
                epoch_partial_ranks=partials,
            ).save(self.path, training.model)
        except (OSError, RuntimeError) as err:  # a full disk, a quota, a lost mount (torch's writer: RuntimeError)
            raise CheckpointWriteError(write_failure(self.path, err, self.kept)) from err


def nonfinite(training) -> list[str]:
    """The names of the floating tensors of the model, its EMA and the optimizer's state that hold
    NaN or inf (one device-to-host read for all of them)."""
    named = [(f"model.{k}", v) for k, v in training.model.state_dict().items()]
    if training.ema is not None:
        named += [(f"ema.{k}", v) for k, v in training.ema.module.state_dict().items()]
    for index, state in training.optimizer.state_dict()["state"].items():
        named += [(f"optimizer.state.{index}.{k}", v) for k, v in state.items()]
    named = [(name, t) for name, t in named if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()]
    if not named:
        return []
    finite = torch.stack([torch.isfinite(t).all() for _, t in named]).cpu()
    return [name for (name, _), ok in zip(named, finite.tolist()) if not ok]


def write_failure(name: object, err: BaseException, kept: str) -> str:
    """The line a run that could not write ``name`` ends with: the operating system's reason (``No space
    left on device``) where ``err``'s chain holds one (torch's zip writer reports a failed write as its
    own RuntimeError, raised while handling the OSError); ``kept``: :attr:`Checkpointer.kept`."""
    seen = err
    while seen is not None and not (isinstance(seen, OSError) and seen.strerror):
        seen = seen.__cause__ or seen.__context__
    reason = error_line(err) if seen is None else seen.strerror
    return (
        f"could not write {name} ({reason}); {kept}: free space or pass another hydra.run.dir, then run again "
        "with resume=true"
    )
