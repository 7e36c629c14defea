"""Optimizer and per-step LR schedule from the optim/ and sched/ config groups."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
from torch import nn

OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("step", "cosine", "onecycle")


def scaled_lr(base_lr: float, global_batch: int) -> float:
    """The configured LR is per 256 images (Goyal et al. 2017): scale linearly."""
    return base_lr * global_batch / 256


def param_groups(model: nn.Module, weight_decay: float, no_decay_norm_and_bias: bool) -> list[dict]:
    """BN weights/biases and conv/linear biases (tensors of rank <= 1) get no weight decay."""
    if not no_decay_norm_and_bias:
        return [{"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": weight_decay}]
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (no_decay if p.ndim <= 1 else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(cfg: Mapping, model: nn.Module, global_batch: int) -> torch.optim.Optimizer:
    name = cfg["name"]
    lr = scaled_lr(cfg["lr"], global_batch)
    groups = param_groups(model, cfg["weight_decay"], cfg.get("no_decay_norm_and_bias", True))
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=cfg["momentum"], nesterov=cfg.get("nesterov", False))
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=tuple(cfg.get("betas", (0.9, 0.999))))
    raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)} (optim=sgd)")


def lr_factor(cfg: Mapping, steps_per_epoch: int, epochs: int) -> Callable[[int], float]:
    """step -> multiplier of the peak LR, for every schedule (stepped once per optimizer step)."""
    name = cfg["name"]
    total = max(steps_per_epoch * epochs, 1)
    warmup = int(cfg.get("warmup_epochs", 0) * steps_per_epoch)

    def warm(step: int) -> float | None:
        return (step + 1) / warmup if step < warmup else None

    if name == "step":
        milestones = [m * steps_per_epoch for m in cfg["milestones"]]
        gamma = cfg["gamma"]
        return lambda s: warm(s) or gamma ** sum(s >= m for m in milestones)
    if name == "cosine":
        floor = cfg.get("min_lr_ratio", 0.0)

        def cosine(s: int) -> float:
            w = warm(s)
            if w is not None:
                return w
            t = (s - warmup) / max(total - warmup, 1)
            return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0)))

        return cosine
    if name == "onecycle":
        peak = max(int(cfg.get("pct_start", 0.25) * total), 1)
        return lambda s: (s + 1) / peak if s < peak else max(total - s, 0) / max(total - peak, 1)
    raise ValueError(f"unknown schedule {name!r}; choose one of {', '.join(SCHEDULES)} (sched=cosine)")


def build_scheduler(
    cfg: Mapping, optimizer: torch.optim.Optimizer, steps_per_epoch: int, epochs: int
) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(cfg, steps_per_epoch, epochs))
