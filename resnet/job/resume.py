"""Where a run starts: from scratch, or from a checkpoint whose state fits this run."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..checkpoint import CheckpointError, load_weights
from ..checkpoint.errors import error_line
from ..checkpoint.training_state import TrainingState, find_resume, saved_at
from ..config import ConfigError
from ..engine.optim import LR_KEYS, load_scheduler_state, scale_lr
from ..runtime.distributed import DistEnv
from .resume_rules import Difference, as_typed, compare

if TYPE_CHECKING:
    from ..engine.train_config import TrainConfig


@dataclass
class ResumePoint:
    """The epoch and step a run starts at, its history so far; a mid-epoch checkpoint's partial epoch."""

    epoch: int = 0
    step: int = 0
    history: list[dict] = field(default_factory=list)
    partial: dict | None = None  # this rank's EpochStats.state() of the interrupted epoch
    rng: dict | None = None  # this rank's generator state where the interrupted run was


def resume(config: TrainConfig, training, env: DistEnv, run_dir: Path, layout: dict) -> ResumePoint:
    """Load ``config.resume``'s checkpoint into ``training`` (model, optimizer, scheduler, scaler, EMA),
    or start from scratch; every way a checkpoint cannot fit this run is one line naming the fix."""
    try:  # a missing path, a weights-only file, a file that would unpickle code: one line
        path = find_resume(config.resume, run_dir)
        state = TrainingState.read(path, torch.device("cpu")) if path is not None else None
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(str(err).splitlines()[0]) from None
    if state is None:
        if env.is_main and str(config.resume).lower() == "true":  # a run killed before its first save, or a new one
            print(f"resume=true: no last.pt in {run_dir} yet; starting from step 0", flush=True)
        if config.init:
            init_weights(config.init, training, env)
        return ResumePoint()
    steps_per_epoch = training.steps_per_epoch
    rescale = _check_same_data(state, path, layout, config.data_changed, steps_per_epoch)
    # a mid-epoch resume needs the batch order of the run that saved it (the training set itself is
    # _check_same_data's: a checkpoint from before its record still resumes)
    order = {k: v for k, v in layout.items() if k not in IDENTITY}
    if state.epoch_partial is not None and {k: v for k, v in state.layout.items() if k not in IDENTITY} != order:
        raise ConfigError(
            f"{path} was saved mid-epoch with {state.layout}; resuming there needs the same "
            f"(now {layout}): launch it as before, or resume from an epoch-end checkpoint"
        )
    partial = state.partial_of(env.rank)  # this rank's own totals of that epoch (loss sum, skipped images)
    changes = check_resumable(config, state, path, layout, training.meta)
    _load_state(training, state, path, with_schedule=not rescale)
    if rescale:  # the schedule built for this set's size (and this config's LR), taken to where the run is
        with warnings.catch_warnings():  # no optimizer step in between: torch's warning is for training
            warnings.simplefilter("ignore", UserWarning)
            for _ in range(state.epoch * steps_per_epoch):
                training.scheduler.step()
        if env.is_main:
            print(
                f"data_changed=rescale: {rescale}; the rest of the schedule is planned for this set's size", flush=True
            )
    for change in changes:  # a new LR scale: the loaded optimizer and schedule still hold the old one
        if change.key == "optim.lr" and not rescale:  # a rebuilt schedule has the new LR already
            scale_lr(training.optimizer, training.scheduler, change.now / change.was)
    if env.is_main:
        where = saved_at(state.epoch, partial["batches"] if partial else None)
        print(f"resumed from {path} {where} (step {state.step})")
        if changes:
            print(f"changed on resume: {'; '.join(str(c) for c in changes)}")
    return ResumePoint(state.epoch, state.step, list(state.history), partial, state.rng_of(env.rank))


# the override that gives a group back its recorded option, where one key names it
GROUP_HINTS = {"model.arch": "model", "optim.name": "optim", "sched.name": "sched", "data.name": "data"}


