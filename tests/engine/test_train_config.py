"""The training config is checked and typed once, at train()'s boundary (resnet/engine/train_config.py):
the typed config holds every key train.yaml has, states no value of its own, and a key it lacks is one line."""

from __future__ import annotations

from dataclasses import MISSING, fields

import pytest
from omegaconf import OmegaConf

from data.config import DataConfig
from resnet.config import ConfigError
from resnet.engine.losses import LossConfig
from resnet.engine.train_config import TrainConfig, train_config
from tests.helpers.compose import compose_config

TYPED = (TrainConfig, LossConfig, DataConfig)


def test_the_typed_config_holds_every_key_of_train_yaml_and_no_other():
    composed = set(compose_config("train", "run_dir=x"))
    typed = {f.name for f in fields(TrainConfig)} - {"loss", "recorded"} | {f.name for f in fields(LossConfig)}
    assert typed - composed == {"padding"}  # +padding= only: the group is in no defaults list
    assert composed - typed == set()


@pytest.mark.parametrize("cls", TYPED, ids=lambda cls: cls.__name__)
def test_a_typed_config_states_no_default(cls):
    assert [f.name for f in fields(cls) if f.default is not MISSING or f.default_factory is not MISSING] == []


def test_its_values_are_the_composed_ones_and_its_record_is_the_config_as_resolved():
    cfg = compose_config("train", "run_dir=x", "optim=adamw", "mixup=0.2", "grid=[symmetric,asymmetric]", "epochs=3")
    config = train_config(cfg)
    assert (config.epochs, config.loss.mixup, config.grid, config.optim.betas) == (
        3,
        0.2,
        ("symmetric", "asymmetric"),
        (0.9, 0.999),
    )
    assert config.recorded == OmegaConf.to_container(cfg, resolve=True)
    moved = config.in_run_dir("elsewhere")
    assert (moved.run_dir, moved.recorded["run_dir"], config.run_dir) == ("elsewhere", "elsewhere", "x")


def test_a_config_of_ones_own_lacking_a_key_is_one_line():
    cfg = compose_config("train", "run_dir=x")
    OmegaConf.set_struct(cfg, False)
    del cfg["checkpoint_minutes"]
    with pytest.raises(ConfigError, match=r"^the training config has no checkpoint_minutes: give it one"):
        train_config(cfg)
