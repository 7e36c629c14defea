"""The ImageNet family of test sets: where each one's images are, and how its labels meet a
model's 1,000 ImageNet logits. Evaluation only (``eval.py data=<name>``).

=================  =============================================  ===============================================
``data=``          ``data.root`` holds                            labels
=================  =============================================  ===============================================
imagenet           ``val/<wnid>/`` (any of the 1,000), or the     the wnid's ImageNet index
                   flat ``val/`` with its labels file
imagenet_v2        ``<0..999>/`` (ImageNetV2's own folders; any)  the folder's number *is* the ImageNet index
imagenet_real      ``val/`` as ``imagenet`` (images keep their    the reassessed label *set* of each image (ReaL,
                   ``ILSVRC2012_val_<n>`` names)                  ``real.json``); an image whose set is empty is
                                                                  left out, as the paper does
imagenet_r         ``<wnid>/`` of ImageNet-R's 200 classes        scores restricted to those 200 logits, as the
imagenet_a         ``<wnid>/`` of ImageNet-A's 200 classes        papers evaluate 1,000-class models
imagenet_sketch    ``<wnid>/`` (``sketch/`` of the release)       the wnid's ImageNet index
=================  =============================================  ===============================================

Any of the folder layouts may hold a part of its classes: each folder keeps its class index.
The class lists, ImageNet-R/A's 200 wnids and their ImageNet indices, and the ReaL labels are
the copies timm ships (``timm/data/_info``); ``data.real_labels`` points at another ``real.json``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import torch
from torch.nn.utils.rnn import pad_sequence

from .file_index import FileIndex
from .files import MAX_FILE_BYTES
from .folder_scan import folder_prefix, links_line, walk_images
from .imagefolder import ImageFiles, ImageFolder

TEST_SETS = ("imagenet_v2", "imagenet_real", "imagenet_r", "imagenet_a", "imagenet_sketch")
LAYOUTS = {
    "imagenet_v2": "<0..999>/*.jpeg (imagenetv2-matched-frequency-format-val/)",
    "imagenet_real": "val/ of ImageNet (flat ILSVRC2012_val_*.JPEG or val/<wnid>/)",
    "imagenet_r": "<wnid>/*.jpg of ImageNet-R's 200 classes (imagenet-r/)",
    "imagenet_a": "<wnid>/*.jpg of ImageNet-A's 200 classes (imagenet-a/)",
    "imagenet_sketch": "<wnid>/*.JPEG (sketch/ of ImageNet-Sketch)",
}
_VAL_NAME = re.compile(r"ILSVRC2012_val_(\d{8})\.", re.IGNORECASE)


@dataclass(frozen=True)
class LabelSpace:
    """How a test set's labels are scored against a model's ImageNet logits.

    ``logits``: the ImageNet indices of the data's classes, in the data's class order; scores
    are restricted to these columns and a label is a position in them (ImageNet-R/A).
    ``label_sets``: [rows, k] ImageNet indices, ``-1``-padded; a label is a row, and a
    prediction is right when it is in the row's set (ImageNet-ReaL).
    """

    logits: torch.Tensor | None = None
    label_sets: torch.Tensor | None = None

    def to(self, device: torch.device) -> LabelSpace:
        """Both tables on ``device``, once, before the evaluation loop."""
        return LabelSpace(*(None if t is None else t.to(device) for t in (self.logits, self.label_sets)))


@dataclass(frozen=True)
class EvalSet:
    dataset: ImageFiles
    labels: LabelSpace | None  # None: a label is the ImageNet class index
    note: str | None = None  # what a user should know about what was (not) evaluated


def _info(name: str) -> str:
    return resources.files("timm.data").joinpath("_info", name).read_text()


@cache
def imagenet_wnids() -> tuple[str, ...]:
    """ImageNet-1k's 1,000 wnids in class-index order (sorted, as ILSVRC2012 and every hub number them)."""
    return tuple(_info("imagenet_synsets.txt").split())


