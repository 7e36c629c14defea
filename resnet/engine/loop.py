"""One training epoch, DDP-aware and device-agnostic (validation is :mod:`resnet.evaluation.loop`).

Batches are ``(images, labels)`` or ``(images, labels, n_skipped, skipped_paths)`` with
images as uint8 (or float) NCHW tensors; normalisation and the batch augmentation run on
the device (``StepContext.normalize`` / ``augment``), in channels_last where asked.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from data.progress import Progress

from ..job import peers
from ..job.preempt import StopRequest
from ..runtime.device import Runtime
from ..runtime.distributed import DistEnv, all_reduce_host, all_reduce_sum, gather_flat
from .totals import HOST_SUMS, STEP_SUMS, StepOutput, Totals, step_sums, train_metrics

# the bar's loss: the mean over the epoch so far (the epoch line's is the whole epoch's: "train loss (epoch mean)")
RUNNING_LOSS = "loss (running mean)"


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or inf; the message names the step."""


@dataclass
class StepContext:
    """What every step needs besides the model, optimizer and batch."""

    runtime: Runtime  # device, autocast dtype, memory format
    normalize: nn.Module
    augment: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy
    scaler: torch.amp.GradScaler | None = None  # fp16 only
    grad_clip: float = 0.0  # 0: off
    on_nonfinite: str = field(kw_only=True)  # stop | skip (train.yaml's on_nonfinite; no value of the loop's own)
    ema: nn.Module | None = None  # timm ModelEmaV3
    ema_every: int = 1  # optimizer steps between EMA updates (its decay is per update: ema_decay ** ema_every)
    freeze_bn: bool = False  # BN layers stay in eval mode: running statistics used, not updated
    log_every: int = field(kw_only=True)  # train.yaml's log_every
    max_steps: int | None = None  # cap on the loader batches of an epoch (smoke tests)
    checkpoint_every: int = 0  # batches between mid-epoch checkpoints (0: epoch ends only)
    # whether a mid-epoch checkpoint is due by the clock (checkpoint_minutes), asked on rank 0 before each step
    save_due: Callable[[], bool] | None = None
    stop: StopRequest | None = None  # set by a preemption signal (resnet.job.preempt)
    progress: bool = True
    before_step: Callable[[int], None] | None = None  # called with the optimizer step about to be taken (grid=)
    # max_unreadable: called with the epoch and what it has read so far (ImagesRead, summed over the processes)
    # before each step, and with the whole epoch's at its end; raises to stop the run (resnet.engine.run)
    check_unreadable: Callable[[int, ImagesRead], None] | None = None

    @property
    def env(self) -> DistEnv:
        return self.runtime.env


@dataclass(frozen=True)
class ImagesRead:
    """The files an epoch could not read, of all it read (readable or not), over every process, so far
    or (``ended``) in the whole epoch; ``examples``: the first few, "path (reason)" (at the end: from
    every process; before it: this process's)."""

    unreadable: int
    read: int
    examples: list[str] = field(default_factory=list)
    ended: bool = False


@dataclass
class EpochStats:
    """One epoch's running totals on this process; ``train_one_epoch`` returns them summed over
    processes, and the epoch's train metrics made from them (:mod:`resnet.engine.totals`).
    :meth:`state` / :meth:`from_state` carry them through a mid-epoch checkpoint: every field but those
    set at its end (``metrics``, ``lr``, ``interrupted``), the sums under their own names."""

    # the device sums by name (resnet.engine.totals.STEP_SUMS: the loss summed over images, ...) as
    # last read: None until a checkpoint reads them; at the end of the epoch, every total summed over processes
    sums: dict[str, float] | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # the epoch's TRAIN_METRICS (set at its end)
    images: int = 0
    steps: int = 0  # optimizer steps taken
    batches: int = 0  # loader batches consumed: where a resumed run starts reading
    skipped_images: int = 0  # unreadable files the loader dropped
    skipped_paths: list[str] = field(default_factory=list)  # the first few, "path (reason)"
    skipped_steps: int = 0  # non-finite losses skipped (on_nonfinite=skip)
    empty_steps: int = 0  # steps every process skipped because one of them read no image
    unused_images: int = 0  # the readable images of those steps, on the other processes
    seconds: float = 0.0
    lr: float = 0.0
    history: list[dict] = field(default_factory=list)  # per log_every steps: step, loss, lr, images/s
    interrupted: bool = False  # a stop signal ended the epoch early (resnet.job.preempt)

    @property
    def loss(self) -> float:
        """The epoch's mean training loss (0 before its end)."""
        return self.metrics.get("loss", 0.0)

    def state(self) -> dict:
        """The device sums under their own names (``loss_sum``, ...), then the counts (not those set at its end)."""
        return {**(self.sums or {}), **{name: getattr(self, name) for name in _saved()}}

    @classmethod
    def from_state(cls, state: dict) -> EpochStats:
        stats = cls(**{name: state[name] for name in _saved() if name in state})  # older files lack newer keys
        stats.sums = {name: state[name] for name in STEP_SUMS if name in state}  # a sum not there: NaN
        return stats


