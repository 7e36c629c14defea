"""What a run asks of its data, as one typed value: :class:`DataConfig`; and :class:`ConfigError`,
the one error of a config that cannot work (the data's and the library's alike).

``configs/data/*.yaml`` hold the same keys (``progressive_resize`` is ``progressive`` here);
:meth:`DataConfig.from_config` reads them, so the trainer hands the loaders one object
instead of copying a dozen keywords by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from .files import MAX_FILE_MB, mib_bytes


class ConfigError(ValueError):
    """A config value (or the data it points at) that cannot work; the message is one
    line saying what is wrong. train.py / eval.py print it and exit with status 2."""


@dataclass(frozen=True)
class DataConfig:
    """A dataset and how its images are read, cropped and augmented (:func:`data.build_loaders`)."""

    name: str  # a dataset of data.registry
    root: str | None = None  # holding train/ and val/, or an in-memory dataset's files (None: its own lookup)
    workers: int = 0  # decode processes per training process
    image_size: int | None = None  # None: 224 for image files, an in-memory dataset's own size
    val_size: int | None = None  # val crop when it differs from training's (FixRes); None: image_size
    crop_pct: float = 0.875  # val: resize to floor(image_size / crop_pct), centre crop image_size
    min_scale: float = 0.08  # train: smallest crop area, as a fraction of the image
    interpolation: str = "bilinear"  # or bicubic; train and val
    crop_padding: int = 4  # in-memory train: random crop after zero padding by this many pixels
    augment: bool = True  # False: train images get the val transform (deterministic runs, tests)
    auto_augment: str | None = None  # ta_wide | rand-m6-... (data.augment): a policy after the crop
    repeated_aug: int = 0  # > 1: timm's RepeatAugSampler, each image this many times per epoch
    progressive: Mapping | None = None  # data.augment.train_size's keywords: the crop grows per epoch
    decode: str = "cpu"  # gpu: training JPEGs travel encoded and are decoded on the GPU (data.gpu_decode)
    max_file_mb: float = MAX_FILE_MB  # MiB: a larger file is skipped and counted, never read (data.files)

    @property
    def max_file_bytes(self) -> int:
        """:attr:`max_file_mb` in bytes: the ``max_file_bytes`` of the datasets of files."""
        return mib_bytes(self.max_file_mb)

    @classmethod
    def from_config(cls, data_cfg: Mapping, workers: int) -> DataConfig:
        """From a ``data:`` config as a plain mapping (``OmegaConf.to_container(cfg.data,
        resolve=True)``), with the worker count already decided (``workers: auto`` is the
        caller's to resolve)."""
        known = {f.name for f in fields(cls)} - {"workers", "progressive"}
        values = {key: data_cfg[key] for key in known if data_cfg.get(key) is not None}
        return cls(**values, workers=workers, progressive=data_cfg.get("progressive_resize") or None)
