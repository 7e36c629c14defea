"""Every key the optimizer and the schedule read is in the composed config,
at the value its YAML states: the code restates no default."""

from __future__ import annotations

import re

import pytest
from torch import nn

from resnet.config import ConfigError
from resnet.engine.optim import OPTIMIZER_KEYS, SCHEDULE_KEYS, build_optimizer, build_scheduler
from resnet.engine.train_config import train_config
from tests.helpers.compose import CONFIGS, compose_config

OPTIM_FILES = sorted(path.stem for path in (CONFIGS / "optim").glob("*.yaml"))
SCHED_FILES = sorted(path.stem for path in (CONFIGS / "sched").glob("*.yaml"))


@pytest.mark.parametrize("optim", OPTIM_FILES)
def test_each_optimizer_yaml_states_every_key_its_optimizer_reads(optim):
    cfg = compose_config("train", f"optim={optim}")
    assert cfg.optim.name in OPTIMIZER_KEYS
    optimizer = build_optimizer(cfg.optim, nn.Linear(3, 2), cfg.optim.ref_batch)  # global batch = ref: lr as given
    assert [group["lr"] for group in optimizer.param_groups] == [cfg.optim.lr] * len(optimizer.param_groups)


@pytest.mark.parametrize("sched", SCHED_FILES)
@pytest.mark.parametrize("warmup", ["0", "1"])
def test_each_schedule_yaml_states_every_key_its_schedule_reads(sched, warmup):
    overrides = [f"sched={sched}"] + ([] if sched == "onecycle" else [f"sched.warmup_epochs={warmup}"])
    cfg = compose_config("train", *overrides)
    assert cfg.sched.name in SCHEDULE_KEYS
    optimizer = build_optimizer(cfg.optim, nn.Linear(3, 2), 256)
    build_scheduler(cfg.sched, optimizer, steps_per_epoch=10, epochs=4)


def test_the_groups_are_typed_once_and_a_stray_or_missing_key_is_one_line():
    from resnet.engine.optim import OptimConfig, SchedConfig

    cfg = compose_config("train", "optim=adamw", "sched=step")
    optim, sched = OptimConfig.from_node(cfg.optim), SchedConfig.from_node(cfg.sched)
    assert optim.betas == (0.9, 0.999) and optim.momentum is None and sched.milestones == (30, 60, 80)
    for overrides, says in (
        (["+optim.eps=1e-8"], "optim.eps is read by no part of optim=sgd (it reads lr, ref_batch"),
        (["optim=adamw", "+optim.momentum=0.9"], "optim.momentum is read by no part of optim=adamw"),
    ):
        with pytest.raises(ConfigError, match=re.escape(says)):
            train_config(compose_config("train", "run_dir=x", *overrides))
    with pytest.raises(ValueError, match=re.escape("sched=cosine reads sched.min_lr_ratio, which is not set")):
        SchedConfig.from_node({"name": "cosine", "warmup_epochs": 1, "warmup_start_factor": 0.1})
