"""The LR schedules are torch's LRSchedulers; their values agree with timm's and torch's own
classes step by step, the trainer steps them once per optimizer step, and a resume continues
the same curve."""

from __future__ import annotations

import pytest
import torch
from timm.scheduler import CosineLRScheduler
from torch import nn
from torch.optim import lr_scheduler

from resnet.checkpoint.save import _check_plain
from resnet.engine.optim import build_optimizer, build_scheduler, load_scheduler_state, scheduler_state

PEAK = 0.4


def sgd() -> torch.optim.SGD:
    return torch.optim.SGD(nn.Linear(3, 2).parameters(), lr=PEAK, momentum=0.9)


def lrs(scheduler, optimizer, steps: int) -> list[float]:
    """The LR each of ``steps`` optimizer steps runs at."""
    seen = []
    for _ in range(steps):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return seen


@pytest.mark.parametrize("warmup_epochs, floor", [(2, 0.01), (0, 0.0), (0.5, 0.1)])
def test_warmup_then_cosine_is_timms_cosine_with_a_warmup_prefix(warmup_epochs, floor):
    steps_per_epoch, epochs = 10, 8
    cfg = {"name": "cosine", "warmup_epochs": warmup_epochs, "warmup_start_factor": 0.01, "min_lr_ratio": floor}
    ours = lrs(build_scheduler(cfg, opt := sgd(), steps_per_epoch, epochs), opt, steps_per_epoch * epochs)

    warmup = int(warmup_epochs * steps_per_epoch)
    timm_opt = sgd()
    theirs = CosineLRScheduler(
        timm_opt,
        t_initial=steps_per_epoch * epochs - warmup,
        lr_min=floor * PEAK,
        warmup_t=warmup,
        warmup_lr_init=0.01 * PEAK,
        warmup_prefix=True,
        t_in_epochs=False,
    )
    expected = []
    for step in range(steps_per_epoch * epochs):
        theirs.step_update(step)
        expected.append(timm_opt.param_groups[0]["lr"])
    assert ours == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert max(ours) == pytest.approx(PEAK) and ours[-1] < 0.01 * PEAK + floor * PEAK


def test_step_decays_at_the_milestone_epochs_after_a_linear_warmup():
    cfg = {"name": "step", "milestones": [3, 5], "gamma": 0.1, "warmup_epochs": 1, "warmup_start_factor": 0.25}
    ours = lrs(build_scheduler(cfg, opt := sgd(), 10, 8), opt, 80)
    ramp = lrs(lr_scheduler.LinearLR(opt2 := sgd(), start_factor=0.25, total_iters=10), opt2, 10)
    plain = lrs(lr_scheduler.MultiStepLR(opt3 := sgd(), milestones=[30, 50], gamma=0.1), opt3, 80)
    assert ours[:10] == pytest.approx(ramp)  # torch's LinearLR, step for step
    assert ours[10:] == pytest.approx(plain[10:])  # then torch's MultiStepLR with milestones at epochs 3 and 5
    assert ours[29] == pytest.approx(PEAK) and ours[30] == pytest.approx(PEAK * 0.1)


def test_onecycle_is_torchs_linear_one_cycle_without_momentum_cycling():
    cfg = {"name": "onecycle", "pct_start": 0.25, "div_factor": 25.0, "final_div_factor": 1e4}
    opt = sgd()
    ours = lrs(build_scheduler(cfg, opt, 10, 4), opt, 40)
    reference = lr_scheduler.OneCycleLR(
        opt2 := sgd(), max_lr=PEAK, total_steps=40, pct_start=0.25, anneal_strategy="linear", cycle_momentum=False
    )
    assert ours == pytest.approx(lrs(reference, opt2, 40))
    assert ours[0] == pytest.approx(PEAK / 25) and max(ours) == pytest.approx(PEAK)
    assert ours[-1] == pytest.approx(PEAK / 25 / 1e4)
    assert opt.param_groups[0]["momentum"] == 0.9  # not cycled


@pytest.mark.parametrize("cfg", [
    {"name": "cosine", "warmup_epochs": 2, "warmup_start_factor": 0.01, "min_lr_ratio": 0.0},
    {"name": "step", "milestones": [3, 5], "gamma": 0.1, "warmup_epochs": 1, "warmup_start_factor": 0.01},
    {"name": "onecycle", "pct_start": 0.3, "div_factor": 25.0, "final_div_factor": 1e4},
])  # fmt: skip
def test_a_scheduler_restored_from_its_state_dict_continues_the_same_curve(cfg):
    straight = lrs(build_scheduler(cfg, opt := sgd(), 10, 8), opt, 80)
    first = build_scheduler(cfg, opt1 := sgd(), 10, 8)
    before = lrs(first, opt1, 25)  # interrupted mid-warm-up-or-decay, as a mid-epoch checkpoint is
    opt2 = sgd()
    second = build_scheduler(cfg, opt2, 10, 8)
    opt2.load_state_dict(opt1.state_dict())
    state = scheduler_state(first)  # as a checkpoint holds it: plain data
    _check_plain(state, "scheduler")
    load_scheduler_state(second, state)
    assert before + lrs(second, opt2, 55) == straight  # bit for bit


def test_the_trainer_steps_the_schedule_once_per_optimizer_step(tiny_folder, tmp_path):
    from tests.helpers.compose import compose_config
    from tests.helpers.training import read_csv, run_in_process

    # 24 images, batch 4: 6 steps per epoch, 2 epochs; every step logged with the LR it ran at.
    run_in_process(
        tiny_folder,
        tmp_path,
        "epochs=2",
        "batch_size=4",
        "log_every=1",
        "sched=cosine",
        "sched.warmup_epochs=1",
        "optim.lr=0.2",
    )
    logged = [float(row["lr"]) for row in read_csv(tmp_path / "steps.csv")]
    cfg = compose_config("train", "sched=cosine", "sched.warmup_epochs=1", "optim.lr=0.2", "batch_size=4")
    opt = build_optimizer({**cfg.optim, "weight_decay": 0.0}, nn.Linear(2, 2), 4)
    scheduler = build_scheduler(cfg.sched, opt, 6, 2)
    assert logged == pytest.approx(lrs(scheduler, opt, 12))  # one schedule step per optimizer step


def test_unknown_names_say_what_to_choose():
    with pytest.raises(ValueError, match="choose one of step, cosine, onecycle"):
        build_scheduler({"name": "poly"}, sgd(), 10, 2)
    with pytest.raises(ValueError, match="choose one of sgd, adamw, lamb"):
        build_optimizer({"name": "rmsprop", "lr": 0.1, "weight_decay": 0.0}, nn.Linear(2, 2), 256)
