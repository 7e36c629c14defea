"""One training epoch, DDP-aware and device-agnostic (validation is :mod:`resnet.evaluation.loop`).

Batches are ``(images, labels)`` or ``(images, labels, n_skipped, skipped_paths)`` with
images as uint8 (or float) NCHW tensors; normalisation and the batch augmentation run on
the device (``StepContext.normalize`` / ``augment``), in channels_last where asked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from ..config import Runtime
from ..distributed import DistEnv, all_reduce_sum


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
    grad_clip: float = 0.0
    on_nonfinite: str = "stop"  # stop | skip
    ema: nn.Module | None = None  # timm ModelEmaV3
    freeze_bn: bool = False  # BN layers stay in eval mode: running statistics used, not updated
    log_every: int = 50
    max_steps: int | None = None
    progress: bool = True

    @property
    def env(self) -> DistEnv:
        return self.runtime.env


@dataclass
class EpochStats:
    loss: float = 0.0
    images: int = 0
    steps: int = 0
    skipped_images: int = 0  # unreadable files the loader dropped
    skipped_paths: list[str] = field(default_factory=list)  # the first few, "path (reason)"
    skipped_steps: int = 0  # non-finite losses skipped (on_nonfinite=skip)
    seconds: float = 0.0
    lr: float = 0.0
    history: list[dict] = field(default_factory=list)  # per log_every steps: step, loss, lr, images/s

    @property
    def images_per_s(self) -> float:
        return self.images / self.seconds if self.seconds else 0.0


def _split(batch) -> tuple[torch.Tensor, torch.Tensor, int, list[str]]:
    """``(images, labels)`` or ``data.Batch(images, labels, skipped, skipped_paths)``."""
    images, labels = batch[0], batch[1]
    skipped = int(batch[2]) if len(batch) > 2 else 0
    paths = list(batch[3]) if len(batch) > 3 else []
    return images, labels, skipped, paths


def train_one_epoch(
    model: nn.Module,
    loader: Iterable,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    ctx: StepContext,
    epoch: int,
    global_step: int,
) -> EpochStats:
    """Train for one pass over ``loader``; ``global_step`` counts optimizer steps before it."""
    model.train()
    if ctx.freeze_bn:
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.eval()
    stats = EpochStats()
    total = len(loader) if ctx.max_steps is None else min(len(loader), ctx.max_steps)
    bar = tqdm(total=total, desc=f"train {epoch}", disable=not (ctx.progress and ctx.env.is_main), leave=False)
    loss_sum = torch.zeros((), device=ctx.env.device)
    start = window_start = time.perf_counter()
    window_images = 0
    for i, batch in enumerate(loader):
        if i >= total:
            break
        images, labels, skipped, paths = _split(batch)
        stats.skipped_images += skipped
        stats.skipped_paths.extend(paths[: max(5 - len(stats.skipped_paths), 0)])
        if images.shape[0] == 0:  # every image of this batch was unreadable
            continue
        images, labels = ctx.runtime.to_device(images, labels)
        images = ctx.normalize(ctx.runtime.memory_format(images))
        if ctx.augment is not None:
            images, labels = ctx.augment(images, labels)
        with ctx.runtime.autocast():
            loss = ctx.loss_fn(model(images), labels)
        if not _all_finite(loss, ctx.env):
            step = global_step + stats.steps + stats.skipped_steps
            if ctx.on_nonfinite == "stop":
                bar.close()  # clear the progress line, so that the message starts its own
                raise NonFiniteLoss(
                    f"non-finite loss ({loss.item()}) at step {step} (epoch {epoch}, batch {i}); "
                    "the last good checkpoint is kept. Lower optim.lr, set grad_clip=1.0, "
                    "or on_nonfinite=skip to skip such steps."
                )
            stats.skipped_steps += 1
            optimizer.zero_grad(set_to_none=True)
            continue
        optimizer.zero_grad(set_to_none=True)
        if ctx.scaler is not None:
            ctx.scaler.scale(loss).backward()
            if ctx.grad_clip:
                ctx.scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(model.parameters(), ctx.grad_clip)
            ctx.scaler.step(optimizer)
            ctx.scaler.update()
        else:
            loss.backward()
            if ctx.grad_clip:
                nn.utils.clip_grad_norm_(model.parameters(), ctx.grad_clip)
            optimizer.step()
        scheduler.step()
        if ctx.ema is not None:
            ctx.ema.update(model, step=global_step + stats.steps)
        n = images.shape[0]
        loss_sum += loss.detach() * n
        stats.images += n
        stats.steps += 1
        window_images += n
        bar.update(1)
        if stats.steps % ctx.log_every == 0 or i == total - 1:
            now = time.perf_counter()
            lr = optimizer.param_groups[0]["lr"]
            rate = window_images * ctx.env.world_size / max(now - window_start, 1e-9)
            record = {"step": global_step + stats.steps, "loss": loss.item(), "lr": lr, "images_per_s": rate}
            stats.history.append(record)
            bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{lr:.3g}", img_s=f"{rate:.0f}")
            window_start, window_images = now, 0
    bar.close()
    stats.seconds = time.perf_counter() - start
    stats.lr = optimizer.param_groups[0]["lr"]
    totals = all_reduce_sum(
        torch.tensor([loss_sum.item(), stats.images, stats.skipped_images], dtype=torch.float64, device=ctx.env.device),
        ctx.env,
    )
    stats.loss = totals[0].item() / max(totals[1].item(), 1)
    stats.images = int(totals[1].item())  # global, for images/s
    stats.skipped_images = int(totals[2].item())
    return stats


def _all_finite(loss: torch.Tensor, env: DistEnv) -> bool:
    """Every process must agree, or DDP would hang in backward on the ones that go on."""
    finite = torch.isfinite(loss.detach()).to(torch.float32)
    if env.distributed:
        finite = all_reduce_sum(finite.reshape(1), env) / env.world_size
    return bool(finite.min() == 1.0)