def _saved() -> list[str]:
    """The fields of :class:`EpochStats` a mid-epoch checkpoint keeps, in their order."""
    return [f.name for f in fields(EpochStats) if f.name not in ("sums", "metrics", "lr", "interrupted")]


def train_one_epoch(
    model: nn.Module,
    loader: Iterable,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    ctx: StepContext,
    epoch: int,
    global_step: int,
    resume: EpochStats | None = None,
    checkpoint: Callable[[int, EpochStats], None] | None = None,
) -> EpochStats:
    """Train for one pass over ``loader``; ``global_step`` counts optimizer steps before it.

    ``resume``: this epoch's totals from a mid-epoch checkpoint (``loader`` then starts after
    ``resume.batches``). ``checkpoint(global_step, stats)`` is called with this process's running totals every
    ``ctx.checkpoint_every`` batches, after a step where rank 0 found one due by the clock
    (``ctx.save_due``: ``checkpoint_minutes``), and when a stop was requested (``ctx.stop``): before the next
    batch is counted, after which the epoch ends early with ``interrupted`` set. Every process calls
    it at the same batch.

    Before each step the processes agree, in one gloo all-reduce of a few numbers on the host, whether
    all of them read at least one image (a batch whose images were all unreadable skips the step on
    every process, ``empty_steps``, instead of leaving the others waiting in DDP's gradient all-reduce)
    and whether one was asked to stop. The files each process read and could not read ride along, so
    that ``ctx.check_unreadable`` sees the epoch's counts so far, over every process, before each step.

    ``on_nonfinite=stop``: the losses stay on the device until the next ``log_every`` step, the epoch's
    end or a checkpoint, where one transfer reads them; the first non-finite one raises
    :class:`NonFiniteLoss` naming its step, and every checkpoint is written after such a read, so the
    last one holds only finite steps. ``on_nonfinite=skip``: a skipped step takes no optimizer,
    scheduler or EMA step and is not counted; its verdict is read once the backward is queued
    (docs/gpu.md, finding 4).
    """
    run = _Epoch(model, optimizer, scheduler, ctx, epoch, global_step, resume, checkpoint, len(loader))
    try:  # the progress line is cleared whatever ends the epoch, so a message starts its own line
        for batch in loader:
            if not run.consume(batch):
                break
        if run.unread:
            run.read_losses()
    finally:
        run.bar.close()
    return run.finish()


@dataclass
class StepResult:
    """What :func:`train_step` did."""

    loss: torch.Tensor  # detached, on the device
    images: int
    taken: bool  # whether the optimizer stepped
    lr: float | None = None
    host_loss: float | None = None  # on_nonfinite=skip: the loss read on the host (else None, read later)
    sums: dict[str, torch.Tensor] = field(default_factory=dict)  # a step taken: its resnet.engine.totals.STEP_SUMS


