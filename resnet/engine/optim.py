"""Optimizer and per-step LR schedule from the optim/ and sched/ config groups.

Nothing here computes an LR by hand: the schedules are torch's ``LRScheduler`` classes
(``LinearLR`` warm-up, then ``CosineAnnealingLR``, ``MultiStepLR`` or ``OneCycleLR``, joined by
``SequentialLR``), stepped once per optimizer step, and their ``state_dict`` is what a
checkpoint keeps, so a resume continues the same curve. The optimizers are torch's SGD and
AdamW and timm's LAMB.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, fields

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch.optim import lr_scheduler

from ..grid import GridBatchNorm2d

NO_WEIGHT_DECAY = {
    "none": "every parameter decays (torchvision's V1 recipe)",
    "norm": "normalisation layers' weights and biases, chosen by module type (torchvision's norm_weight_decay, FFCV)",
    "norm_and_bias": "every tensor of rank <= 1: norm weights and biases, conv and linear biases (timm), and "
    "a per-grid BatchNorm's per-preset offsets of them",
}
NORM_LAYERS = (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm, nn.modules.instancenorm._InstanceNorm)


@dataclass(frozen=True)
class OptimConfig:
    """The ``optim`` group, checked once (:meth:`from_node`): what :func:`build_optimizer` reads.
    A key only some optimizers read is None for the others."""

    name: str
    lr: float
    ref_batch: int  # lr is per this many images of global batch
    weight_decay: float
    no_weight_decay: str  # a key of NO_WEIGHT_DECAY
    momentum: float | None = None  # sgd
    nesterov: bool | None = None  # sgd
    betas: tuple[float, float] | None = None  # adamw, lamb

    @classmethod
    def from_node(cls, node: Mapping) -> OptimConfig:
        return _typed(cls, "optim", node, OPTIMIZER_KEYS, "optim=sgd")


@dataclass(frozen=True)
class SchedConfig:
    """The ``sched`` group, checked once (:meth:`from_node`): what :func:`build_scheduler` reads.
    A key only some schedules read is None for the others."""

    name: str
    warmup_epochs: float | None = None  # step, cosine
    warmup_start_factor: float | None = None  # step, cosine
    min_lr_ratio: float | None = None  # cosine
    milestones: tuple[int, ...] | None = None  # step
    gamma: float | None = None  # step
    pct_start: float | None = None  # onecycle
    div_factor: float | None = None  # onecycle
    final_div_factor: float | None = None  # onecycle

    @classmethod
    def from_node(cls, node: Mapping) -> SchedConfig:
        return _typed(cls, "sched", node, SCHEDULE_KEYS, "sched=cosine")


# the keys each optimizer and schedule reads (besides name); a group's YAML states every one
OPTIMIZER_KEYS = {
    "sgd": ("lr", "ref_batch", "weight_decay", "no_weight_decay", "momentum", "nesterov"),
    "adamw": ("lr", "ref_batch", "weight_decay", "no_weight_decay", "betas"),
    "lamb": ("lr", "ref_batch", "weight_decay", "no_weight_decay", "betas"),
}
SCHEDULE_KEYS = {
    "step": ("milestones", "gamma", "warmup_epochs", "warmup_start_factor"),
    "cosine": ("warmup_epochs", "warmup_start_factor", "min_lr_ratio"),
    "onecycle": ("pct_start", "div_factor", "final_div_factor"),
}
LR_KEYS = ("lr", "initial_lr", "max_lr", "min_lr")  # what a schedule keeps in the optimizer's param groups


def _typed(cls, group: str, node: Mapping, reads: dict[str, tuple[str, ...]], example: str):
    """``node`` as ``cls``: a known name, each key its choice reads, no key it does not (a typo, or
    a key of another choice, would be read by nothing). Lists become tuples (the config is frozen)."""
    if isinstance(node, cls):
        return node
    plain = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    given = {key: tuple(value) if isinstance(value, list) else value for key, value in plain.items()}
    name = given.get("name")
    kind = "optimizer" if group == "optim" else "schedule"
    if name not in tuple(reads):  # (a name of another type, a mapping included, is unknown too)
        raise ValueError(f"unknown {kind} {name!r}; choose one of {', '.join(reads)} ({example})")
    wanted = ("name", *reads[name])
    missing = [key for key in wanted if given.get(key) is None]
    if missing:
        raise ValueError(f"{group}={name} reads {group}.{missing[0]}, which is not set; set it, e.g. in "
                         f"configs/{group}/<yours>.yaml")  # fmt: skip
    unread = sorted(set(given) - set(wanted))
    if unread:
        raise ValueError(f"{group}.{unread[0]} is read by no part of {group}={name} (it reads "
                         f"{', '.join(wanted[1:])}); leave it out, or choose the {kind} that reads it")  # fmt: skip
    return cls(**{f.name: given.get(f.name) for f in fields(cls)})


def undecayed(model: nn.Module, rule: str) -> set[nn.Parameter]:
    """The parameters ``rule`` (a key of :data:`NO_WEIGHT_DECAY`) keeps weight decay off."""
    if rule not in NO_WEIGHT_DECAY:
        raise ValueError(f"unknown optim.no_weight_decay {rule!r}; choose one of {', '.join(NO_WEIGHT_DECAY)}")
    if rule == "none":
        return set()
    if rule == "norm":
        return {p for m in model.modules() if isinstance(m, NORM_LAYERS) for p in m.parameters(recurse=False)}
    per_grid = {p for m in model.modules() if isinstance(m, GridBatchNorm2d) for p in m.parameters(recurse=False)}
    return {p for p in model.parameters() if p.ndim <= 1} | per_grid  # per-preset offsets of norm weights: rank 2


def param_groups(model: nn.Module, weight_decay: float, no_weight_decay: str) -> list[dict]:
    """Two groups, decayed and not (:func:`undecayed`), in the model's parameter order; frozen
    parameters (``requires_grad=False``) are left out."""
    skip = undecayed(model, no_weight_decay)
    trained = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in trained if p not in skip], "weight_decay": weight_decay},
        {"params": [p for p in trained if p in skip], "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]


def build_optimizer(cfg: OptimConfig | Mapping, model: nn.Module, global_batch: int) -> torch.optim.Optimizer:
    """The optimizer of ``cfg`` (an :class:`OptimConfig`, or the ``optim`` node it is made from) for
    ``model``, its LR scaled to ``global_batch``."""
    cfg = OptimConfig.from_node(cfg)
    lr = cfg.lr * global_batch / cfg.ref_batch  # the configured LR is per ref_batch images: linear scaling (Goyal 2017)
    groups = param_groups(model, cfg.weight_decay, cfg.no_weight_decay)
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=cfg.momentum, nesterov=cfg.nesterov)
    if cfg.name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=cfg.betas)
    from timm.optim import Lamb  # name == "lamb"

    return Lamb(groups, lr=lr, betas=cfg.betas)


def build_scheduler(
    cfg: SchedConfig | Mapping, optimizer: torch.optim.Optimizer, steps_per_epoch: int, epochs: int
) -> lr_scheduler.LRScheduler:
    """The LR schedule of ``cfg`` over ``epochs * steps_per_epoch`` optimizer steps.

    ``step`` and ``cosine`` start with ``warmup_epochs`` of ``LinearLR`` from
    ``warmup_start_factor`` x the peak; their epochs (milestones, the cosine's length) count
    from the start of training, warm-up included. ``onecycle`` is ``OneCycleLR`` with linear
    phases and no momentum cycling: up from peak / ``div_factor`` for ``pct_start`` of the
    steps, down to peak / ``div_factor`` / ``final_div_factor`` (FFCV's triangular schedule).
    """
    cfg = SchedConfig.from_node(cfg)
    name = cfg.name
    total = max(steps_per_epoch * epochs, 1)
    if name == "onecycle":
        if total < 3:  # too short for two linear phases (OneCycleLR divides by each phase's length)
            return lr_scheduler.ConstantLR(optimizer, factor=1.0, total_iters=0)
        # each phase at least one step long (smoke runs of a few steps; no effect on real schedules)
        pct_start = min(max(cfg.pct_start, 2 / total), (total - 1) / total)
        peaks = [group["lr"] for group in optimizer.param_groups]
        return lr_scheduler.OneCycleLR(
            optimizer, max_lr=peaks, total_steps=total, pct_start=pct_start,
            anneal_strategy="linear", cycle_momentum=False, div_factor=cfg.div_factor,
            final_div_factor=cfg.final_div_factor,
        )  # fmt: skip
    warmup = min(int(cfg.warmup_epochs * steps_per_epoch), total - 1)
    if name == "cosine":
        floor = cfg.min_lr_ratio * optimizer.param_groups[0]["lr"]
        main: lr_scheduler.LRScheduler = lr_scheduler.CosineAnnealingLR(optimizer, T_max=total - warmup, eta_min=floor)
    else:
        milestones = [int(m * steps_per_epoch) - warmup for m in cfg.milestones]
        main = lr_scheduler.MultiStepLR(optimizer, milestones=[m for m in milestones if m > 0], gamma=cfg.gamma)
    if warmup <= 0:
        return main
    ramp = lr_scheduler.LinearLR(optimizer, start_factor=cfg.warmup_start_factor, total_iters=warmup)
    return lr_scheduler.SequentialLR(optimizer, [ramp, main], milestones=[warmup])


def scheduler_state(scheduler: lr_scheduler.LRScheduler) -> dict:
    """``scheduler.state_dict()`` as plain data a checkpoint may hold: MultiStepLR keeps its
    milestones in a ``collections.Counter``, which loading with ``weights_only`` refuses."""

    def plain(value):
        if isinstance(value, Counter):
            return dict(value)
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    return plain(scheduler.state_dict())


def scale_lr(optimizer: torch.optim.Optimizer, scheduler: lr_scheduler.LRScheduler, ratio: float) -> None:
    """Scale every LR of the run from its current step on by ``ratio`` (``optim.lr`` changed on
    resume): each parameter group's LR and the values the schedules compute it from (OneCycleLR's
    peak, start and floor; the base LRs of the others and the cosine's floor; the chainable ones
    multiply the group's LR, which is scaled)."""
    for group in optimizer.param_groups:
        for key in LR_KEYS:
            if key in group:
                group[key] *= ratio
    for part in [scheduler, *getattr(scheduler, "_schedulers", [])]:
        if hasattr(part, "base_lrs"):  # not SequentialLR itself: its parts hold them
            part.base_lrs = [lr * ratio for lr in part.base_lrs]
        part._last_lr = [lr * ratio for lr in part.get_last_lr()]
        if isinstance(part, lr_scheduler.CosineAnnealingLR):
            part.eta_min *= ratio


def load_scheduler_state(scheduler: lr_scheduler.LRScheduler, state: dict) -> None:
    """The inverse of :func:`scheduler_state`: load, then give MultiStepLR its Counter back."""
    scheduler.load_state_dict(state)
    for part in [scheduler, *getattr(scheduler, "_schedulers", [])]:
        if isinstance(part, lr_scheduler.MultiStepLR) and not isinstance(part.milestones, Counter):
            part.milestones = Counter({int(k): v for k, v in part.milestones.items()})
