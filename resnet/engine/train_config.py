"""The training config at its boundary: checked once (each fault one line naming the fix; the
schema's ranges first, :func:`resnet.config.check_run_config`) and typed into :class:`TrainConfig`,
whose parts are the typed configs of the rooms that read them: :class:`data.DataConfig`,
:class:`~resnet.engine.optim.OptimConfig`, :class:`~resnet.engine.optim.SchedConfig` and
:class:`~resnet.engine.losses.LossConfig`. The engine, the optimizer, the losses, the runtime and the
job's life cycle take those, never the DictConfig.

Every value comes from the composed config: each key's default, range and resume rule are
declared once, in :data:`resnet.schema.KEYS` and ``configs/``; nothing here states one. The
config as composed stays beside the typed one (:attr:`TrainConfig.recorded`): it is what a
checkpoint and the run's logs record, and what a resume compares key by key (:mod:`resnet.job`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from omegaconf import DictConfig, OmegaConf

from data.config import DataConfig
from data.testsets import TEST_SETS

from ..command_lines import app_words
from ..config import ConfigError, check_run_config
from ..grid import grid_paddings
from .losses import LossConfig
from .optim import OptimConfig, SchedConfig


@dataclass(frozen=True)
class TrainConfig:
    """``configs/train.yaml`` as composed and checked, typed; each field is the key of its name
    (train.yaml says what each means), the groups and the loss keys as their rooms' own configs."""

    model: Mapping  # the model node, as hydra's instantiate reads it (arch, num_classes, ...)
    padding: Mapping | None  # the +padding node (resnet.padding.resolve_padding reads it); None: the model's own
    data: DataConfig
    optim: OptimConfig
    sched: SchedConfig
    loss: LossConfig  # loss, label_smoothing, bce_target_threshold, mixup, cutmix, random_erasing
    logger: Mapping
    epochs: int
    batch_size: int
    seed: int
    device: str
    amp: str
    channels_last: bool | str
    compile: bool
    sync_bn: bool
    freeze_bn: bool
    deterministic: bool
    eval_flip: bool
    ema_decay: float
    ema_every: int
    grid: tuple[str, ...] | None
    grid_bn: str
    grad_clip: float
    on_nonfinite: str
    max_skipped: float
    max_unreadable: float
    max_unreadable_after: int
    resume: bool | str
    data_changed: str
    init: str | None
    checkpoint_every: int
    checkpoint_minutes: float
    dist_timeout: float
    stop_after: int | None
    eval_every: int
    log_every: int
    max_steps_per_epoch: int | None
    val_images: int | None
    run_dir: str
    recorded: Mapping  # the config as composed and resolved: what checkpoints record and a resume compares

    @property
    def num_classes(self) -> int:
        return self.recorded["data"]["num_classes"]

    def in_run_dir(self, run_dir: str) -> TrainConfig:
        """This config writing to ``run_dir`` (the run it resumes), its record too."""
        return replace(self, run_dir=run_dir, recorded={**self.recorded, "run_dir": run_dir})


def train_config(cfg: DictConfig) -> TrainConfig:
    """``cfg`` checked (the first fault: one :class:`ConfigError` line) and typed."""
    _check(cfg)
    plain = OmegaConf.to_container(cfg, resolve=True)
    try:  # the optimizer's and the schedule's keys: each read, none stray
        optim, sched = OptimConfig.from_node(plain["optim"]), SchedConfig.from_node(plain["sched"])
    except ValueError as err:
        raise ConfigError(str(err)) from None
    parts = {
        "padding": plain.get("padding"),  # +padding= only: the group is in no defaults list
        "data": DataConfig.from_config(plain["data"]),
        "optim": optim,
        "sched": sched,
        "loss": LossConfig(**{f.name: _read(plain, f.name) for f in fields(LossConfig)}),
        "grid": tuple(plain["grid"]) if plain["grid"] else None,
        "recorded": plain,
    }
    return TrainConfig(**parts, **{f.name: _read(plain, f.name) for f in fields(TrainConfig) if f.name not in parts})


def _read(plain: Mapping, key: str) -> object:
    if key not in plain:  # train.yaml holds every key (tests/cli/test_configs.py): a config of one's own lacks it
        raise ConfigError(f"the training config has no {key}: give it one (configs/train.yaml's line for {key})")
    return plain[key]


def _check(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` for the first value of ``cfg`` that cannot train (the checks that
    need no data and no device; the schema's ranges, :func:`resnet.config.check_run_config`)."""
    if cfg.data.name in TEST_SETS:
        raise ConfigError(
            f"data={cfg.data.name} is a test set, evaluation only: train with data=imagenet, then "
            f"{' '.join(app_words('eval'))} weights=<run dir>/last.pt data={cfg.data.name} data.root=..."
        )
    check_run_config(cfg)
    if (cfg.mixup or cfg.cutmix) and cfg.batch_size < 2:
        raise ConfigError(
            f"mixup and cutmix mix the images of a batch with each other; batch_size={cfg.batch_size} "
            "has nothing to mix: pass batch_size=2 or more, or mixup=0 cutmix=0"
        )
    if cfg.grid and cfg.get("padding") is not None:
        raise ConfigError(
            "grid= and +padding= both choose the padding: drop +padding (the model is built "
            "under the grid's first preset)"
        )
    if cfg.grid and cfg.grid_bn != "shared" and cfg.sync_bn:
        raise ConfigError(
            f"grid_bn={cfg.grid_bn} keeps BatchNorm entries per preset, which synchronised BatchNorm does not: "
            "pass grid_bn=shared or sync_bn=false"
        )
    if cfg.grid:
        try:
            grid_paddings(list(cfg.grid))
        except ValueError as err:
            raise ConfigError(str(err).splitlines()[0]) from None
    if OmegaConf.is_missing(cfg.data, "num_classes"):
        raise ConfigError(f"data={cfg.data.name} needs data.num_classes=<the number of class folders>")
