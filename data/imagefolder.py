"""``root/<class>/**/<image>`` as a dataset that survives bad files.

A file that cannot be read (zero bytes, cut short, corrupt, not an image, too large to be one)
comes back as a :class:`data.batch.BadImage`, dropped and reported by :func:`data.batch.collate`,
so a week-long run is never ended by one file; what is wrong with the folder *layout* fails at
construction, in one line. The samples are a :class:`data.file_index.FileIndex`, which loader
workers share instead of copying. Listing the folder: :mod:`data.folder_scan`; keeping the
listing between runs: :mod:`data.index_cache`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from .batch import BadImage
from .decode import DECODE_ERRORS
from .file_index import FileIndex
from .files import MAX_FILE_BYTES, read_file
from .folder_scan import IMAGE_EXTENSIONS, FolderScan, find_classes, find_images, scan_folder
from .samplers import seeded

__all__ = ["IMAGE_EXTENSIONS", "ImageFiles", "ImageFolder", "check_same_classes", "find_classes", "find_images"]


def _some(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")


def check_same_classes(train: list[str], val: list[str]) -> None:
    """Fail naming the differences when the val classes are not the train classes."""
    if train == val:
        return
    missing, extra = sorted(set(train) - set(val)), sorted(set(val) - set(train))
    raise ValueError(
        f"val classes differ from train classes ({len(train)} train, {len(val)} val): "
        f"missing in val: {_some(missing) or '-'}; only in val: {_some(extra) or '-'}"
    )


def check_subset(classes: list[str], found: list[str], root: Path) -> None:
    """Fail naming the folders of ``root`` that are not among ``classes``."""
    unknown = sorted(set(found) - set(classes))
    if unknown:
        raise ValueError(
            f"{root} has {len(unknown)} class folder(s) that are not among the {len(classes)} classes expected "
            f"({_some(unknown)}); move them out of {root}"
        )


class ImageFiles(Dataset):
    """Samples ``(path, class index)`` as ``(uint8 [3, H, W], class index)`` or a :class:`BadImage`.

    ``samples``: a :class:`FileIndex`, or ``(path, label)`` pairs to pack into one. ``transform``
    maps a file's bytes to the image tensor (:mod:`data.transforms`); a file of more than
    ``max_file_bytes`` (``data.max_file_mb``) is refused unread (:mod:`data.files`). The base of
    :class:`ImageFolder`; also the flat ILSVRC2012 val/ with its labels file (:mod:`data.ilsvrc`).
    """

    def __init__(
        self,
        samples: FileIndex | Sequence[tuple[str, int]],
        classes: list[str],
        transform: Callable[[bytes], torch.Tensor],
        max_file_bytes: int = MAX_FILE_BYTES,
    ):
        self.samples = samples if isinstance(samples, FileIndex) else FileIndex.from_pairs(samples)
        self.classes = classes
        self.transform = transform
        self.max_file_bytes = max_file_bytes

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, item: int | tuple[int, int]) -> tuple[torch.Tensor, int] | BadImage:
        """``item``: an index, or ``(index, seed)`` from :class:`data.samplers.EpochSampler`,
        in which case the transform's random draws come from that seed alone."""
        if isinstance(item, tuple):
            index, seed = item
            with seeded(seed):
                return self._load(index)
        return self._load(item)

    def _load(self, index: int) -> tuple[torch.Tensor, int] | BadImage:
        path, label = self.samples[index]
        try:
            return self.transform(read_file(path, limit=self.max_file_bytes)), label
        except DECODE_ERRORS as err:  # a bad file (or a failed read): report it, keep training
            return BadImage(path, f"{type(err).__name__}: {err}")


class ImageFolder(ImageFiles):
    """``root/<class>/**/<image>``. ``classes``: the class list to enforce (the train split's,
    when building val). ``subset=True``: the folders may be any part of ``classes`` and keep their
    index in it (ImageNet's 1,000 wnids for a val holding some of them); ``present`` lists them.
    ``scan``: the folder's listing when the caller has it (:func:`data.index_cache.load_scan`);
    by default the folder is listed here, and any directory link skipped is named in one line.
    ``max_file_bytes``: as :class:`ImageFiles`'."""

    def __init__(
        self,
        root: str | Path,
        transform: Callable[[bytes], torch.Tensor],
        classes: list[str] | None = None,
        subset: bool = False,
        scan: FolderScan | None = None,
        max_file_bytes: int = MAX_FILE_BYTES,
    ):
        self.root = Path(root)
        if scan is None:
            scan = scan_folder(self.root)
            for line in scan.lines():
                print(line, flush=True)
        self.present = scan.classes
        if classes is None:
            classes = self.present
        elif subset:
            check_subset(classes, self.present, self.root)
        else:
            check_same_classes(classes, self.present)
        index = {name: i for i, name in enumerate(classes)}
        samples = scan.samples.relabel(np.array([index[name] for name in self.present]))
        super().__init__(samples, list(classes), transform, max_file_bytes)
