"""The training loss and the batch augmentation that runs on the device, as the config names them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class LossConfig:
    """The keys of train.yaml that choose the loss and the batch augmentation on the device
    (their defaults and ranges: :data:`resnet.schema.KEYS`)."""

    loss: str  # ce or bce (resnet.schema.KEYS)
    label_smoothing: float
    bce_target_threshold: float | None  # bce: binarise targets at this value; None keeps them soft
    mixup: float  # a Beta alpha; 0: off
    cutmix: float  # a Beta alpha; 0: off
    random_erasing: float  # a probability per image; 0: off


def loss_and_augment(cfg: LossConfig, num_classes: int, device: torch.device):
    """The loss, and the batch augmentation on the device (timm's RandomErasing, then timm's
    Mixup/CutMix), as the config names them.

    ``loss=ce``: cross-entropy with ``label_smoothing`` (torch's; timm's SoftTargetCrossEntropy on
    mixed targets). ``loss=bce``: timm's BinaryCrossEntropy ("ResNet strikes back"), targets binarised
    at ``bce_target_threshold`` when set."""
    mixing = bool(cfg.mixup or cfg.cutmix)
    if cfg.loss == "bce":
        from timm.loss import BinaryCrossEntropy  # imported where used: importing timm is slow

        loss_fn = BinaryCrossEntropy(
            smoothing=0.0 if mixing else cfg.label_smoothing, target_threshold=cfg.bce_target_threshold
        )
    elif mixing:
        from timm.loss import SoftTargetCrossEntropy

        loss_fn = SoftTargetCrossEntropy()
    else:
        loss_fn = nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    erasing = mixup = None
    if cfg.random_erasing:
        from data.augment import random_erasing

        erasing = random_erasing(cfg.random_erasing, device)
    if mixing:
        from .mixup import AnyBatchMixup

        mixup = AnyBatchMixup(
            mixup_alpha=cfg.mixup, cutmix_alpha=cfg.cutmix, label_smoothing=cfg.label_smoothing, num_classes=num_classes
        )
    return loss_fn, (BatchAugment(erasing, mixup) if erasing or mixup else None)


@dataclass(frozen=True)
class BatchAugment:
    """The device-side batch augmentation: random erasing of the images, then mixup/cutmix of
    images and targets (either may be None)."""

    erasing: Callable[[torch.Tensor], torch.Tensor] | None = None
    mixup: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.erasing is not None:
            x = self.erasing(x)
        return self.mixup(x, y) if self.mixup is not None else (x, y)
