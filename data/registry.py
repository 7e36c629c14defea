"""The datasets held in memory, found by name: ``data=<name>`` reads ``data/<name>.py``'s ``DATASET``.

An in-memory dataset is small enough to live as uint8 tensors (the built-in Fashion-MNIST, the
tests' CIFAR-10-shaped ``synthetic``): no files to index, no loader workers, random crops and flips
made in memory. Its module says everything the loaders need in one :class:`InMemory`: its classes,
channels and size, and how a split is loaded. Training (:func:`data.build_loaders`) and evaluation
(``resnet.evaluation.loader``) both ask :func:`in_memory`; no other code names such a dataset.

Adding one is a module beside this one and a ``configs/data/<name>.yaml`` (see ``data/synthetic.py``).
The modules are imported when first asked for, not here: ``python -m data.fashion_mnist`` must be
that module's first import.

The datasets of image files are entries here too (:data:`ON_DISK`: whether one is sharded, whether
its class folders are ImageNet's wnids, its layout); :func:`find` returns any dataset by name. The
ImageNet test sets have their own table, :mod:`data.testsets`.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class InMemory:
    """An in-memory dataset: what the loaders read of it."""

    name: str  # the YAML's data.name, and the module's name in data/
    classes: tuple[str, ...]
    in_chans: int  # 1 (grey) or 3 (RGB)
    image_size: int  # the side of its square images: the only size it trains and validates at
    # "train", "val" or "test" -> images uint8 [N, in_chans, image_size, image_size], labels int64 [N];
    load: Callable[[str], tuple[torch.Tensor, torch.Tensor]]  # "val": what validation and eval.py score


def in_memory(name: str) -> InMemory | None:
    """The in-memory dataset ``name`` (``data/<name>.py`` defines ``DATASET``), or None: files on disk."""
    if not name.isidentifier() or importlib.util.find_spec(f"{__package__}.{name}") is None:
        return None
    dataset = getattr(importlib.import_module(f"{__package__}.{name}"), "DATASET", None)
    return dataset if isinstance(dataset, InMemory) else None


def in_memory_names() -> list[str]:
    """Every in-memory dataset's name, for the message that lists the choices (imports data/'s modules)."""
    package = importlib.import_module(__package__)
    found = (in_memory(info.name) for info in pkgutil.iter_modules(package.__path__) if not info.ispkg)
    return sorted(dataset.name for dataset in found if dataset is not None)


@dataclass(frozen=True)
class OnDisk:
    """A dataset of image files under ``data.root``: class folders, or tar shards."""

    name: str  # the YAML's data.name
    sharded: bool = False  # root/<split> holds index.json and its .tar shards (python -m data.shards)
    # class folders named by ImageNet's wnids (n01440764, ...): errors name that layout, and a val/
    # without train/ beside it keeps ImageNet's 1,000 class indices
    wnid_folders: bool = False

    def layout(self, split: str) -> str:
        """``split``'s layout under data.root, for the line that says what to pass."""
        if self.sharded:
            return f"{split}/index.json and {split}/*.tar"
        return f"{split}/<wnid>/*.JPEG" if self.wnid_folders else f"{split}/<class>/*"


ON_DISK = {d.name: d for d in (OnDisk("imagenet", wnid_folders=True), OnDisk("imagefolder"),
                               OnDisk("imagenet_shards", sharded=True))}  # fmt: skip


def find(name: str) -> InMemory | OnDisk | None:
    """The dataset ``name``: in memory, of image files, or None (no such dataset)."""
    return ON_DISK.get(name) or in_memory(name)


def names() -> list[str]:
    """Every dataset's name, for the message that lists the choices (imports data/'s modules)."""
    return [*ON_DISK, *in_memory_names()]
