"""A training epoch's named totals (resnet/engine/totals.py): summed by name in one tensor, carried
through a mid-epoch checkpoint by name, NaN where an older checkpoint lacks one."""

from __future__ import annotations

import math

import torch

from resnet.engine import totals
from resnet.engine.loop import EpochStats
from resnet.runtime.distributed import DistEnv

ALONE = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


def test_sums_are_read_back_by_name_and_made_into_the_metrics():
    step = totals.StepOutput(
        logits=torch.tensor([[2.0, 1.0, 0.0], [0.0, 1.0, 2.0]]),
        targets=torch.tensor([0, 1]),
        loss=torch.tensor(0.5),
        images=2,
    )
    sums = totals.Totals(torch.device("cpu"))
    sums.add(totals.step_sums(step))
    sums.add(totals.step_sums(step))
    assert sums.read() == {"loss_sum": 2.0, "correct1": 2.0}
    summed = sums.summed({"images": 4, "skipped_images": 1, "unused_images": 0}, ALONE)
    assert summed == {"loss_sum": 2.0, "correct1": 2.0, "images": 4.0, "skipped_images": 1.0, "unused_images": 0.0}
    metrics = totals.train_metrics(summed, seconds=2.0)
    assert metrics == {"loss": 0.5, "top1_err": 50.0, "images_per_s": 2.0}
    row = {f"train_{k}": v for k, v in metrics.items()}
    assert totals.epoch_line_parts(row) == ["train loss (epoch mean) 0.5000", "train top-1 err 50.00%", "2 img/s"]


def test_soft_targets_count_their_heaviest_class():
    step = totals.StepOutput(
        logits=torch.tensor([[2.0, 1.0], [2.0, 1.0]]),
        targets=torch.tensor([[0.7, 0.3], [0.4, 0.6]]),
        loss=torch.tensor(1.0),
        images=2,
    )
    assert totals.step_sums(step)["correct1"].item() == 1


def test_a_checkpoint_carries_the_sums_by_name_and_a_missing_one_is_nan():
    stats = EpochStats(sums={"loss_sum": 1.5, "correct1": 3.0}, images=4, batches=2)
    state = stats.state()
    assert state["loss_sum"] == 1.5 and state["correct1"] == 3.0  # the names older checkpoints have (loss_sum)
    assert EpochStats.from_state(state).sums == {"loss_sum": 1.5, "correct1": 3.0}
    older = EpochStats.from_state({"batches": 3, "loss_sum": 1.5, "images": 6})  # before correct1 was summed
    resumed = totals.Totals(torch.device("cpu"), older.sums).read()
    assert resumed["loss_sum"] == 1.5 and math.isnan(resumed["correct1"])
