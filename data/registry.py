"""Every dataset, found by name (``data=<name>``): one entry each, holding what the loaders need.

In memory: ``data=<name>`` reads ``data/<name>.py``'s ``DATASET``, an :class:`InMemory`: a dataset
small enough to live as uint8 tensors (the built-in Fashion-MNIST, the tests' ``synthetic``), with
no files to index, no loader workers, random crops and flips made in memory. Adding one is such a
module and a ``configs/data/<name>.yaml`` (see ``data/synthetic.py``), which reads the module's
facts (``num_classes: ${dataset:num_classes}``, :func:`resnet.config.dataset_fact`) and never
repeats them. The modules are imported when first asked for, not here: ``python -m
data.fashion_mnist`` must be that module's first import.

The datasets of image files are entries here too (:data:`ON_DISK`): class folders or tar shards
(:mod:`data.on_disk`). :func:`find` returns any dataset by name, for training
(:func:`data.build_loaders`) and evaluation (``resnet.evaluation.loader``) alike; the loaders
dispatch on its type and no other code names a dataset. The ImageNet test sets have their own
table, :mod:`data.testsets`.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .in_memory import TensorImages
from .on_disk import Folders, OnDisk, Shards

__all__ = ["ON_DISK", "Folders", "InMemory", "OnDisk", "Shards", "find", "in_memory", "in_memory_names", "names"]


@dataclass(frozen=True)
class InMemory:
    """An in-memory dataset: what the loaders read of it."""

    name: str  # the YAML's data.name, and the module's name in data/
    classes: tuple[str, ...]
    in_chans: int  # 1 (grey) or 3 (RGB)
    image_size: int  # the side of its square images: the only size it trains and validates at
    # ("train", "val" or "test", data.root) -> images uint8 [N, in_chans, image_size, image_size], labels int64 [N];
    load: Callable[..., tuple[torch.Tensor, torch.Tensor]]  # "val": what validation and eval.py score
    # data.root (None: its own lookup) -> the folder its files are read from, or one line saying what to type;
    find_root: Callable[[str | None], object] | None = None  # None: generated, it reads no files

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def check_root(self, root: str | None) -> None:
        """Fails with one line where ``root`` (``data.root``) cannot be read from: a folder without
        the dataset's files, or any folder for a dataset that reads none."""
        if self.find_root is not None:
            self.find_root(root)
        elif root is not None:
            raise FileNotFoundError(
                f"data={self.name} is generated in memory and reads no files; "
                f"leave data.root unset (data.root=null), not {root}"
            )

    def open(self, split: str, crop_padding: int = 0, root: str | None = None) -> TensorImages:
        """``split`` as a dataset of whole batches; ``crop_padding`` > 0: random crops and flips (training);
        ``root``: ``data.root``, the folder its files are read from (None: the dataset's own lookup)."""
        if self.find_root is None:
            self.check_root(root)
            return TensorImages(*self.load(split), crop_padding=crop_padding)
        return TensorImages(*self.load(split, root), crop_padding=crop_padding)


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


ON_DISK = {d.name: d for d in (Folders("imagenet", wnid_folders=True), Folders("imagefolder"),
                               Shards("imagenet_shards"))}  # fmt: skip


def find(name: str) -> InMemory | Folders | Shards | None:
    """The dataset ``name``: in memory, of image files, or None (no such dataset)."""
    return ON_DISK.get(name) or in_memory(name)


def names() -> list[str]:
    """Every dataset's name, for the message that lists the choices (imports data/'s modules)."""
    return [*ON_DISK, *in_memory_names()]