def train_step(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    ctx: StepContext,
    step: int,
    on_loss: Callable[[torch.Tensor], None] | None = None,
) -> StepResult:
    """One optimizer step on a batch as the loader gives it: to the device, normalised, augmented,
    forward, backward, (clip,) optimizer and scheduler step, EMA update. ``step`` counts the optimizer
    steps taken before it (grid draws and EMA warm-up use it). ``on_loss`` sees the detached loss
    between the forward and the backward (where :func:`train_one_epoch` queues its finite check, so
    that reading it waits for the forward only). Under ``on_nonfinite=skip`` a loss that is not finite
    on every process takes no step (``taken`` False); otherwise the caller checks the losses."""
    images, labels = ctx.runtime.to_device(images, labels)
    images = ctx.normalize(ctx.runtime.memory_format(images))
    if ctx.before_step is not None:
        ctx.before_step(step)
    if ctx.augment is not None:
        images, labels = ctx.augment(images, labels)
    dynamo = sys.modules.get("torch._dynamo")  # not loaded: nothing is compiled (importing it takes seconds)
    if dynamo is not None:  # compile=true: one graph for every batch size, not one more per grid preset
        dynamo.maybe_mark_dynamic(images, 0)  # at a short batch (tests/models/test_recompiles.py); else a no-op
    with ctx.runtime.autocast():
        logits = model(images)
        loss = ctx.loss_fn(logits, labels)
    skip = ctx.on_nonfinite == "skip"
    if skip:
        checked = _queue_check([loss], ctx.env)  # [loss, processes where it is finite]
    elif on_loss is not None:
        on_loss(loss.detach())
    optimizer.zero_grad(set_to_none=True)
    (ctx.scaler.scale(loss) if ctx.scaler is not None else loss).backward()
    host_loss = None
    if skip:
        host_loss, finite = checked.tolist()  # the forward is done; the backward may still run
        if finite < ctx.env.world_size:
            optimizer.zero_grad(set_to_none=True)
            return StepResult(loss.detach(), images.shape[0], taken=False, host_loss=host_loss)
    # the LR this step uses (after the last step a schedule has no LR left to give: OneCycleLR's would be negative)
    lr = optimizer.param_groups[0]["lr"]
    if ctx.grad_clip:
        if ctx.scaler is not None:
            ctx.scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), ctx.grad_clip)
    if ctx.scaler is not None:
        ctx.scaler.step(optimizer)  # torch reads found_inf on the host here unless the optimizer is fused
        ctx.scaler.update()
    else:
        optimizer.step()
    scheduler.step()
    if ctx.ema is not None and (step + 1) % ctx.ema_every == 0:  # the global step: the same after a resume
        ctx.ema.update(model, step=step)
    sums = step_sums(StepOutput(logits.detach(), labels, loss.detach(), images.shape[0]))
    return StepResult(loss.detach(), images.shape[0], taken=True, lr=lr, host_loss=host_loss, sums=sums)


