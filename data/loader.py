"""Train and val DataLoaders for every dataset in one call: :func:`build_loaders`.

Datasets (:mod:`data.registry`): those of image files, ``imagenet`` and ``imagefolder``
(``root/train/<class>/*`` and ``root/val/<class>/*``, the same classes in both; ``imagenet`` only
words its errors for ImageNet's wnid folders) and ``imagenet_shards``; and those held in memory:
the built-in ``fashion_mnist`` (28x28 grey) and ``synthetic``.

What the trainer does::

    data = data_config("imagenet", root=...)     # resnet.config: the YAML with these changes, workers=auto resolved
    loaders = build_loaders(data, batch_size=256, rank=dist.rank, world_size=dist.world_size, seed=cfg.seed)
    normalize = Normalize(model.meta.preprocessing).to(device)  # data.normalize
    model = build_model(..., num_classes=loaders.num_classes, in_chans=loaders.in_chans)
    for epoch in range(epochs):
        loaders.set_epoch(epoch)                  # reshuffle the train shards: every epoch
        skips = SkipLog()                         # data.batch: unreadable images this epoch
        for batch in loaders.train:               # Batch(images, labels, skipped, skipped_paths)
            skips.add(batch)
            if len(batch.labels) == 0:            # every image of the batch was unreadable
                continue
            x = normalize(batch.images.to(device, non_blocking=True))  # uint8 -> float
            y = batch.labels.to(device, non_blocking=True)
            ...
        if skips.count:
            log(str(skips))                       # count and the first few "path (reason)"
        for batch in loaders.val:                 # this rank's shard: indices rank::world_size
            ...                                   # sum correct and len(batch.labels); all-reduce both

* ``batch.images`` is uint8 [N, C, H, W] (C = ``loaders.in_chans``), ``batch.labels`` int64 [N].
  Train batches hold ``batch_size`` images (the last partial batch is dropped) minus any
  unreadable ones; ``batch_size`` is per process.
* Validation shows every image exactly once across ranks, no padding duplicates, so the
  all-reduced count equals ``loaders.val_size``. ``val_images=N`` scores N of them, the same N
  every epoch and at every world size (:func:`data.samplers.spread`; the first N of shards).
* ``loaders.protocol`` records the transforms; put it in every result row.
* Image folders are listed once and the listing kept (:mod:`data.index_cache`).
* Image-folder augmentation is seeded per sample from (``seed``, epoch, index)
  (:class:`data.samplers.EpochSampler`). ``fashion_mnist`` (in memory, ``workers=0``) draws from
  the process's global RNG, which the trainer reseeds every epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch
from torch.utils.data import Dataset, DistributedSampler, Sampler

from .augment import Augmented, train_size
from .batch import collate, pass_batch
from .config import DataConfig
from .dataloader import DataLoader
from .gpu_decode import EncodedRandomResizedCropFlip, check_decode, collate_encoded
from .imagefolder import ImageFolder, check_same_classes
from .registry import Folders, InMemory, Shards, find, names
from .samplers import EpochSampler, ShardSampler
from .shards.read import ShardBatches
from .shm import batch_bytes, check_room
from .transforms import RandomResizedCropFlip, ResizeCenterCrop


@dataclass
class Loaders(AbstractContextManager):
    train: DataLoader
    val: DataLoader
    num_classes: int
    class_names: list[str]
    in_chans: int  # 3 (RGB), or 1 for fashion_mnist
    image_size: int  # side of the square images of both loaders
    val_size: int  # images validation scores, over all ranks (val_images=N: N)
    protocol: dict[str, str]  # dataset and transforms, for result rows
    val_split_size: int = 0  # images in the whole val split (0: val_size)
    order_depends_on: dict = field(default_factory=dict)  # besides world size and batch: what fixes the batch order

    train_size: Callable[[int], int] | None = None  # epoch -> training crop (progressive resizing)

    def set_epoch(self, epoch: int, start_step: int = 0) -> None:
        """Call before every epoch: reshuffles the train split (and sets the epoch's training crop
        under progressive resizing); ``start_step`` > 0 skips the batches a run resumed mid-epoch
        has already trained on."""
        if self.train_size is not None:
            self.train.dataset.transform.set_size(self.train_size(epoch))
        if isinstance(self.train.dataset, ShardBatches):
            self.train.dataset.set_epoch(epoch, start_step)
        else:
            self.train.sampler.set_epoch(epoch, start_step * self.train.batch_size)

    def close(self) -> None:
        """Stop both loaders' worker processes (:meth:`data.dataloader.DataLoader.close`)."""
        for loader in (self.train, self.val):
            loader.close()

    def __exit__(self, *exc) -> None:
        self.close()


