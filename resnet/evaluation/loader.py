"""The evaluation data: one split, sharded over processes, each image decoded and resized once.

Datasets are those of :mod:`data.registry`, each opening its own split, and the ImageNet test sets
(:mod:`data.testsets`). Every image goes to exactly one process (:class:`data.ShardSampler`,
:class:`data.shards.ShardBatches`), so all-reduced sums count the split exactly once.

For image folders the decode and resize run in the loader's workers. A single-crop
batch arrives centre-cropped (``data.decode.decode_resize_center_crop``, the same path
as training's validation); a 10-crop batch arrives resized only, zero-padded to its
largest image, with every image's true size (:class:`PaddedBatch`), and the crops are
cut on the device (:mod:`resnet.evaluation.tencrop`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torchvision.transforms.v2.functional as TF
from omegaconf import DictConfig

from data import ShardSampler, collate
from data.batch import BadImage, pass_batch
from data.dataloader import DataLoader
from data.decode import INTERPOLATIONS, check_interpolation, decode_resize_center_crop, decode_rgb
from data.files import MAX_FILE_BYTES, mib_bytes
from data.registry import InMemory, OnDisk, Shards, find, names
from data.testsets import TEST_SETS, LabelSpace, imagenet_wnids, images_root, open_test_set

from ..config import ConfigError
from ..runtime.distributed import DistEnv
from ..runtime.workers import data_workers

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
            raise ValueError(
                f"crops must be 1 (centre crop), 2 (and its flip) or 10 (corners + centre and flips), got {self.crops}"
            )
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
    """File bytes -> RGB uint8 [3, H, W], min(H, W) = ``resize`` (as :class:`ResizeCrop`): for the 10 crops."""

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
    max_file_bytes: int = MAX_FILE_BYTES,
) -> EvalData:
    """The evaluation split of dataset ``name``, this process's shard of it.

    ``val_labels`` / ``devkit``: for a flat ILSVRC2012 ``val/`` (no class folders), its labels
    (:func:`data.ilsvrc.read_val_labels`); found under ``root`` when not given. ``real_labels``:
    ImageNet-ReaL's ``real.json`` (None: timm's copy). ``split="train"``: the training split
    through the evaluation transform instead (re-gridding's sample, :mod:`resnet.regrid`).
    ``take``: score that many of the split's images, spread over it (shards: the first that
    many); None: all. ``max_file_bytes``: ``data.max_file_mb`` in bytes, a larger file is skipped
    unread and counted."""
    entry = find(name)  # None: a test set
    if entry is None and name not in TEST_SETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join([*names(), *TEST_SETS])}")
    if split not in ("val", "train") or (split == "train" and entry is None):
        raise ValueError(
            f"data={name} has no {split} split to read here; use its training set's dataset "
            "(data=imagenet, imagefolder, imagenet_shards, or an in-memory one)"
        )
    labels, note, device_resize, in_chans = None, None, None, 3
    if protocol.crops in (1, 2):  # the centre crop (and its flip, made on the device)
        transform, collate_fn = ResizeCrop(protocol.resize, protocol.crop, protocol.interpolation), collate
    else:
        transform, collate_fn = ResizeShorter(protocol.resize, protocol.interpolation), collate_padded
    if isinstance(entry, InMemory):  # no transform: resized (where needed) on the device
        dataset = entry.open(split, root=root)
        num_classes, in_chans = len(entry.classes), entry.in_chans
        workers, collate_fn = 0, pass_batch  # the batches are tensors in memory already: no worker, no collate
        device_resize = None if protocol.resize == dataset.images.shape[-1] else protocol.resize
    elif isinstance(entry, Shards):  # exact-once, contiguous ranges of the shards, each batch whole from its shard
        shards = entry.open(root, split, transform, batch_size, rank, world_size, train=False, collate_fn=collate_fn,
                            limit=take, max_file_bytes=max_file_bytes,
                            purpose=" evaluation" if split == "val" else "")  # fmt: skip
        loader = DataLoader(
            shards, batch_size=None, num_workers=workers, collate_fn=pass_batch, pin_memory=torch.cuda.is_available()
        )
        whole = int(shards.counts.sum())
        part = whole if shards.total < whole else None
        return EvalData(loader, len(shards.classes), 3, shards.total, None, split_size=part)
    elif entry is None:  # a test set: scored with ImageNet's 1,000 logits (R and A score 200 of them)
        found = open_test_set(name, root, transform, real_labels, max_file_bytes)
        dataset, num_classes, labels, note = found.dataset, len(imagenet_wnids()), found.labels, found.note
    else:
        dataset, note = entry.open_eval(root, split, transform, val_labels, devkit, max_file_bytes)
        num_classes = len(dataset.classes)
    loader = DataLoader(  # each image read by exactly one process; take: that many, spread
        dataset,
        batch_size=batch_size,
        sampler=ShardSampler(len(dataset), rank, world_size, take=take),
        num_workers=workers,
        collate_fn=collate_fn,
        pin_memory=torch.cuda.is_available(),
    )
    size = min(len(dataset), take or len(dataset))
    split_size = len(dataset) if size < len(dataset) else None
    return EvalData(loader, num_classes, in_chans, size, device_resize, labels, note, split_size)


def open_eval_data(
    data_cfg: DictConfig, protocol: EvalProtocol, batch_size: int, env: DistEnv | None = None, **kwargs
) -> EvalData:
    """:func:`build_eval_loader` of a composed ``data:`` config (its dataset, root, workers, flat val/
    label files and max_file_mb), this process's shard of ``env``'s job (None: one process);
    ``kwargs``: the rest of its keywords. A folder that cannot be read is a :class:`ConfigError`."""
    rank, world_size = (env.rank, env.world_size) if env else (0, 1)
    workers = data_workers(data_cfg.workers, env.local_world_size if env else None)
    try:
        return build_eval_loader(
            data_cfg.name,
            data_cfg.get("root"),
            protocol,
            batch_size,
            workers,
            rank,
            world_size,
            val_labels=data_cfg.get("val_labels"),
            devkit=data_cfg.get("devkit"),
            max_file_bytes=mib_bytes(data_cfg.max_file_mb),
            **kwargs,
        )
    except (FileNotFoundError, ValueError) as err:  # a wrong layout: an empty class folder, a wnid that is none
        raise ConfigError(str(err)) from None


def check_root(name: str, root: str | None) -> None:
    """A :class:`ConfigError`, before any weights load, where ``root`` does not hold ``name``'s evaluation images."""
    entry = find(name)
    try:
        if entry is None and name in TEST_SETS:
            images_root(name, root)
        elif isinstance(entry, OnDisk):
            entry.split_dirs(root, "val", purpose=" evaluation")
    except FileNotFoundError as err:
        raise ConfigError(str(err)) from None
