"""A training epoch's totals by name, and the train metrics made from them.

Every optimizer step adds to the sums of :data:`STEP_SUMS` on the device (nothing waits for them);
the loop counts :data:`HOST_SUMS` on the host. At the epoch's end :meth:`Totals.summed` all-reduces
all of them at once, as one float64 tensor, and :func:`train_metrics` makes :data:`TRAIN_METRICS`
from them, each reported as ``train_<name>`` (how to add one: docs/code_map.md, "How to add a
metric"). A sum's name must not be a field of ``EpochStats``: the two share the checkpoint's record
of a partial epoch. A sum that an older checkpoint lacks starts the resumed epoch as NaN, so its
metric reads NaN for that epoch rather than a wrong number.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from ..evaluation.loop import topk_correct
from ..runtime.distributed import DistEnv, all_reduce_sum

EPOCH_LOSS = "train loss (epoch mean)"  # the epoch line's; the bar's is the mean so far (loop.RUNNING_LOSS)


@dataclass(frozen=True)
class StepOutput:
    """What one optimizer step gives its sums: the logits and the batch's mean loss (detached), the
    targets the loss saw (class indices [N], or soft targets [N, K] under mixup/cutmix) and the images."""

    logits: torch.Tensor
    targets: torch.Tensor
    loss: torch.Tensor
    images: int

    @property
    def classes(self) -> torch.Tensor:
        """The class of each image: its label, or under mixup/cutmix the heaviest class of its target."""
        return self.targets if self.targets.dim() == 1 else self.targets.argmax(dim=1)


@dataclass(frozen=True)
class StepSum:
    """A sum over the epoch's steps: ``of(step)`` is a scalar tensor on the device, added in ``dtype``."""

    of: Callable[[StepOutput], torch.Tensor]
    dtype: torch.dtype = torch.float64


# name -> what each step adds to it, on the device
STEP_SUMS: dict[str, StepSum] = {
    # float32, as the loss has always been summed: the logged loss keeps its digits
    "loss_sum": StepSum(lambda s: s.loss * s.images, torch.float32),
    "correct1": StepSum(lambda s: topk_correct(s.logits, s.classes, (1,))[0]),
}
# the counts the loop keeps on the host (fields of resnet.engine.loop.EpochStats), summed with them
HOST_SUMS = ("images", "skipped_images", "unused_images")


@dataclass(frozen=True)
class TrainMetric:
    """``value(sums)``: the metric from the epoch's sums over every process (and ``seconds``, this
    process's time for the epoch); ``shown``: its part of the epoch line, a format of the value (None: not shown)."""

    value: Callable[[Mapping[str, float]], float]
    shown: str | None = None


def error(correct: float, images: float) -> float:
    """The error in %, as validation's (NaN without images)."""
    return 100.0 * (1 - correct / images) if images else math.nan


# name -> the metric: train_<name> in metrics.csv, W&B and results.json; the epoch line in this order
TRAIN_METRICS: dict[str, TrainMetric] = {
    "loss": TrainMetric(lambda t: t["loss_sum"] / max(t["images"], 1), EPOCH_LOSS + " {:.4f}"),
    "top1_err": TrainMetric(lambda t: error(t["correct1"], t["images"]), "train top-1 err {:.2f}%"),
    "images_per_s": TrainMetric(lambda t: t["images"] / t["seconds"] if t["seconds"] else 0.0, "{:.0f} img/s"),
}


def step_sums(step: StepOutput) -> dict[str, torch.Tensor]:
    """What ``step`` adds to each sum of :data:`STEP_SUMS` (device tensors)."""
    return {name: spec.of(step) for name, spec in STEP_SUMS.items()}


def train_metrics(sums: Mapping[str, float], seconds: float) -> dict[str, float]:
    """The epoch's :data:`TRAIN_METRICS` from its sums over every process."""
    totals = {**sums, "seconds": seconds}
    return {name: metric.value(totals) for name, metric in TRAIN_METRICS.items()}


def epoch_line_parts(row: Mapping) -> list[str]:
    """The epoch line's parts for the train metrics of ``row`` (``train_<name>``) that say how to be shown."""
    return [
        metric.shown.format(row[f"train_{name}"])
        for name, metric in TRAIN_METRICS.items()
        if metric.shown is not None and f"train_{name}" in row
    ]


class Totals:
    """This process's :data:`STEP_SUMS` of one epoch, on the device; ``start``: the sums an epoch
    saved mid-way had (a name it lacks starts as NaN), else none (zeros)."""

    def __init__(self, device: torch.device, start: Mapping[str, float] | None = None) -> None:
        self.sums = {
            name: torch.full((), 0.0 if start is None else start.get(name, math.nan), dtype=spec.dtype, device=device)
            for name, spec in STEP_SUMS.items()
        }

    def add(self, step: Mapping[str, torch.Tensor]) -> None:
        for name, value in step.items():
            self.sums[name] += value

    def read(self) -> dict[str, float]:
        """The sums on the host, in one read (for a checkpoint)."""
        values = torch.stack([value.double() for value in self.sums.values()]).tolist()
        return dict(zip(self.sums, values))

    def summed(self, host: Mapping[str, float], env: DistEnv) -> dict[str, float]:
        """These sums and ``host``'s numbers (:data:`HOST_SUMS`), each summed over the processes: one
        float64 tensor in the order of their names, one all-reduce, one read."""
        sums = torch.stack([value.double() for value in self.sums.values()])  # on the device: exact, no transfer
        counts = torch.tensor([float(host[name]) for name in host], dtype=torch.float64, device=sums.device)
        return dict(zip([*self.sums, *host], all_reduce_sum(torch.cat([sums, counts]), env).tolist()))
