"""Every key the optimizer, the schedule and the grid's BatchNorm read is in the composed config,
at the value its YAML states: the code restates no default."""

from __future__ import annotations

import pytest
from torch import nn

from resnet.engine.checks import grid_bn
from resnet.engine.optim import OPTIMIZERS, SCHEDULES, build_optimizer, build_scheduler
from resnet.grid import GRID_BN
from resnet.schema import KEYS
from tests.helpers.compose import CONFIGS, compose_config

OPTIM_FILES = sorted(path.stem for path in (CONFIGS / "optim").glob("*.yaml"))
SCHED_FILES = sorted(path.stem for path in (CONFIGS / "sched").glob("*.yaml"))


def test_an_absent_grid_bn_is_the_declared_default_and_a_given_one_is_kept():
    assert grid_bn(compose_config("train", "grid=[symmetric,asymmetric]")) == KEYS["grid_bn"].default == "statistics"
    assert KEYS["grid_bn"].default in GRID_BN
    assert grid_bn(compose_config("train", "grid=[symmetric,asymmetric]", "grid_bn=affine")) == "affine"


@pytest.mark.parametrize("optim", OPTIM_FILES)
def test_each_optimizer_yaml_states_every_key_its_optimizer_reads(optim):
    cfg = compose_config("train", f"optim={optim}")
    assert cfg.optim.name in OPTIMIZERS
    optimizer = build_optimizer(cfg.optim, nn.Linear(3, 2), cfg.optim.ref_batch)  # global batch = ref: lr as given
    assert [group["lr"] for group in optimizer.param_groups] == [cfg.optim.lr] * len(optimizer.param_groups)


@pytest.mark.parametrize("sched", SCHED_FILES)
@pytest.mark.parametrize("warmup", ["0", "1"])
def test_each_schedule_yaml_states_every_key_its_schedule_reads(sched, warmup):
    overrides = [f"sched={sched}"] + ([] if sched == "onecycle" else [f"sched.warmup_epochs={warmup}"])
    cfg = compose_config("train", *overrides)
    assert cfg.sched.name in SCHEDULES
    optimizer = build_optimizer(cfg.optim, nn.Linear(3, 2), 256)
    build_scheduler(cfg.sched, optimizer, steps_per_epoch=10, epochs=4)