class _Epoch:
    """The running state of one epoch on this process: :func:`train_one_epoch`'s body, batch by batch."""

    def __init__(
        self,
        model,
        optimizer,
        scheduler,
        ctx: StepContext,
        epoch: int,
        global_step: int,
        resume: EpochStats | None,
        checkpoint: Callable[[int, EpochStats], None] | None,
        batches: int,
    ):
        self.model, self.optimizer, self.scheduler, self.ctx = model, optimizer, scheduler, ctx
        self.epoch, self.checkpoint = epoch, checkpoint
        model.train()
        if ctx.freeze_bn:
            for m in model.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.eval()
        self.stats = stats = resume if resume is not None else EpochStats()
        first = stats.batches
        self.steps_before = global_step - stats.steps  # optimizer steps before this epoch
        self.end = first + batches if ctx.max_steps is None else min(first + batches, ctx.max_steps)
        shown = ctx.progress and ctx.env.is_main
        self.bar = Progress(self.end, f"train {epoch + 1}", initial=first, unit="batches", enabled=shown)  # 1-based
        self.totals = Totals(ctx.env.device, stats.sums)  # a resumed epoch's sums, else zeros
        self.lr = optimizer.param_groups[0]["lr"]  # then the LR of the last step taken
        self.start = self.window_start = time.perf_counter()
        self.seconds_before = stats.seconds
        self.window_images = 0
        # on_nonfinite=stop: (loss, step, batch, images) not read yet
        self.unread: list[tuple[torch.Tensor, int, int, int]] = []
        # the bar's running mean: this process's losses of the epoch as read on the host, x images (from a resume's)
        self.read_sum, self.read_images = (stats.sums or {}).get("loss_sum", 0.0), stats.images
        # the epoch's files so far over every process; this process's not summed yet (a resumed epoch's: its own)
        self.files = ImagesRead(0, 0)
        self.unsent = (stats.skipped_images, stats.images + stats.skipped_images + stats.unused_images)

    def consume(self, batch) -> bool:
        """Train on one loader batch; False when the epoch ends before it (its last batch was
        taken, or a stop was agreed and saved)."""
        stats, ctx = self.stats, self.ctx
        if stats.batches >= self.end:
            return False
        images, labels = batch[0], batch[1]  # data.Batch: then the files skipped, and the first few "path (reason)"
        skipped = int(batch[2]) if len(batch) > 2 else 0
        paths = list(batch[3]) if len(batch) > 3 else []
        peers.at_step(self.steps_before + stats.steps)  # where a peer that stalls or dies is reported
        files = (self.unsent[0] + skipped, self.unsent[1] + skipped + images.shape[0])
        self.unsent = (0, 0)
        agreed = _agree_before_step(images.shape[0] > 0, files, ctx)
        if agreed.stop and self.checkpoint is not None:  # saved before this batch is counted: a resume reads it again
            stats.interrupted = True
            self.save()
            return False
        index = stats.batches
        stats.batches += 1
        self.bar.update(1)  # counted before a line may be printed for it
        stats.skipped_images += skipped
        stats.skipped_paths.extend(paths[: max(5 - len(stats.skipped_paths), 0)])
        unreadable, read = self.files.unreadable + agreed.unreadable, self.files.read + agreed.read
        self.files = ImagesRead(unreadable, read, stats.skipped_paths)
        if ctx.check_unreadable is not None:  # before the step: a run over max_unreadable trains no more
            ctx.check_unreadable(self.epoch, self.files)
        if not agreed.everyone_has_data:  # a process read no image: every process skips the step, or DDP would hang
            stats.empty_steps += 1
            stats.unused_images += images.shape[0]
        else:
            self.step(images, labels, index)
        every = ctx.checkpoint_every and stats.batches % ctx.checkpoint_every == 0
        if self.checkpoint is not None and (every or agreed.due) and stats.batches < self.end:
            self.save()
        return True

    def step(self, images: torch.Tensor, labels: torch.Tensor, index: int) -> None:
        stats, ctx = self.stats, self.ctx
        tried = self.steps_before + stats.steps + stats.skipped_steps  # the step a non-finite loss is named by
        logs = (stats.steps + 1) % ctx.log_every == 0 or stats.batches == self.end  # if this step is taken
        queued: list[_ToHost] = []

        def on_loss(loss: torch.Tensor) -> None:  # on_nonfinite=stop: the losses are read every log_every steps
            self.unread.append((loss, tried, index, images.shape[0]))
            if logs:
                queued.append(_queue_check([x for x, *_ in self.unread], ctx.env))

        done = train_step(
            self.model, images, labels, self.optimizer, self.scheduler, ctx, self.steps_before + stats.steps, on_loss
        )
        if not done.taken:
            stats.skipped_steps += 1
            return
        self.lr = done.lr
        self.totals.add(done.sums)
        stats.images += done.images
        stats.steps += 1
        self.window_images += done.images
        if done.host_loss is not None:  # on_nonfinite=skip: read on the host every step
            self.read_sum += done.host_loss * done.images
            self.read_images += done.images
        if logs:
            self.log(self.read_losses(queued[0]) if self.unread else done.host_loss)

    def log(self, loss: float) -> None:
        """``loss``: this step's, for steps.csv; the bar shows the epoch's running mean (its last value is
        this process's share of the epoch line's ``train loss (epoch mean)``)."""
        now = time.perf_counter()
        rate = self.window_images * self.ctx.env.world_size / max(now - self.window_start, 1e-9)
        record = {"step": self.steps_before + self.stats.steps, "loss": loss, "lr": self.lr, "images_per_s": rate}
        self.stats.history.append(record)
        running = self.read_sum / max(self.read_images, 1)
        self.bar.log({RUNNING_LOSS: f"{running:.3f}", "lr": f"{self.lr:.3g}", "img/s": f"{rate:,.0f}"})
        self.window_start, self.window_images = now, 0

    def read_losses(self, queued: _ToHost | None = None) -> float:
        """The unread losses' check (queued by :func:`_queue_check`, or now): raises at the first
        non-finite one; returns the last loss."""
        losses = self.unread[:]
        self.unread.clear()
        values = (queued or _queue_check([loss for loss, *_ in losses], self.ctx.env)).tolist()
        n = len(losses)
        for (_, step, batch, images), value, finite in zip(losses, values[:n], values[n:]):
            if finite < self.ctx.env.world_size:  # step, epoch, batch count from 0; the message from 1, as steps.csv
                where = value if not math.isfinite(value) else "on another process"
                raise NonFiniteLoss(
                    f"non-finite loss ({where}) at step {step + 1} (epoch {self.epoch + 1}, batch {batch + 1}); the "
                    "last good checkpoint is kept. Lower optim.lr, set grad_clip=1.0, or on_nonfinite=skip to skip "
                    "such steps."
                )
            self.read_sum += value * images
            self.read_images += images
        return values[n - 1]

    def save(self) -> None:
        if self.unread:  # a checkpoint holds only steps whose losses were read finite
            self.read_losses()
        self.stats.sums = self.totals.read()
        self.stats.seconds = self.seconds_before + time.perf_counter() - self.start
        self.checkpoint(self.steps_before + self.stats.steps, self.stats)

    def finish(self) -> EpochStats:
        """The epoch's totals, summed over processes in one all-reduce (one read), and its train metrics."""
        stats, env = self.stats, self.ctx.env
        stats.seconds = self.seconds_before + time.perf_counter() - self.start
        stats.lr = self.lr
        stats.sums = self.totals.summed({name: getattr(stats, name) for name in HOST_SUMS}, env)
        for name in HOST_SUMS:  # global: images for images/s, the others for the run's checks
            setattr(stats, name, int(stats.sums[name]))
        stats.metrics = train_metrics(stats.sums, stats.seconds)
        if stats.skipped_images:  # examples from every process, not only this one's
            stats.skipped_paths = gather_flat(stats.skipped_paths, env)[:5]
        if self.ctx.check_unreadable is not None and not stats.interrupted:  # the whole epoch, whatever its size
            read = stats.images + stats.skipped_images + stats.unused_images
            self.ctx.check_unreadable(self.epoch, ImagesRead(stats.skipped_images, read, stats.skipped_paths, True))
        return stats


