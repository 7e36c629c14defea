"""``root/<class>/**/<image>`` as a dataset that survives bad files.

A file that cannot be read (zero bytes, truncated, corrupt, not an image) comes back as a
:class:`data.batch.BadImage` and is dropped and reported by :func:`data.batch.collate`,
so a week-long run is never ended by one file. Everything that is wrong with the folder
*layout* fails at construction instead, with one line that says what was expected.
Grayscale, CMYK and PNG-under-``.JPEG`` files (all present in ImageNet) load as RGB.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils.data import Dataset

from .batch import BadImage
from .decode import DECODE_ERRORS
from .samplers import seeded

IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp")  # any case


def find_classes(root: Path) -> list[str]:
    """Sorted class folder names under ``root``; a missing or class-less root fails."""
    if not root.is_dir():
        raise FileNotFoundError(f"image folder {root} does not exist; expected {root}/<class>/<image>.JPEG")
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir() and not entry.name.startswith("."))
    if not classes:
        raise FileNotFoundError(
            f"no class folders in {root}; expected {root}/<class>/<image>.JPEG "
            "(a flat ImageNet val/ must first be sorted into class folders)"
        )
    return classes


def find_images(root: Path, classes: list[str]) -> list[tuple[str, int]]:
    """(path, class index) for every image file, in a deterministic order."""
    samples = []
    for index, name in enumerate(classes):
        found = []
        for folder, subfolders, files in os.walk(root / name, followlinks=True):
            subfolders.sort()
            found += [os.path.join(folder, f) for f in sorted(files) if f.lower().endswith(IMAGE_EXTENSIONS)]
        if not found:
            raise FileNotFoundError(
                f"class folder {root / name} has no images (extensions {', '.join(IMAGE_EXTENSIONS)})"
            )
        samples += [(path, index) for path in found]
    return samples


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

    ``transform`` maps a file's bytes to the image tensor (:mod:`data.transforms`). The base of
    :class:`ImageFolder`; also the flat ILSVRC2012 val/ with its labels file (:mod:`data.ilsvrc`).
    """

    def __init__(self, samples: list[tuple[str, int]], classes: list[str], transform: Callable[[bytes], torch.Tensor]):
        self.samples = samples
        self.classes = classes
        self.transform = transform

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
            with open(path, "rb") as f:
                data = f.read()
            return self.transform(data), label
        except DECODE_ERRORS as err:  # a bad file (or a failed read): report it, keep training
            return BadImage(path, f"{type(err).__name__}: {err}")


class ImageFolder(ImageFiles):
    """``root/<class>/**/<image>``. ``classes``: the class list to enforce (the train split's,
    when building val). ``subset=True``: the folders may be any part of ``classes`` and keep their
    index in it (ImageNet's 1,000 wnids for a val holding some of them); ``present`` lists them."""

    def __init__(self, root: str | Path, transform: Callable[[bytes], torch.Tensor], classes: list[str] | None = None,
                 subset: bool = False):
        self.root = Path(root)
        self.present = find_classes(self.root)
        if classes is None:
            classes = self.present
        elif subset:
            check_subset(classes, self.present, self.root)
        else:
            check_same_classes(classes, self.present)
        index = {name: i for i, name in enumerate(classes)}
        samples = [(path, index[self.present[i]]) for path, i in find_images(self.root, self.present)]
        super().__init__(samples, list(classes), transform)