@cache
def subset_classes(name: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """ImageNet-R's or -A's (``imagenet_r`` / ``imagenet_a``) 200 wnids and their ImageNet indices."""
    short = name.removeprefix("imagenet_")
    wnids = tuple(_info(f"imagenet_{short}_synsets.txt").split())
    indices = tuple(int(i) for i in _info(f"imagenet_{short}_indices.txt").split())
    everything = imagenet_wnids()
    if len(wnids) != len(indices) or any(everything[i] != w for w, i in zip(wnids, indices)):
        raise RuntimeError(f"timm's {name} synsets and indices disagree with ImageNet's class list")
    return wnids, indices


def images_root(name: str, root: str | None) -> Path:
    """The folder the images of ``name`` are under, or one line saying what data.root must hold."""
    folder = Path(root) / "val" if root is not None and name == "imagenet_real" else Path(root or "")
    if root is None or not folder.is_dir():
        raise FileNotFoundError(f"data={name} needs data.root=/path/to/{name} holding {LAYOUTS[name]}; got root={root}")
    return folder


def open_test_set(
    name: str,
    root: str | None,
    transform: Callable[[bytes], torch.Tensor],
    real_labels: str | None = None,
    max_file_bytes: int = MAX_FILE_BYTES,
) -> EvalSet:
    """The images of test set ``name`` under ``root`` and how to score them (module docstring);
    ``max_file_bytes``: as :class:`~data.imagefolder.ImageFiles`'."""
    folder = images_root(name, root)
    if name == "imagenet_v2":
        return _folders(folder, transform, [str(i) for i in range(1000)], "ImageNetV2", max_file_bytes)
    if name == "imagenet_sketch":
        return _folders(folder, transform, list(imagenet_wnids()), "ImageNet-Sketch", max_file_bytes)
    if name in ("imagenet_r", "imagenet_a"):
        wnids, indices = subset_classes(name)
        title = "ImageNet-R" if name == "imagenet_r" else "ImageNet-A"
        found = _folders(folder, transform, list(wnids), title, max_file_bytes)
        return EvalSet(found.dataset, LabelSpace(logits=torch.tensor(indices)), found.note)
    if name == "imagenet_real":
        return _real(folder, transform, real_labels, max_file_bytes)
    raise ValueError(f"unknown test set {name!r}; choose one of {', '.join(TEST_SETS)}")


def _folders(folder: Path, transform, classes: list[str], title: str, max_file_bytes: int) -> EvalSet:
    dataset = ImageFolder(folder, transform, classes=classes, subset=True, max_file_bytes=max_file_bytes)
    note = None
    if len(dataset.present) < len(classes):
        note = f"{folder} holds {len(dataset.present)} of {title}'s {len(classes)} classes; each keeps its index"
    return EvalSet(dataset, None, note)


def read_real_labels(path: str | None) -> list[list[int]]:
    """ReaL's ``real.json``: for each of the 50,000 val images in order, its list of valid classes."""
    try:
        text = Path(path).read_text() if path is not None else _info("imagenet_real_labels.json")
        labels = json.loads(text)
    except (OSError, ValueError) as err:
        raise ValueError(f"data.real_labels={path} is not ReaL's real.json ({err})") from None
    if not isinstance(labels, list) or len(labels) != 50_000:
        raise ValueError(f"data.real_labels={path} is not ReaL's real.json: expected a list of 50000 label lists")
    return labels


def _real(folder: Path, transform, real_labels: str | None, max_file_bytes: int) -> EvalSet:
    labels = read_real_labels(real_labels)
    found, links = walk_images(folder)
    if links:
        print(links_line(folder, links), flush=True)
    paths = sorted(found)
    samples, unnamed, unlabelled = [], [], 0
    for path in paths:
        match = _VAL_NAME.search(os.path.basename(path))
        number = int(match.group(1)) if match else 0
        if not 1 <= number <= len(labels):
            unnamed.append(path)
        elif labels[number - 1]:
            samples.append((path, number - 1))  # the label is the image's row of label sets
        else:
            unlabelled += 1
    if unnamed:
        raise ValueError(
            f"{len(unnamed)} image(s) under {folder} are not named ILSVRC2012_val_<00000001..00050000> "
            f"(e.g. {unnamed[0]}): ImageNet-ReaL labels val images by those names; keep the originals"
        )
    if not samples:
        raise FileNotFoundError(f"no ImageNet val image with a ReaL label under {folder}")
    sets = pad_sequence([torch.tensor(row, dtype=torch.int64) for row in labels], batch_first=True, padding_value=-1)
    note = None
    if unlabelled:
        note = f"left out {unlabelled} of {len(paths)} images that have no ReaL label (as the ReaL paper does)"
    index = FileIndex.from_pairs(samples, folder_prefix(folder))
    return EvalSet(
        ImageFiles(index, list(imagenet_wnids()), transform, max_file_bytes), LabelSpace(label_sets=sets), note
    )
