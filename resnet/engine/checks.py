"""The checks of a training config that need no data and no device: one line each, naming the fix."""

from __future__ import annotations

from collections.abc import Mapping

from omegaconf import DictConfig, OmegaConf

from data.testsets import TEST_SETS

from ..command_lines import app_words
from ..config import ConfigError, check_run_config
from ..grid import GRID_BN, grid_paddings
from ..schema import choices
from .losses import LOSSES
from .optim import OptimConfig, SchedConfig


def grid_bn(cfg: Mapping) -> str:
    """The run's ``grid_bn``, as given (train.yaml holds it, at its declared default in
    :data:`resnet.schema.KEYS`): a wrong value is returned as it is, for :func:`check_train_config`
    to refuse (``grid_bn=false``). A checkpoint's is read from its weights, not its config:
    :func:`resnet.checkpoint.recorded_grid`."""
    return cfg["grid_bn"]


def check_train_config(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` for the first value of ``cfg`` that cannot train."""
    if cfg.data.name in TEST_SETS:
        raise ConfigError(
            f"data={cfg.data.name} is a test set, evaluation only: train with data=imagenet, then "
            f"{' '.join(app_words('eval'))} weights=<run dir>/last.pt data={cfg.data.name} data.root=..."
        )
    check_run_config(cfg)
    if cfg.data_changed not in choices("data_changed"):
        raise ConfigError(f"unknown data_changed {cfg.data_changed!r}; choose {' or '.join(choices('data_changed'))}")
    if cfg.on_nonfinite not in choices("on_nonfinite"):
        raise ConfigError(f"unknown on_nonfinite {cfg.on_nonfinite!r}; choose {' or '.join(choices('on_nonfinite'))}")
    _check_augmentation(cfg)
    try:  # the optimizer's and the schedule's keys: each read, none stray (typed once, resnet.engine.optim)
        OptimConfig.from_node(cfg.optim)
        SchedConfig.from_node(cfg.sched)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if cfg.grid:
        _check_grid(cfg)
    if OmegaConf.is_missing(cfg.data, "num_classes"):
        raise ConfigError(f"data={cfg.data.name} needs data.num_classes=<the number of class folders>")


def _check_augmentation(cfg: DictConfig) -> None:
    if (cfg.mixup or cfg.cutmix) and cfg.batch_size < 2:
        raise ConfigError(
            f"mixup and cutmix mix the images of a batch with each other; batch_size={cfg.batch_size} "
            "has nothing to mix: pass batch_size=2 or more, or mixup=0 cutmix=0"
        )
    if cfg.loss not in LOSSES:
        raise ConfigError(f"unknown loss {cfg.loss!r}; choose one of {', '.join(LOSSES)} (loss=ce)")


def _check_grid(cfg: DictConfig) -> None:
    if cfg.get("padding") is not None:
        raise ConfigError(
            "grid= and +padding= both choose the padding: drop +padding (the model is built "
            "under the grid's first preset)"
        )
    norms = grid_bn(cfg)
    if norms not in GRID_BN:
        given = str(norms).lower() if isinstance(norms, bool) else norms  # YAML reads true as a boolean
        raise ConfigError(f"unknown grid_bn={given}; choose one of {', '.join(GRID_BN)} (grid_bn={GRID_BN[0]})")
    if norms != "shared" and cfg.sync_bn:
        raise ConfigError(
            f"grid_bn={norms} keeps BatchNorm entries per preset, which synchronised BatchNorm does not: "
            "pass grid_bn=shared or sync_bn=false"
        )
    try:
        grid_paddings(list(cfg.grid))
    except ValueError as err:
        raise ConfigError(str(err).splitlines()[0]) from None
