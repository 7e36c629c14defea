"""The evaluation data: one split, sharded over processes, each image decoded and resized once.

Datasets are those of :mod:`data` (``imagenet``, ``imagefolder``: ``root/val/<class>/*``, or
for ``imagenet`` the raw flat ILSVRC2012 ``val/`` with its labels file; ``imagenet_shards``:
``root/val`` tar shards; an in-memory dataset (:mod:`data.registry`): its val split). Every image
goes to exactly one process (:class:`data.ShardSampler`, :class:`data.shards.ShardBatches`), so
all-reduced sums count the split exactly once.

For image folders the decode and resize run in the loader's workers. A single-crop
batch arrives centre-cropped (``data.decode.decode_resize_center_crop``, the same path
as training's validation); a 10-crop batch arrives resized only, zero-padded to its
largest image, with every image's true size (:class:`PaddedBatch`), and the crops are
cut on the device (:mod:`resnet.evaluation.tencrop`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
import torchvision.transforms.v2.functional as TF

from data import ImageFolder, ShardSampler, collate
from data.batch import BadImage, pass_batch
from data.dataloader import DataLoader
from data.decode import INTERPOLATIONS, check_interpolation, decode_resize_center_crop, decode_rgb
from data.imagefolder import IMAGE_EXTENSIONS, ImageFiles, find_classes
from data.registry import InMemory, OnDisk, find, names
from data.shards.read import ShardBatches
from data.testsets import TEST_SETS, LabelSpace, imagenet_wnids, images_root, open_test_set

# Where the flat ILSVRC2012 val/'s labels are looked for under data.root (data.val_labels overrides).
VAL_LABELS = ("LOC_val_solution.csv", "ILSVRC2012_validation_ground_truth.txt",
              "ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt")



CROP_COUNTS = (1, 2, 10)  # the crops= protocols: centre; centre and its flip; corners + centre and flips

@dataclass(frozen=True)
class EvalProtocol:
    """How images become network input; every field goes into the results row."""

    crops: int  # 1 (centre), 2 (centre and its flip) or 10 (corners + centre, and their flips)
    crop: int  # side of each crop (px)
    resize: int  # shorter side after resizing (px), >= crop
    interpolation: str  # bilinear | bicubic, antialiased
    preprocessing: str  # torch | caffe | tf (data.normalize)

    def __post_init__(self) -> None:
        if self.crops not in CROP_COUNTS:
            raise ValueError(f"crops must be 1 (centre crop), 2 (and its flip) or 10 (corners + centre and flips), "
                             f"got {self.crops}")
        if not 0 < self.crop <= self.resize:
            raise ValueError(f"crop={self.crop} must be positive and at most resize={self.resize}")
        check_interpolation(self.interpolation)


class ResizeCrop:
    """File bytes -> RGB uint8 [3, crop, crop]: shorter side to ``resize``, central crop."""

    def __init__(self, resize: int, crop: int, interpolation: str = "bilinear"):
        self.resize, self.crop, self.interpolation = resize, crop, check_interpolation(interpolation)

    def __call__(self, data: bytes) -> torch.Tensor:
        return decode_resize_center_crop(data, self.resize, self.crop, self.interpolation)

    def __repr__(self) -> str:
        return f"ResizeCrop(resize={self.resize}, crop={self.crop}, interpolation={self.interpolation!r})"


class ResizeShorter:
    """File bytes -> RGB uint8 [3, H, W] with min(H, W) = ``resize`` (antialiased, as
    :class:`ResizeCrop` before its crop): the whole image, for the 10 crops."""

    def __init__(self, resize: int, interpolation: str = "bilinear"):
        self.resize, self.interpolation = resize, check_interpolation(interpolation)

    def __call__(self, data: bytes) -> torch.Tensor:
        return resize_shorter(decode_rgb(data), self.resize, self.interpolation)

    def __repr__(self) -> str:
        return f"ResizeShorter(resize={self.resize}, interpolation={self.interpolation!r})"


def resize_shorter(images: torch.Tensor, resize: int, interpolation: str = "bilinear") -> torch.Tensor:
    """An image [C, H, W] or a batch [N, C, H, W]: shorter side to ``resize``, antialiased."""
    if min(images.shape[-2:]) == resize:
        return images
    return TF.resize(images, [resize], interpolation=INTERPOLATIONS[interpolation][0], antialias=True)


class PaddedBatch(NamedTuple):
    """A :class:`data.Batch` of images of different sizes, zero-padded to the largest.

    The first four fields are a ``data.Batch``'s, so batch[2] is the skipped count here too.
    """

    images: torch.Tensor  # uint8 [N, C, H_max, W_max]
    labels: torch.Tensor  # int64 [N]
    skipped: int
    skipped_paths: Sequence[str]
    sizes: torch.Tensor  # int64 [N, 2]: each image's (height, width)


def collate_padded(samples: list[tuple[torch.Tensor, int] | BadImage]) -> PaddedBatch:
    """Like :func:`data.collate` (bad files dropped and reported), for images of any size."""
    good = [s for s in samples if not isinstance(s, BadImage)]
    bad = [f"{s.path} ({s.reason})" for s in samples if isinstance(s, BadImage)]
    sizes = torch.tensor([list(image.shape[-2:]) for image, _ in good], dtype=torch.int64).view(-1, 2)
    channels, dtype = (good[0][0].shape[0], good[0][0].dtype) if good else (3, torch.uint8)
    height, width = sizes.max(0).values.tolist() if good else (0, 0)
    images = torch.zeros(len(good), channels, height, width, dtype=dtype)
    for canvas, (image, _) in zip(images, good):
        canvas[:, : image.shape[1], : image.shape[2]] = image
    labels = torch.tensor([label for _, label in good], dtype=torch.int64)
    return PaddedBatch(images, labels, len(bad), bad, sizes)


@dataclass
class EvalData:
    loader: DataLoader
    num_classes: int
    in_chans: int
    size: int  # images scored, over all processes: the whole split's, or val_images of them
    device_resize: int | None  # shorter side to resize to on the device (in-memory data); None: done
    labels: LabelSpace | None = None  # how labels meet the logits when not one class index each (data.testsets)
    note: str | None = None  # printed once: what of the split is (not) there
    split_size: int | None = None  # images in the whole split where fewer are scored (val_images=N)


def build_eval_loader(
    name: str,
    root: str | None,
    protocol: EvalProtocol,
    batch_size: int,
    workers: int,
    rank: int = 0,
    world_size: int = 1,
    val_labels: str | None = None,
    devkit: str | None = None,
    real_labels: str | None = None,
    split: str = "val",
    take: int | None = None,
) -> EvalData:
    """The evaluation split of dataset ``name``, this process's shard of it.

    ``val_labels`` / ``devkit``: for a flat ILSVRC2012 ``val/`` (no class folders), its labels
    (:func:`data.ilsvrc.read_val_labels`); found under ``root`` when not given. ``real_labels``:
    ImageNet-ReaL's ``real.json`` (None: timm's copy). ``split="train"``: the training split
    through the evaluation transform instead (re-gridding's sample, :mod:`resnet.regrid`). ``take``: score
that many of the split's images, spread over it (shards: the first that many); None: all."""
    entry = find(name)
    if entry is None and name not in TEST_SETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join([*names(), *TEST_SETS])}")
    if split not in ("val", "train") or (split == "train" and name in TEST_SETS):
        raise ValueError(f"data={name} has no {split} split to read here; use its training set's dataset "
                         "(data=imagenet, imagefolder, imagenet_shards, or an in-memory one)")
    labels = note = None
    if isinstance(entry, InMemory):
        from data.in_memory import TensorImages

        dataset = TensorImages(*entry.load(split))
        num_classes, in_chans, workers, collate_fn = len(entry.classes), entry.in_chans, 0, pass_batch
        native = dataset.images.shape[-1]
        device_resize = None if protocol.resize == native else protocol.resize
    else:
        if protocol.crops in (1, 2):  # the centre crop (and its flip, made on the device)
            transform, collate_fn = ResizeCrop(protocol.resize, protocol.crop, protocol.interpolation), collate
        else:
            transform, collate_fn = ResizeShorter(protocol.resize, protocol.interpolation), collate_padded
        val_dir = eval_dir(name, root) if split == "val" else train_dir_of(name, root)
        if name in TEST_SETS:
            found = open_test_set(name, root, transform, real_labels)
            dataset, labels, note = found.dataset, found.labels, found.note
        elif entry.sharded:  # exact-once, contiguous ranges of the shards
            shards = ShardBatches.open(val_dir, transform, batch_size, rank, world_size, train=False,
                                       collate_fn=collate_fn, limit=take)
            loader = DataLoader(shards, batch_size=None, num_workers=workers, collate_fn=pass_batch,
                                pin_memory=torch.cuda.is_available())
            whole = int(shards.counts.sum())
            return EvalData(loader, len(shards.classes), 3, shards.total, None,
                            split_size=whole if shards.total < whole else None)
        elif split == "train":
            dataset = ImageFolder(val_dir, transform)
        elif is_flat(val_dir):
            dataset = flat_val(root, val_dir, transform, val_labels, devkit)
        else:
            dataset, note = val_folder(entry, root, val_dir, transform)
        # the logits a model needs: ImageNet's 1,000 for every test set (R and A score 200 of them)
        num_classes = len(imagenet_wnids()) if name in TEST_SETS else len(dataset.classes)
        in_chans, device_resize = 3, None
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=ShardSampler(len(dataset), rank, world_size, take=take),
        num_workers=workers,
        collate_fn=collate_fn,
        pin_memory=torch.cuda.is_available(),
    )
    size = min(len(dataset), take or len(dataset))
    return EvalData(loader, num_classes, in_chans, size, device_resize, labels, note,
                    split_size=len(dataset) if size < len(dataset) else None)