class _Agreed(NamedTuple):
    everyone_has_data: bool  # every process has at least one readable image
    stop: bool
    due: bool  # a checkpoint, by rank 0's clock
    unreadable: int  # the batch's files, summed over the processes
    read: int


def _agree_before_step(has_data: bool, files: tuple[int, int], ctx: StepContext) -> _Agreed:
    """What every process must know before the forward pass (:func:`train_one_epoch`), in one host-side
    all-reduce: whether every process read an image, whether one was asked to stop (a count per signal
    rides along, so that every process stops under the signal that arrived), whether rank 0's clock
    finds a checkpoint due, and the batch's unreadable and read files (``files``: this process's since
    the last step) summed over the processes."""
    votes = ctx.stop.votes() if ctx.stop is not None else []
    due = ctx.env.is_main and ctx.save_due is not None and ctx.save_due()  # one clock decides, for every rank
    without_data, due, unreadable, read, *summed = all_reduce_host(
        [float(not has_data), float(due), float(files[0]), float(files[1]), *votes], ctx.env
    )
    stop = ctx.stop.agree(summed) if ctx.stop is not None else False
    return _Agreed(
        everyone_has_data=without_data == 0, stop=stop, due=due > 0, unreadable=int(unreadable), read=int(read)
    )


class _ToHost:
    """A device tensor on its way to the host: the copy is queued now, :meth:`tolist` waits for it
    (CUDA: into pinned memory, behind an event; the host waits only for the work queued before it)."""

    def __init__(self, tensor: torch.Tensor):
        self.event = None
        if tensor.device.type == "cuda":
            self.host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            self.host.copy_(tensor, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.host = tensor

    def tolist(self) -> list:
        if self.event is not None:
            self.event.synchronize()
        return self.host.tolist()


def _queue_check(losses: list[torch.Tensor], env: DistEnv) -> _ToHost:
    """``[*losses, *on how many processes each is finite]`` (float32), queued for the host. Under
    DDP the counts are summed on the device (one small all-reduce): every process then reads the
    same verdict, and all stop or skip together."""
    values = torch.stack([loss.detach().float() for loss in losses])
    finite = torch.isfinite(values).float()
    return _ToHost(torch.cat([values, all_reduce_sum(finite, env)]))
