"""Train and val DataLoaders for every dataset in one call: :func:`build_loaders`.

Datasets (:data:`DATASETS`): ``fashion_mnist`` (built in, in memory, 28x28 grey),
``imagenet`` and ``imagefolder`` (``root/train/<class>/*`` and ``root/val/<class>/*``, the
same classes in both; ``imagenet`` only words its errors for ImageNet's wnid folders).

What the trainer does::

    loaders = build_loaders("imagenet", cfg.data.root, batch_size=256, workers=8,
                            rank=dist.rank, world_size=dist.world_size, seed=cfg.seed)
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
  all-reduced count equals ``loaders.val_size``.
* ``loaders.protocol`` records the transforms; put it in every result row.
* Image-folder augmentation is seeded per sample from (``seed``, epoch, index)
  (:class:`data.samplers.EpochSampler`): the same for any number of workers or ranks, and
  after a resume. ``fashion_mnist`` (in memory, ``workers=0``) draws from the process's
  global RNG, which the trainer reseeds every epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch
from torch.utils.data import Dataset, DistributedSampler, Sampler

from .augment import Augmented, train_size
from .batch import collate, pass_batch
from .dataloader import DataLoader
from .gpu_decode import EncodedRandomResizedCropFlip, check_decode, collate_encoded
from .imagefolder import ImageFolder, check_same_classes
from .in_memory import TensorImages
from .samplers import EpochSampler, ShardSampler
from .shards.read import ShardBatches
from .transforms import RandomResizedCropFlip, ResizeCenterCrop

DATASETS = ("fashion_mnist", "imagenet", "imagefolder", "imagenet_shards")
SHARDED = ("imagenet_shards",)  # root/train and root/val hold index.json and tar shards (python -m data.shards)


@dataclass
class Loaders:
    train: DataLoader
    val: DataLoader
    num_classes: int
    class_names: list[str]
    in_chans: int  # 3 (RGB), or 1 for fashion_mnist
    image_size: int  # side of the square images of both loaders
    val_size: int  # images in the whole val split, over all ranks
    protocol: dict[str, str]  # dataset and transforms, for result rows
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
            if isinstance(loader, DataLoader):
                loader.close()

    def __enter__(self) -> Loaders:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def build_loaders(
    name: str,
    root: str | None,
    batch_size: int,
    workers: int,
    rank: int = 0,
    world_size: int = 1,
    seed: int = 0,
    image_size: int | None = None,  # None: 224 for image folders, 28 for fashion_mnist (the only size it has)
    val_batch_size: int | None = None,  # None: batch_size
    val_size: int | None = None,  # val crop (train/test resolution split, FixRes); None: image_size
    crop_pct: float = 0.875,  # val: resize to floor(image_size / crop_pct), centre crop image_size
    min_scale: float = 0.08,  # train: smallest crop area, as a fraction of the image
    interpolation: str = "bilinear",  # or bicubic; train and val
    crop_padding: int = 4,  # fashion_mnist train: random crop after zero padding by this many pixels
    augment: bool = True,  # False: train images get the val transform (deterministic runs, tests)
    auto_augment: str | None = None,  # ta_wide | rand-m6-... (data.augment): a policy after the crop
    repeated_aug: int = 0,  # > 1: timm's RepeatAugSampler, each image this many times per epoch
    progressive: Mapping | None = None,  # data.augment.train_size's keywords: the crop grows per epoch
    decode: str = "cpu",  # gpu: training JPEGs travel encoded and are decoded on the GPU (data.gpu_decode)
) -> Loaders:
    """Train and val loaders of dataset ``name`` for process ``rank`` of ``world_size``."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    if name == "fashion_mnist" and (auto_augment or repeated_aug > 1 or progressive):
        raise ValueError("fashion_mnist is augmented in memory by random crops and flips only; auto_augment, "
                         "repeated_aug and progressive resizing need image files (data=imagefolder or imagenet)")
    check_decode(decode)
    if decode == "gpu" and (name == "fashion_mnist" or auto_augment or not augment):
        raise ValueError("data.decode=gpu decodes the training crops of JPEG files: it needs image files, "
                         "data.augment=true and no data.auto_augment (a policy runs on decoded pixels); "
                         "or pass data.decode=cpu")
    extras = dict(auto_augment=auto_augment, progressive=progressive, decode=decode)
    if name in SHARDED:
        if repeated_aug > 1:
            raise ValueError("repeated augmentation samples indices: it needs image folders, not shards "
                             "(data=imagenet), or data.repeated_aug=0")
        return _shard_loaders(name, root, batch_size, workers, rank, world_size, seed, image_size or 224,
                              val_batch_size or batch_size, crop_pct, min_scale, interpolation, augment, val_size,
                              **extras)
    if name == "fashion_mnist":
        if image_size not in (None, 28):
            raise ValueError(f"fashion_mnist images are 28x28; leave image_size unset, not {image_size}")
        # Imported here, not at the top: `python -m data.fashion_mnist` must be the module's first import.
        from .fashion_mnist import CLASS_NAMES, load_fashion_mnist

        image_size, in_chans, class_names = 28, 1, CLASS_NAMES
        crop_padding = crop_padding if augment else 0
        train_set: Dataset = TensorImages(*load_fashion_mnist("train"), crop_padding=crop_padding)
        val_set: Dataset = TensorImages(*load_fashion_mnist("val"))
        workers, collate_fn = 0, pass_batch  # in memory: worker processes would only add pickling
        protocol = {"train": f"random_crop_flip(padding={crop_padding})", "val": "none"}
    else:
        image_size, in_chans = image_size or 224, 3
        train_dir, val_dir = _split_dirs(name, root)
        train_tf, val_tf = _file_transforms(image_size, crop_pct, min_scale, interpolation, augment, val_size,
                                            **extras)
        train_set = ImageFolder(train_dir, train_tf)
        val_set = ImageFolder(val_dir, val_tf, classes=train_set.classes)
        class_names, collate_fn = train_set.classes, collate
        protocol = {"train": repr(train_tf), "val": repr(val_tf)}

    common = dict(
        num_workers=workers,
        collate_fn=collate_fn,
        pin_memory=torch.cuda.is_available(),
        persistent_workers=workers > 0,
    )
    train = DataLoader(
        train_set,
        batch_size=batch_size,
        sampler=_train_sampler(train_set, rank, world_size, seed, repeated_aug),
        drop_last=True,  # a last batch of one image breaks BatchNorm
        generator=torch.Generator().manual_seed(seed + rank),  # seeds the workers' augmentation RNG
        **(common | {"collate_fn": collate_encoded} if decode == "gpu" else common),
    )
    val = DataLoader(
        val_set,
        batch_size=val_batch_size or batch_size,
        sampler=ShardSampler(len(val_set), rank, world_size),
        **common,
    )
    return Loaders(
        train=train,
        val=val,
        num_classes=len(class_names),
        class_names=list(class_names),
        in_chans=in_chans,
        image_size=image_size,
        val_size=len(val_set),
        protocol={"dataset": name, **protocol},
        train_size=_size_schedule(progressive),
    )