def check_resumable(config: TrainConfig, state: TrainingState, path: Path, layout: dict, meta) -> list[Difference]:
    """Refuse, in one line naming both values, a checkpoint that another config trained (the
    fixed keys of :mod:`.resume_rules`, the world size, the padding the model was built with);
    return the settings this resume changes."""
    recorded = state.recorded()
    now = {**config.recorded, "world_size": layout["world_size"]}
    refused, changed = compare(recorded, now) if state.config else ([], [])
    was_padding = state.meta.get("padding")
    if was_padding is not None and was_padding != meta.padding.as_dict() and not state.grid:
        refused.insert(0, Difference("padding", state.meta.get("padding_name"), meta.padding_name))
    if refused:
        raise ConfigError(refusal(path, refused))
    # a grid run resumes with its own presets and BatchNorm layout: another list of as many presets
    # would load and train one preset's BatchNorm rows as another's
    (was, norms_was), grid = state.grid_layout(), list(config.grid or [])
    if was != grid:
        given = f"grid=[{','.join(was)}]" if was else "no grid="
        raise ConfigError(
            f"{path} was trained with {given}, this run has {grid or 'none'}: pass the grid it was "
            "trained with, or start over with resume=false"
        )
    if was and norms_was != config.grid_bn:
        raise ConfigError(
            f"{path} was trained with grid_bn={norms_was}: pass grid_bn={norms_was}, or start over with resume=false"
        )
    planned, sched = recorded.get("epochs"), config.sched.name
    if isinstance(planned, int) and config.epochs > planned and sched in ENDS_AT_PLAN:  # past a schedule's end
        raise ConfigError(
            f"{path} was planned for epochs={planned} and sched={sched} ends there, so it cannot train to epochs="
            f"{config.epochs}: fine-tune from its weights in a new run dir instead (init={path} epochs=<more> "
            f"hydra.run.dir=<new dir>, with a fresh optimizer and schedule), or keep epochs={planned}"
        )
    return changed


# schedules whose state ends at the planned last step: OneCycleLR refuses a step past it, a cosine
# would climb back up. (step: its milestones are absolute, and past them the LR stays where it is.)
ENDS_AT_PLAN = ("onecycle", "cosine")


def init_weights(source: str, training, env: DistEnv) -> None:
    """A fine-tune's start: the weights of ``source`` (a training checkpoint or any weights file
    :func:`resnet.checkpoint.load_checkpoint` reads), into the model and its EMA; the optimizer and
    the schedule start afresh. Another padding is allowed: that is what a fine-tune to a grid is."""
    from ..checkpoint import load_checkpoint

    path = Path(source)
    try:
        checkpoint = load_checkpoint(path)
        load_weights(training.model, checkpoint["model"], path, arch=(checkpoint.get("meta") or {}).get("arch"))
    except (CheckpointError, FileNotFoundError) as err:
        raise ConfigError(f"init={source}: {error_line(err)}") from None
    if training.ema is not None:
        training.ema.module.load_state_dict(training.model.state_dict())
    if env.is_main:
        print(f"initialised from {path} (fine-tune: a fresh optimizer and schedule)")


def refusal(path: Path, refused: list[Difference]) -> str:
    # the difference the message leads with: the one a group's option names, else the first
    first = next((d for d in refused if d.key in GROUP_HINTS or d.key == "padding"), refused[0])
    more = [d.key for d in refused if d is not first]
    also = f" (and {len(more)} more: {', '.join(more[:4])}{', ...' if len(more) > 4 else ''})" if more else ""
    group = GROUP_HINTS.get(first.key)
    if first.key == "padding":
        fix = f"pass +padding={first.was}" if first.was else "drop +padding="
    elif first.key == "world_size":
        fix = f"launch {first.was} processes"
    elif group:
        fix = f"pass the {group}= it was trained with ({group}={first.was})"
    else:
        fix = f"pass {first.key}={as_typed(first.was)}"
    return (
        f"{path} was trained with {first.key}={as_typed(first.was)}, this run has {as_typed(first.now)}{also}: "
        f"{fix} to resume it, or start over in another hydra.run.dir (or with resume=false)"
    )


