"""The range of every training number is the schema's (resnet/schema.py), said in its one style:
``<override>: expected ..., e.g. ...``; resnet/engine/train_config.py keeps the checks of several keys."""

from __future__ import annotations

import pytest

from resnet.config import ConfigError
from resnet.engine.train_config import train_config
from tests.helpers.compose import compose_config


@pytest.mark.parametrize(
    "override, message",
    [
        ("epochs=0", "epochs=0: expected a whole number >= 1, e.g. epochs=8"),
        ("batch_size=0", "batch_size=0: expected a whole number >= 1, e.g. batch_size=128"),
        ("checkpoint_every=-1", "checkpoint_every=-1: expected a whole number >= 0, e.g. checkpoint_every=1000"),
        ("ema_decay=1", "ema_decay=1: expected a number in [0, 1), e.g. ema_decay=0.9999"),
        ("ema_every=0", "ema_every=0: expected a whole number >= 1, e.g. ema_every=32"),
        ("mixup=-0.2", "mixup=-0.2: expected a number >= 0, e.g. mixup=0.2"),
        ("cutmix=-1", "cutmix=-1: expected a number >= 0, e.g. cutmix=1.0"),
        ("label_smoothing=1", "label_smoothing=1: expected a number in [0, 1), e.g. label_smoothing=0.1"),
        ("random_erasing=1.5", "random_erasing=1.5: expected a number in [0, 1], e.g. random_erasing=0.25"),
    ],
)
def test_a_number_out_of_range_is_refused_in_the_schemas_words(override, message):
    with pytest.raises(ConfigError) as raised:
        train_config(compose_config("train", "run_dir=outputs/test", override, hydra=True))
    assert str(raised.value) == message


@pytest.mark.parametrize("override", ["ema_decay=0", "ema_decay=0.9999", "checkpoint_every=0", "random_erasing=1"])
def test_the_ends_of_a_range_that_mean_off_or_always_are_taken(override):
    train_config(compose_config("train", "run_dir=outputs/test", override))
