"""Tiny models with random statistics, so that every layer matters to their predictions."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import resnet
from resnet import build_model
from resnet.checkpoint import save_checkpoint


def save_tiny_checkpoint(path: Path) -> Path:
    """A tiny 3-class model with random BN statistics, so its predictions differ by image."""
    torch.manual_seed(0)
    model = resnet.build_model("resnet_tiny", num_classes=3)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    return save_checkpoint(path, model)


def random_model(preset: str, **overrides) -> nn.Module:
    """resnet_tiny with random BN statistics (so every layer matters) and a sharp head."""
    torch.manual_seed(0)
    model = build_model("resnet_tiny", 10, padding=preset, **overrides)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.2)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.normal_(0, 0.2)
    model.fc.weight.data *= 30  # confident logits: the true preset's cross-entropy is near 0
    return model.eval()
