"""The datasets of image files under ``data.root``: what a registry entry of one knows and opens.

Two kinds, told apart by their type, never by their name:

* :class:`Folders`: ``root/<split>/<class>/*`` (``imagenet`` and ``imagefolder``). An ImageNet
  entry (``wnid_folders``) words its errors for ImageNet's wnid folders, and a ``val/`` of it
  with no ``train/`` beside it keeps ImageNet's 1,000 class indices. Either one's ``val/`` may
  also be the raw, flat ILSVRC2012 one, images with no class folders (:mod:`data.ilsvrc`).
* :class:`Shards`: ``root/<split>/index.json`` and its tar shards (``python -m data.shards``).

Each opens a split for training (:mod:`data.loader`) and for evaluation
(``resnet.evaluation.loader``); the transform is the caller's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from .files import MAX_FILE_BYTES
from .imagefolder import ImageFiles, ImageFolder, find_classes
from .index_cache import load_scan, rank_zero_first
from .shards.read import ShardBatches

Transform = Callable[[bytes], object]


@dataclass(frozen=True)
class OnDisk:
    """What both kinds share: a name, a layout to name in errors, and the check of ``data.root``."""

    name: str  # the YAML's data.name
    hint = ""  # after the layouts in an error: what makes them

    def layout(self, split: str) -> str:
        raise NotImplementedError

    def layouts(self, *splits: str) -> str:
        return " and ".join(self.layout(split) for split in splits)

    def required_contents(self, *splits: str) -> str:
        """What ``root`` must hold for ``splits``, as an error names it (and what makes it)."""
        return self.layouts(*splits) + self.hint

    def split_dirs(self, root: str | None, *splits: str, purpose: str = "") -> list[Path]:
        """``root/<split>`` for each of ``splits``, or one line naming the root and layout to pass
        (``purpose``: what needs them, after the name: " evaluation")."""
        if root is None or not all((Path(root) / split).is_dir() for split in splits):
            raise FileNotFoundError(
                f"{self.name}{purpose} needs data.root=/path/to/{self.name} holding "
                f"{self.required_contents(*splits)}; got root={root}"
            )
        return [Path(root) / split for split in splits]


@dataclass(frozen=True)
class Folders(OnDisk):
    """Class folders: ``root/train/<class>/*`` and ``root/val/<class>/*``, the same classes in both."""

    # class folders named by ImageNet's wnids (n01440764, ...): errors name that layout, and a val/
    # without train/ beside it keeps ImageNet's 1,000 class indices
    wnid_folders: bool = False

    def layout(self, split: str) -> str:
        return f"{split}/<wnid>/*.JPEG" if self.wnid_folders else f"{split}/<class>/*"

    def open_training(
        self,
        root: str | None,
        train_tf: Transform,
        val_tf: Transform,
        cache_dir: str | Path | None = None,
        log: Callable[[str], None] | None = None,
        max_file_bytes: int = MAX_FILE_BYTES,
    ) -> tuple[ImageFolder, ImageFolder]:
        """(train, val) for training; val takes train's classes. Under DDP rank 0 lists the folders
        (or reads their kept index, :mod:`data.index_cache`) and the other ranks read its file.
        ``max_file_bytes``: ``data.max_file_mb``, a larger file is skipped unread (:mod:`data.files`)."""
        train_dir, val_dir = self.split_dirs(root, "train", "val")
        train_scan, val_scan = rank_zero_first(lambda: [load_scan(d, cache_dir, log) for d in (train_dir, val_dir)])
        train_set = ImageFolder(train_dir, train_tf, scan=train_scan, max_file_bytes=max_file_bytes)
        val_set = ImageFolder(val_dir, val_tf, classes=train_set.classes, scan=val_scan, max_file_bytes=max_file_bytes)
        return train_set, val_set

    def open_eval(
        self,
        root: str | None,
        split: str,
        transform: Transform,
        val_labels: str | None = None,
        devkit: str | None = None,
        max_file_bytes: int = MAX_FILE_BYTES,
    ) -> tuple[ImageFiles, str | None]:
        """``split`` for evaluation, and a note to print where it holds part of ImageNet's classes. A
        ``val/`` takes the training split's classes where there is one (a missing class fails rather than
        shift every label after it); else a wnid ``val/`` may hold any of ImageNet's classes, each keeping
        its index, and a flat one is the raw ILSVRC2012 val/, labelled by ``val_labels`` (and ``devkit``)."""
        (folder,) = self.split_dirs(root, split, purpose=" evaluation" if split == "val" else "")
        image_folder = partial(ImageFolder, folder, transform, max_file_bytes=max_file_bytes)
        if split == "train":
            return image_folder(), None
        from .ilsvrc import is_flat_val, open_flat_val

        if is_flat_val(folder):
            return open_flat_val(root, folder, transform, val_labels, devkit, max_file_bytes), None
        if (train_dir := Path(root) / "train").is_dir():
            return image_folder(classes=find_classes(train_dir)), None
        if not self.wnid_folders:
            return image_folder(), None
        from .testsets import imagenet_wnids

        dataset = image_folder(classes=list(imagenet_wnids()), subset=True)
        if len(dataset.present) == len(dataset.classes):
            return dataset, None
        return dataset, (
            f"{folder} holds {len(dataset.present)} of ImageNet's {len(dataset.classes)} classes; "
            "evaluating that subset with ImageNet's class indices"
        )


@dataclass(frozen=True)
class Shards(OnDisk):
    """Tar shards: ``root/train`` and ``root/val``, each an index.json and its .tar files. The
    shards batch their own samples, so a loader over them takes ``batch_size=None``."""

    hint = " (python -m data.shards imagenet RAW_ROOT OUT_ROOT writes them)"

    def layout(self, split: str) -> str:
        return f"{split}/index.json and {split}/*.tar"

    def layouts(self, *splits: str) -> str:
        if len(splits) == 1:
            return self.layout(splits[0])
        return f"{' and '.join(f'{split}/' for split in splits)}, each with index.json and its .tar shards"

    def open(
        self,
        root: str | None,
        split: str,
        transform: Transform,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        purpose: str = "",
        **kwargs,
    ) -> ShardBatches:
        """``split``'s shards, this rank's share in batches; ``purpose`` as :meth:`split_dirs`'s;
        ``kwargs``: ``train``, ``collate_fn``, ``limit`` and ``max_file_bytes`` of
        :class:`data.shards.read.ShardBatches`."""
        (folder,) = self.split_dirs(root, split, purpose=purpose)
        return ShardBatches.open(folder, transform, batch_size, rank, world_size, seed, **kwargs)