def build_loaders(
    data: DataConfig,
    batch_size: int,  # per process
    rank: int = 0,
    world_size: int = 1,
    seed: int = 0,
    val_batch_size: int | None = None,  # None: batch_size
    cache_dir: str | Path | None = None,  # the run dir: where folder indexes go when not beside the data
    val_images: int | None = None,  # validation scores this many of the val images (None: all)
    processes_per_node: int = 1,  # training processes sharing this node's /dev/shm
) -> Loaders:
    """Train and val loaders of ``data`` for process ``rank`` of ``world_size``."""
    dataset = _check(data)
    val_batch_size = val_batch_size or batch_size
    if isinstance(dataset, Shards):
        return _shard_loaders(
            data, dataset, batch_size, rank, world_size, seed, val_batch_size, val_images, processes_per_node
        )
    if isinstance(dataset, InMemory):
        crop_padding = data.crop_padding if data.augment else 0
        train_set, val_set = dataset.open("train", crop_padding, data.root), dataset.open("val", root=data.root)
        protocol = {"train": f"random_crop_flip(padding={crop_padding})", "val": "none"}
        class_names, in_chans, image_size = list(dataset.classes), dataset.in_chans, dataset.image_size
        workers, collate_fn = 0, pass_batch  # in memory: workers would only pickle
    else:
        train_tf, val_tf = _file_transforms(data)
        train_set, val_set = dataset.open_training(
            data.root, train_tf, val_tf, cache_dir, print if rank == 0 else None, max_file_bytes=data.max_file_bytes
        )
        class_names, protocol = train_set.classes, {"train": repr(train_tf), "val": repr(val_tf)}
        in_chans, image_size, workers, collate_fn = 3, data.image_size, data.workers, collate

    check_room(
        workers, largest_batch(data, batch_size, val_batch_size, image_size, in_chans), processes=processes_per_node
    )
    common = _loader_options(workers, collate_fn)
    train = DataLoader(
        train_set,
        batch_size=batch_size,
        sampler=_train_sampler(train_set, rank, world_size, seed, data.repeated_aug),
        drop_last=True,  # a last batch of one image breaks BatchNorm
        generator=torch.Generator().manual_seed(seed + rank),  # seeds the workers' augmentation RNG
        **(common | {"collate_fn": collate_encoded} if data.decode == "gpu" else common),
    )
    val_sampler = ShardSampler(len(val_set), rank, world_size, take=val_images)
    val = DataLoader(val_set, batch_size=val_batch_size, sampler=val_sampler, **common)
    return Loaders(
        train=train,
        val=val,
        num_classes=len(class_names),
        class_names=list(class_names),
        in_chans=in_chans,
        image_size=image_size,
        val_size=min(len(val_set), val_images or len(val_set)),
        val_split_size=len(val_set),
        protocol={"dataset": data.name, **protocol},
        train_size=_size_schedule(data.progressive_resize),
    )


def _check(data: DataConfig) -> InMemory | Folders | Shards:
    """``data``'s dataset; one line for a combination no loader can serve, naming what to pass instead."""
    dataset = find(data.name)
    if dataset is None:
        raise ValueError(f"unknown dataset {data.name!r}; choose one of {', '.join(names())}")
    if not isinstance(data.workers, int):  # auto: a config's, resolved by whoever runs the loaders
        raise ValueError(
            f"data.workers={data.workers}: the loaders take a number; resolve it first "
            "(resnet.runtime.workers.data_workers), or build the config with resnet.config.data_config"
        )
    memory = dataset if isinstance(dataset, InMemory) else None
    if memory is not None and (data.auto_augment or data.repeated_aug > 1 or data.progressive_resize):
        raise ValueError(
            f"{data.name} is augmented in memory by random crops and flips only; auto_augment, "
            "repeated_aug and progressive resizing need image files (data=imagefolder or imagenet)"
        )
    if memory is not None and data.image_size not in (None, memory.image_size):
        size = memory.image_size
        raise ValueError(f"{data.name} images are {size}x{size}; leave image_size unset, not {data.image_size}")
    check_decode(data.decode)
    if data.decode == "gpu" and (memory is not None or data.auto_augment or not data.augment):
        raise ValueError(
            "data.decode=gpu decodes the training crops of JPEG files: it needs image files, "
            "data.augment=true and no data.auto_augment (a policy runs on decoded pixels); "
            "or pass data.decode=cpu"
        )
    if isinstance(dataset, Shards) and data.repeated_aug > 1:
        raise ValueError(
            "repeated augmentation samples indices: it needs image folders, not shards "
            "(data=imagenet), or data.repeated_aug=0"
        )
    return dataset


