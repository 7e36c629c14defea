"""What a run asks of its data, as one typed value: :class:`DataConfig`; and :class:`ConfigError`,
the one error of a config that cannot work (the data's and the library's alike).
``configs/data/base/dataset.yaml`` declares every key of a ``data:`` config, its default and its
meaning; :class:`DataConfig` holds them typed and states none of their values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from .files import mib_bytes


class ConfigError(ValueError):
    """A config value (or the data it points at) that cannot work; the message is one
    line saying what is wrong. train.py / eval.py print it and exit with status 2."""


@dataclass(frozen=True)
class DataConfig:
    """A dataset and how its images are read, cropped and augmented (:func:`data.build_loaders`);
    each field is the key of ``configs/data/base/dataset.yaml`` of its name, which says what it means."""

    name: str  # a dataset of data.registry
    root: str | None
    workers: int | str  # a number, or auto (resnet.runtime.workers resolves it before the loaders)
    image_size: int | None  # None: an in-memory dataset's own size
    val_size: int | None
    crop_pct: float
    min_scale: float
    interpolation: str
    crop_padding: int
    augment: bool
    auto_augment: str | None
    repeated_aug: int
    progressive_resize: Mapping | None  # data.augment.train_size's keywords
    decode: str
    max_file_mb: float

    @property
    def max_file_bytes(self) -> int:
        """:attr:`max_file_mb` in bytes: the ``max_file_bytes`` of the datasets of files."""
        return mib_bytes(self.max_file_mb)

    @classmethod
    def from_config(cls, data_cfg: Mapping) -> DataConfig:
        """From a composed ``data:`` config as a plain mapping (``OmegaConf.to_container(cfg.data,
        resolve=True)``); the keys it holds besides (``num_classes``, ``preprocessing``) are the
        model's and evaluation's. A key it lacks is one line naming the file that declares it."""
        missing = [f.name for f in fields(cls) if f.name not in data_cfg]
        if missing:
            raise ConfigError(
                f"data={data_cfg.get('name')} has no data.{missing[0]}: start its YAML from "
                "configs/data/base/dataset.yaml (defaults: [base/dataset@_here_]), which declares every data key"
            )
        return cls(**{f.name: data_cfg[f.name] for f in fields(cls)})