def _check_same_data(state: TrainingState, path: Path, layout: dict, changed: str, steps_per_epoch: int) -> str | None:
    """The training set of ``state`` (:func:`data.identity.train_identity`, recorded since it exists)
    against this run's: another set would run a schedule planned for another size. Refused in one
    line, or (``data_changed=rescale``, from an epoch's end) what differs, for the caller to say.
    A checkpoint from before the record: the steps per epoch its schedule was planned for
    (OneCycleLR's ``total_steps`` over its ``epochs``) against this run's."""
    was = state.layout.get("train_images"), state.layout.get("train_fingerprint")
    now = layout.get("train_images"), layout.get("train_fingerprint")
    content = state.layout.get("train_content"), layout.get("train_content")  # shards; recorded since it exists
    if was == now and None not in content and content[0] != content[1]:
        was, now = (*was, content[0]), (*now, content[1])  # same names and labels, other bytes
    if was[0] is None:
        total, epochs = (state.scheduler or {}).get("total_steps"), (state.config or {}).get("epochs")
        if not isinstance(total, int) or not isinstance(epochs, int) or total == steps_per_epoch * epochs:
            return None
        what = f"its schedule planned {total / epochs:,.0f} steps an epoch, this set gives {steps_per_epoch:,}"
    elif was == now:
        return None
    else:
        what = (
            f"{now[0]:,} training images now, {was[0]:,} then"
            if was[0] != now[0]
            else f"the same {now[0]:,} training images in count, but other names or labels"
            if was[1] != now[1]
            else f"the same {now[0]:,} training images by name and label, but other bytes (a shard's size or a "
            "sample's checksum in index.json)"
        )
    if changed == "rescale":
        if state.epoch_partial is not None:
            raise ConfigError(
                f"{path} was saved mid-epoch, and the training set changed since ({what}): "
                "data_changed=rescale goes on from an epoch's end only; restore the data to finish "
                "that epoch, or fine-tune from it: init=<last.pt> hydra.run.dir=<new dir>"
            )
        return what
    raise ConfigError(
        f"{path} was trained on another training set ({what}): restore the data it was trained on (a copy "
        f"elsewhere must hold the same files), pass data_changed=rescale to go on with the rest of the schedule "
        f"planned for this set's size, or fine-tune from it in a new run dir: init={path} hydra.run.dir=<new dir>"
    )


IDENTITY = ("train_images", "train_fingerprint", "train_content")  # data.identity's keys of a checkpoint's layout


def _load_state(training, state: TrainingState, path: Path, with_schedule: bool) -> None:
    try:  # another architecture, missing keys: one line naming both and the fix
        load_weights(training.model, state.model, path, arch=state.meta["arch"])  # not wrapped yet
    except CheckpointError as err:
        raise ConfigError(str(err)) from None
    try:
        fresh = [{k: g[k] for k in LR_KEYS if k in g} for g in training.optimizer.param_groups]
        training.optimizer.load_state_dict(state.optimizer)
        if with_schedule:
            load_scheduler_state(training.scheduler, state.scheduler)
        else:  # the fresh schedule's LRs (this config's): it is about to be taken to where the run is
            for group, kept in zip(training.optimizer.param_groups, fresh):
                group.update(kept)
        if training.scaler is not None and state.scaler is not None:
            training.scaler.load_state_dict(state.scaler)
        if training.ema is not None and state.ema is not None:
            load_weights(training.ema.module, state.ema, f"{path} (its EMA weights)")
    except (ValueError, KeyError, TypeError) as err:
        raise ConfigError(
            f"{path} was saved with another optimizer or schedule ({error_line(err)}); resume with the "
            "optim= and sched= it was trained with (its config is in the checkpoint), or start over: resume=false"
        ) from None