def val_folder(entry: OnDisk, root: str, val_dir: Path, transform) -> tuple[ImageFolder, str | None]:
    """``val/<class>/*`` and a note where it holds part of ImageNet's classes.

    Its classes are the training split's when that is there, so that a val folder missing a class
    fails instead of shifting every label after it. Without one, an ImageNet val may hold any of
    its 1,000 wnid folders, each keeping its ImageNet class index."""
    train_dir = Path(root) / "train"
    if train_dir.is_dir():
        return ImageFolder(val_dir, transform, classes=find_classes(train_dir)), None
    if not entry.wnid_folders:
        return ImageFolder(val_dir, transform), None
    dataset = ImageFolder(val_dir, transform, classes=list(imagenet_wnids()), subset=True)
    if len(dataset.present) == len(dataset.classes):
        return dataset, None
    return dataset, (f"{val_dir} holds {len(dataset.present)} of ImageNet's {len(dataset.classes)} classes; "
                     "evaluating that subset with ImageNet's class indices")


def eval_dir(name: str, root: str | None) -> Path:
    """``root/val`` of an image-folder dataset (a test set's own folder), or one line saying what to pass."""
    if name in TEST_SETS:
        return images_root(name, root)
    layout = find(name).layout("val")
    if root is None or not (Path(root) / "val").is_dir():
        raise FileNotFoundError(f"{name} evaluation needs data.root=/path/to/{name} holding {layout}; got root={root}")
    return Path(root) / "val"