def _file_transforms(image_size, crop_pct, min_scale, interpolation, augment, val_size=None, auto_augment=None,
                     progressive=None, decode="cpu"):
    """(train, val) transforms of encoded image files, for folders and shards alike."""
    val_tf = ResizeCenterCrop(val_size or image_size, crop_pct=crop_pct, interpolation=interpolation)
    if not augment:
        if auto_augment or progressive:
            raise ValueError("data.augment=false gives training images the validation transform; auto_augment "
                             "and progressive resizing need data.augment=true")
        return val_tf, val_tf
    crop = EncodedRandomResizedCropFlip if decode == "gpu" else RandomResizedCropFlip
    train_tf = crop(image_size, scale=(min_scale, 1.0), interpolation=interpolation)
    if progressive:
        train_tf.set_size(_size_schedule(progressive)(0))
        train_tf.share_size()  # set_epoch changes it in the persistent workers too
    return (Augmented(train_tf, auto_augment) if auto_augment else train_tf), val_tf


def _size_schedule(progressive: Mapping | None) -> Callable[[int], int] | None:
    return None if not progressive else partial(train_size, **progressive)


def _shard_loaders(name, root, batch_size, workers, rank, world_size, seed, image_size, val_batch_size, crop_pct,
                   min_scale, interpolation, augment, val_size=None, auto_augment=None, progressive=None,
                   decode="cpu") -> Loaders:
    """Loaders over ``root/train`` and ``root/val`` shards (:class:`data.shards.ShardBatches`)."""
    if root is None or not all((Path(root) / split).is_dir() for split in ("train", "val")):
        raise FileNotFoundError(
            f"{name} needs data.root=/path/to/shards holding train/ and val/, each with index.json and "
            f"its .tar shards (python -m data.shards imagenet RAW_ROOT OUT_ROOT writes them); got root={root}"
        )
    train_tf, val_tf = _file_transforms(image_size, crop_pct, min_scale, interpolation, augment, val_size,
                                        auto_augment, progressive, decode)
    train_set = ShardBatches.open(Path(root) / "train", train_tf, batch_size, rank, world_size, seed,
                                  collate_fn=collate_encoded if decode == "gpu" else collate)
    val_set = ShardBatches.open(Path(root) / "val", val_tf, val_batch_size, rank, world_size, train=False)
    check_same_classes(train_set.classes, val_set.classes)
    common = dict(batch_size=None, num_workers=workers, collate_fn=pass_batch, pin_memory=torch.cuda.is_available(),
                  persistent_workers=workers > 0)
    return Loaders(
        train=DataLoader(train_set, **common),
        val=DataLoader(val_set, **common),
        num_classes=len(train_set.classes),
        class_names=list(train_set.classes),
        in_chans=3,
        image_size=image_size,
        val_size=val_set.total,
        protocol={"dataset": name, "train": repr(train_tf), "val": repr(val_tf)},
        order_depends_on={"workers": workers},  # each worker reads a contiguous block of batches
        train_size=_size_schedule(progressive),
    )


def _train_sampler(train_set: Dataset, rank: int, world_size: int, seed: int, repeated_aug: int = 0) -> Sampler:
    """Shuffled shares reseeded per epoch; for image folders also a seed per sample (exact resume).
    ``repeated_aug`` > 1: timm's RepeatAugSampler (each image that many times per epoch, the copies on
    different ranks where there are several; Hoffer et al. 2020, the torchvision V2 recipe)."""
    if repeated_aug > 1:
        from timm.data.distributed_sampler import RepeatAugSampler

        shares = RepeatAugSampler(train_set, num_replicas=world_size, rank=rank, num_repeats=repeated_aug)
        return EpochSampler(shares, seed, seeded=isinstance(train_set, ImageFolder), rank=rank)
    shares = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    return EpochSampler(shares, seed, seeded=isinstance(train_set, ImageFolder))


def _split_dirs(name: str, root: str | None) -> tuple[Path, Path]:
    """``root/train`` and ``root/val``, or one line saying what to pass."""
    layout = "train/<wnid>/*.JPEG and val/<wnid>/*.JPEG" if name == "imagenet" else "train/<class>/* and val/<class>/*"
    if root is None or not all((Path(root) / split).is_dir() for split in ("train", "val")):
        raise FileNotFoundError(f"{name} needs data.root=/path/to/{name} holding {layout}; got root={root}")
    return Path(root) / "train", Path(root) / "val"