def _file_transforms(data: DataConfig):
    """(train, val) transforms of encoded image files, for folders and shards alike."""
    image_size = data.image_size
    val_tf = ResizeCenterCrop(data.val_size or image_size, crop_pct=data.crop_pct, interpolation=data.interpolation)
    if not data.augment:
        if data.auto_augment or data.progressive_resize:
            raise ValueError(
                "data.augment=false gives training images the validation transform; auto_augment "
                "and progressive resizing need data.augment=true"
            )
        return val_tf, val_tf
    crop = EncodedRandomResizedCropFlip if data.decode == "gpu" else RandomResizedCropFlip
    train_tf = crop(image_size, scale=(data.min_scale, 1.0), interpolation=data.interpolation)
    if data.progressive_resize:
        train_tf.set_size(_size_schedule(data.progressive_resize)(0))
        train_tf.share_size()  # set_epoch changes it in the persistent workers too
    return (Augmented(train_tf, data.auto_augment) if data.auto_augment else train_tf), val_tf


def _size_schedule(progressive: Mapping | None) -> Callable[[int], int] | None:
    return None if not progressive else partial(train_size, **progressive)


def _shard_loaders(
    data: DataConfig,
    shards: Shards,
    batch_size: int,
    rank: int,
    world_size: int,
    seed: int,
    val_batch_size: int,
    val_images: int | None,
    processes_per_node: int,
) -> Loaders:
    """Loaders over ``root/train`` and ``root/val`` shards (:class:`data.shards.ShardBatches`);
    ``val_images``: the first that many val images (the conversion shuffled them)."""
    shards.split_dirs(data.root, "train", "val")  # both there, or one line, before either is opened
    train_tf, val_tf = _file_transforms(data)
    open_split = partial(shards.open, data.root, max_file_bytes=data.max_file_bytes)
    train_collate = collate_encoded if data.decode == "gpu" else collate
    train_set = open_split("train", train_tf, batch_size, rank, world_size, seed, collate_fn=train_collate)
    val_set = open_split("val", val_tf, val_batch_size, rank, world_size, train=False, limit=val_images)
    check_same_classes(train_set.classes, val_set.classes)
    check_room(
        data.workers, largest_batch(data, batch_size, val_batch_size, data.image_size), processes=processes_per_node
    )
    common = _loader_options(data.workers, pass_batch)
    return Loaders(
        train=DataLoader(train_set, batch_size=None, **common),
        val=DataLoader(val_set, batch_size=None, **common),
        num_classes=len(train_set.classes),
        class_names=list(train_set.classes),
        in_chans=3,
        image_size=data.image_size,
        val_size=val_set.total,
        val_split_size=int(val_set.counts.sum()),
        protocol={"dataset": data.name, "train": repr(train_tf), "val": repr(val_tf)},
        order_depends_on={"workers": data.workers},  # each worker reads a contiguous block of batches
        train_size=_size_schedule(data.progressive_resize),
    )


def _loader_options(workers: int, collate_fn: Callable) -> dict:
    """The DataLoader keywords both loaders of a dataset share."""
    return dict(
        num_workers=workers, collate_fn=collate_fn, pin_memory=torch.cuda.is_available(), persistent_workers=workers > 0
    )


def largest_batch(data: DataConfig, batch_size: int, val_batch_size: int, image_size: int, channels: int = 3) -> int:
    """The bytes of the larger of a training and a validation batch as a worker hands it over."""
    return max(
        batch_bytes(batch_size, image_size, channels, encoded=data.decode == "gpu"),
        batch_bytes(val_batch_size, data.val_size or image_size, channels),
    )


def _train_sampler(train_set: Dataset, rank: int, world_size: int, seed: int, repeated_aug: int) -> Sampler:
    """Shuffled shares reseeded per epoch; for image folders also a seed per sample (exact resume).
    ``repeated_aug`` > 1: timm's RepeatAugSampler (each image that many times per epoch, the copies on
    different ranks where there are several; Hoffer et al. 2020, the torchvision V2 recipe)."""
    if repeated_aug > 1:
        from timm.data.distributed_sampler import RepeatAugSampler

        # selected_round=256 rounds an epoch down to a multiple of 256 images; a smaller set is not
        # rounded (timm >= 1.0.31 does the same; older timm rounded it down to an epoch of none)
        rounding = 256 if len(train_set) >= 256 else 0
        shares = RepeatAugSampler(
            train_set, num_replicas=world_size, rank=rank, num_repeats=repeated_aug, selected_round=rounding
        )
        return EpochSampler(shares, seed, seeded=isinstance(train_set, ImageFolder), rank=rank)
    shares = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    return EpochSampler(shares, seed, seeded=isinstance(train_set, ImageFolder))