def train_dir_of(name: str, root: str | None) -> Path:
    """``root/train`` of an image-folder or shard dataset, or one line saying what to pass."""
    if root is None or not (Path(root) / "train").is_dir():
        raise FileNotFoundError(f"{name} needs data.root=/path/to/{name} holding train/ (its training images); "
                                f"got root={root}")
    return Path(root) / "train"


def is_flat(val_dir: Path) -> bool:
    """Images straight in ``val_dir`` and no class folders: the raw ILSVRC2012 val/."""
    entries = list(os.scandir(val_dir))
    return not any(e.is_dir() for e in entries) and any(e.name.lower().endswith(IMAGE_EXTENSIONS) for e in entries)


def flat_val(root: str, val_dir: Path, transform, val_labels: str | None, devkit: str | None) -> ImageFiles:
    """The flat ILSVRC2012 val/, labelled by the devkit's ground truth or Kaggle's solution csv."""
    from data.ilsvrc import val_samples

    if val_labels is None:
        found = [Path(root) / name for name in VAL_LABELS if (Path(root) / name).is_file()]
        if not found:
            raise FileNotFoundError(
                f"{val_dir} is the flat ILSVRC2012 val/ (no class folders); say where its labels are: "
                "data.val_labels=/path/to/LOC_val_solution.csv or .../ILSVRC2012_validation_ground_truth.txt "
                "(with data.devkit=/path/to/ILSVRC2012_devkit_t12)"
            )
        val_labels = str(found[0])
    classes, samples = val_samples(val_dir, val_labels, devkit)
    return ImageFiles(samples, classes, transform)
