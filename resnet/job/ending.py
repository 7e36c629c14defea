"""How a training run ends: its fit (what the epochs leave for the results row), a stop handed
over to SLURM or submitit (or ended with the command that resumes), and a finished run found
again in its run dir, which is left as it is."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from data.dataloader import raised_in_worker
from data.shm import out_of_room

from ..command_lines import app_words, command, override
from ..config import ConfigError
from ..runtime.container import volume_advice
from ..runtime.distributed import DistEnv, on_rank0
from .checkpointer import Checkpointer, RunFailed
from .peers import PeerLost, first_survivor, lost_peer, restarts_left
from .preempt import Stopped, StopRequest
from .resume import refusal
from .resume_rules import compare

if TYPE_CHECKING:
    from ..engine.train_config import TrainConfig


class LoaderWorkerDied(RunFailed):
    """A DataLoader worker process died (the kernel's OOM killer, most often)."""


@dataclass
class Fit:
    """What the epochs left for the results row: the last validation (model and EMA), the last
    epoch's train metrics (resnet/engine/totals.py: loss, images_per_s, ...), and the epochs the run went to."""

    epochs: int
    val: dict = field(default_factory=dict)
    ema_val: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    trained_to: int = 0  # the epochs done when it returned: == epochs when the run finished

    @property
    def finished(self) -> bool:
        return self.trained_to >= self.epochs > 0

    def fill_from(self, other: Fit) -> None:
        """Every field of ``other`` into this one (the fit :func:`handing_over` yielded, read after the epochs)."""
        self.__dict__.update(other.__dict__)

    @classmethod
    def from_history(cls, epochs: int, history: list[dict]) -> Fit:
        """The fit of a run whose every epoch is already saved (killed or requeued between its last
        save and results.json): its last validation and train metrics, as the last epoch's row holds them."""
        last = history[-1] if history else {}
        val = {k[4:]: v for k, v in last.items() if k.startswith("val_")}
        ema_val = {k[4:]: v for k, v in last.items() if k.startswith("ema_")}
        train = {k[6:]: v for k, v in last.items() if k.startswith("train_")}
        return cls(epochs, val, ema_val, train, history, trained_to=epochs)


def why_dead(worker_error: str) -> str:
    """What a loader worker's death says, by the signal that killed it: SIGKILL, the kernel's OOM
    killer most often; a stop signal, sent from outside to the run's processes (not memory)."""
    stopped = re.search(r"\((SIGTERM|SIGINT|SIGHUP|SIGQUIT)\)", worker_error)
    if stopped:
        return (
            f"{stopped.group(1)} reached the worker from outside this run (a kill of its process group, a job's "
            "end); run again with resume=true"
        )
    return (
        "a worker that dies unasked was most often killed for memory: lower data.workers or batch_size, then run "
        "again with resume=true"
    )


@contextlib.contextmanager
def handing_over(stop: StopRequest, saver: Checkpointer, run_dir: Path, env: DistEnv) -> Iterator[Fit]:
    """Around the epochs (they fill in the :class:`Fit` yielded): the signal handlers are restored
    however they end; a dead loader worker is one line saying what is kept; a stop request
    (last.pt holds where every rank stopped) is handed to SLURM or submitit and ends the run with
    :class:`Stopped`, unless every epoch was trained: then the run goes on to its results."""
    fit = Fit(0)
    try:
        try:
            yield fit
        except RuntimeError as err:
            lost = lost_peer(err, env)
            if lost is not None:  # another process stalled or died: one line, requeue, exit REQUEUE_STATUS
                raise peer_lost_ending(lost, stop, saver.kept, saver.writes > 0, run_dir, env) from None
            room = out_of_room(err)
            if room is not None:  # /dev/shm full, in a worker's words or by its death (SIGBUS)
                raise LoaderWorkerDied(f"{room}; {saver.kept}; then run again with resume=true") from None
            # torch's words for a dead worker (data.dataloader); an exception a live worker raised is its own
            if "DataLoader worker" not in str(err) or raised_in_worker(err) is not None:
                raise
            first = str(err).splitlines()[0].rstrip(". ")
            raise LoaderWorkerDied(f"{first}; {saver.kept}: {why_dead(str(err))}") from None
        if not stop.requested:
            return
        if fit.finished:  # the signal came after the last epoch was saved: nothing left to requeue for
            if env.is_main:
                print(
                    f"note: {stop.name} arrived after the last epoch was saved; the run is complete, not requeued",
                    flush=True,
                )
            return
        name, status = stop.name, stop.status
        done = stop.hand_over()
        saved = f"saved {saver.path}" if saver.writes else f"before its first step, nothing new to save ({saver.kept})"
        resume = "" if done.requeued else f"; to go on: {resume_command(run_dir, env)}"
        raise Stopped(f"stopped by {name}: {saved}; {done.text}{resume}", requeued=done.requeued, status=status)
    finally:
        stop.restore()


def peer_lost_ending(
    lost: PeerLost, stop: StopRequest, kept: str, saved: bool, run_dir: Path, env: DistEnv
) -> PeerLost:
    """``lost``'s line completed: what is kept, and the requeue (by the lowest surviving rank), the
    restart torchrun will make, or the command that goes on. Not requeued: a peer that failed on an
    error of its own (status 1), or a start that saved nothing (it would end the same way again)."""
    found, restart, status = lost.census, restarts_left(), lost.status
    if found is not None and found.failed:  # a process's own error: going on would meet it again
        then, status = f"not requeued: fix that, then go on: {resume_command(run_dir, env)}", 1
    elif restart is not None:  # torchrun's own decision
        then = f"torchrun starts the workers again ({restart}), and resume=true goes on"
    elif not saved:  # nothing saved since this start: a requeue would meet the same end, forever
        then = f"not requeued: this start saved nothing, so a requeue would repeat it; to go on: " \
               f"{resume_command(run_dir, env)}"  # fmt: skip
    else:
        done = stop.hand_over_alone(first_survivor(env, found))
        then = done.text if done.requeued else f"{done.text}; to go on: {resume_command(run_dir, env)}"
    return PeerLost(f"{lost}; {kept}; {then}", found, status)


def resume_command(run_dir: Path, env: DistEnv) -> str:
    """The command that resumes this run: its launcher (torchrun on one node: its process count;
    on several, the launch's own flags are the user's), its own overrides, resume=true, its run dir."""
    from hydra.core.hydra_config import HydraConfig

    overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    kept = [o for o in overrides if not o.lstrip("+~").startswith(("resume=", "hydra.run.dir="))]
    launcher = []
    if env.launch is not None and env.launch.launcher == "torchrun":
        launcher = ["torchrun", f"--nproc_per_node={env.local_world_size}"]
        if env.world_size > env.local_world_size:
            launcher.insert(1, "<its --nnodes and --rdzv flags>")
    line = command([*app_words("train", launcher), *kept, "resume=true", override("hydra.run.dir", run_dir)])
    advice = volume_advice(run_dir)  # docker run --rm without a volume: there is nothing to resume from
    return line if advice is None else f"{line} (but {advice})"


def finished_run(config: TrainConfig, env: DistEnv, run_dir: Path) -> dict | None:
    """The results of the finished run of this config in ``run_dir``, or None where there is
    none (a collective: rank 0 reads, everyone learns). A run is finished when results.json
    holds ``epochs`` at least this config's. Nothing is written: started again, requeued or
    resubmitted, a finished run keeps its files byte for byte. A finished run of another config
    (a fixed key differs) is refused in one line, before anything is written."""
    value = on_rank0(env, lambda: _read_finished(config, run_dir), ConfigError)
    if value is None:
        return None
    if env.is_main:
        top1 = value.get("top1_err")
        shown = f"{top1:.2f}%" if isinstance(top1, (int, float)) else "none"
        print(
            f"run in {run_dir} already finished: top-1 err {shown}; results.json kept (to train it again, pass "
            f"another hydra.run.dir)\nevaluate it: {eval_command(config, run_dir / 'last.pt')}",
            flush=True,
        )
    return value


def finished_results(run_dir: Path, epochs: int) -> dict | None:
    """``run_dir``'s results.json where it holds ``epochs`` or more; None where it is absent, not
    ours (training writes a new one at its end) or short of them (an earlier stop_after invocation,
    or a run being extended: resume decides)."""
    try:
        results = json.loads((run_dir / "results.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(results, dict) or not isinstance(results.get("epochs"), int) or results["epochs"] < epochs:
        return None
    return results


def _read_finished(config: TrainConfig, run_dir: Path) -> dict | None:
    results = finished_results(run_dir, config.epochs)
    if results is None:
        return None
    last = run_dir / "last.pt"
    if last.exists():
        from ..checkpoint.training_state import TrainingState

        try:
            state = TrainingState.read(last, torch.device("cpu"))
        except (FileNotFoundError, ValueError):
            state = None
        if state is not None and state.config:
            refused, _ = compare(state.config, config.recorded)
            if refused:
                raise ConfigError(f"{run_dir} holds a finished run of another config: " + refusal(last, refused))
    return results


def eval_command(config: TrainConfig, checkpoint: Path) -> str:
    """The ``eval.py`` command that evaluates ``checkpoint`` on this run's validation data, under the
    padding it was trained with (eval.py reads the rest from the checkpoint: its crop, preprocessing)."""
    args = [*app_words("eval"), override("weights", checkpoint), f"data={config.data.name}"]  # eval.py's: imagenet
    if config.data.root:
        args.append(override("data.root", config.data.root))
    return command(args)
