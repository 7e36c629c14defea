"""``data=synthetic``: a CIFAR-10-shaped dataset generated in memory, for smoke runs and tests.

10 classes of 32x32 RGB images, 64 per class to train on and 16 to validate: each class a colour
of its own under per-pixel noise, so a few steps already learn something. Generated from fixed
seeds, the same on every machine. Also the example of how a dataset is added
(:mod:`data.registry`): this module and ``configs/data/synthetic.yaml``, nothing else.
"""

from __future__ import annotations

import torch

from .registry import InMemory

CLASSES = tuple(f"colour {n}" for n in range(10))
PER_CLASS = {"train": 64, "val": 16, "test": 16}
SEEDS = {"train": 0, "val": 1, "test": 1}  # no test split of its own: test is val
SIZE = 32


def generate(split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``split`` in train / val / test -> images uint8 [N, 3, 32, 32], labels int64 [N] (class-major)."""
    if split not in PER_CLASS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(PER_CLASS)}")
    generator = torch.Generator().manual_seed(SEEDS[split])
    palette = torch.Generator().manual_seed(10)  # the classes' colours: the same for every split
    colours = torch.randint(40, 216, (len(CLASSES), 3, 1, 1), generator=palette).float()
    labels = torch.arange(len(CLASSES)).repeat_interleave(PER_CLASS[split])
    noise = torch.randn(len(labels), 3, SIZE, SIZE, generator=generator) * 24
    return (colours[labels] + noise).round().clamp(0, 255).to(torch.uint8), labels


DATASET = InMemory("synthetic", CLASSES, in_chans=3, image_size=SIZE, load=generate)
