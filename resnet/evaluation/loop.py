"""The one evaluation loop: training's validation, ``eval.py``, the demo and padding detection.

A batch is ``(images, labels)`` or a :class:`data.Batch` / :class:`resnet.evaluation.loader.PaddedBatch`
(``images, labels, skipped, skipped_paths[, sizes]``), images as uint8 NCHW. Per batch:

1. move to the device (:class:`resnet.runtime.device.Runtime`);
2. the input transform ``view`` (none for training's validation; the protocol's crop for
   ``eval.py``, where 10-crop turns ``[N, C, H, W]`` into ``[N * 10, C, crop, crop]``);
3. normalise, forward under the runtime's autocast;
4. the output reduction (:func:`reduce_outputs`: crops averaged, TF-slim's background class dropped);
5. top-1 / top-5 hits and the summed cross-entropy, all-reduced over the processes' disjoint shards.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from data.progress import Progress
from data.testsets import LabelSpace

from ..runtime.device import Runtime
from ..runtime.distributed import all_reduce_sum
from .tencrop import View, average_crops


@dataclass
class Evaluation:
    """Errors in %; ``loss`` is the mean cross-entropy of the (crop-averaged) predictions."""

    top1_err: float
    top5_err: float
    loss: float
    n_images: int  # over all processes, each once
    skipped_images: int  # unreadable files the loader dropped, over all processes
    images_per_s: float
    skipped_examples: list[str] = field(default_factory=list)  # the first few of this process
    scores: torch.Tensor | None = None  # [n_images, classes] of this process, when asked for

    def metrics(self) -> dict[str, float | int]:
        """The numbers a run logs (``val_*`` columns of metrics.csv)."""
        keys = ("top1_err", "top5_err", "loss", "n_images", "skipped_images", "images_per_s")
        return {key: getattr(self, key) for key in keys}

    def unreadable_stop(self, limit: float, examples: list[str] | None = None) -> str | None:
        """:func:`unreadable_stop` of these images (the errors would be another set's: validation and
        eval.py stop on it); ``examples``: every process's, where gathered (else this process's)."""
        examples = self.skipped_examples if examples is None else examples
        return unreadable_stop(self.skipped_images, self.n_images + self.skipped_images, limit, examples)


def unreadable_stop(unreadable: int, read: int, limit: float, examples: list[str]) -> str | None:
    """``could not read 32 of its 40 images (80%, more than max_unreadable=0.05), e.g. <two examples>``
    where more than ``limit`` of the ``read`` images could not be; else None. A validation, eval.py and a
    training epoch's end all stop in these words."""
    share = unreadable_share(unreadable, read, limit)
    if share is None:
        return None
    return (
        f"could not read {unreadable:,} of its {read:,} images ({share}, more than max_unreadable={limit:g}), "
        f"e.g. {'; '.join(examples[:2])}"
    )


def unreadable_share(unreadable: int, read: int, limit: float) -> str | None:
    """The share of the ``read`` images (readable or not) that could not be read, as a stop says it
    (``51%``; ``5.1%`` where a whole percent would read as the limit itself), where it is more than
    ``limit`` (``max_unreadable``); else None."""
    if unreadable <= limit * read:
        return None
    share = unreadable / read
    return f"{share:.0%}" if round(100 * share) > 100 * limit else f"{share:.1%}"


def topk_correct(scores: torch.Tensor, labels: torch.Tensor, ks: tuple[int, ...] = (1, 5)) -> torch.Tensor:
    """How many rows have their label among the k highest scores, for each k: a tensor on
    the scores' device, so that summing it over batches waits for nothing.

    ``labels``: [N] class indices, or [N, m] sets of valid classes padded with -1 (ReaL):
    a row counts when any of its k best is in its set."""
    k_max = min(max(ks), scores.shape[1])
    top = scores.topk(k_max, dim=1).indices  # (N, k_max), best first
    targets = labels[:, None] if labels.dim() == 1 else labels
    hits = top[:, :, None].eq(targets[:, None, :]).any(dim=2)  # (N, k_max)
    return torch.stack([hits[:, : min(k, k_max)].any(dim=1).sum() for k in ks])


def reduce_outputs(logits: torch.Tensor, crops: int, num_classes: int | None) -> torch.Tensor:
    """[N * crops, K] logits, each image's crops adjacent -> [N, num_classes] scores to rank."""
    scores = average_crops(logits.float(), crops)
    if num_classes is not None and scores.shape[1] == num_classes + 1:  # TF-slim: background first
        scores = scores[:, 1:]
    return scores


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: Iterable,
    runtime: Runtime,
    normalize: Callable[[torch.Tensor], torch.Tensor],
    *,
    view: View | None = None,
    crops: int = 1,
    num_classes: int | None = None,
    labels_as: LabelSpace | None = None,
    desc: str = "eval",
    progress: bool = True,
    log_every: int = 50,
    keep_scores: bool = False,
) -> Evaluation:
    """Top-1 / top-5 error and loss of ``model`` over every image of ``loader``, all processes together.

    ``view`` makes the network input from a batch on the device (``crops`` inputs per image);
    ``num_classes``: the data's classes, to drop a background class; ``labels_as``: how a test
    set's labels meet the logits (:mod:`data.testsets`); ``keep_scores``: keep
    this process's scores in the result (detection compares them between schemes); ``progress``:
    a bar on rank 0, or a plain line every ``log_every`` batches (:mod:`data.progress`).
    """
    model.eval()
    env = runtime.env
    labels_as = labels_as.to(env.device) if labels_as is not None else None  # not a copy per batch
    sums = torch.zeros(5, dtype=torch.float64, device=env.device)  # top1, top5, loss, n, skipped
    examples: list[str] = []
    kept: list[torch.Tensor] = []
    start = time.perf_counter()
    bar = Progress(_length(loader), desc, unit="batches", every=log_every, enabled=progress and env.is_main)
    for batch in loader:
        images, labels = batch[0], batch[1]
        sums[4] += int(batch[2]) if len(batch) > 2 else 0
        if len(batch) > 3:
            examples += list(batch[3])[: max(5 - len(examples), 0)]
        if labels.numel() == 0:  # every image of the batch was unreadable
            bar.update(1)
            continue
        images, labels = runtime.to_device(images, labels)
        sizes = batch[4].to(env.device) if len(batch) > 4 else None
        x = view(images, sizes) if view is not None else images
        x = normalize(runtime.memory_format(x))  # convert the uint8 input: a quarter of the bytes
        with runtime.autocast():
            logits = model(x)
        scores = reduce_outputs(logits, crops, num_classes)
        if labels_as is not None and labels_as.logits is not None:  # ImageNet-R/A: the logits of their 200 classes
            scores = scores[:, labels_as.logits]
        if labels_as is not None and labels_as.label_sets is not None:  # ImageNet-ReaL: a row of valid classes
            labels = labels_as.label_sets[labels]
        sums[:2] += topk_correct(scores, labels)
        if labels.dim() > 1:  # sets of labels (ReaL) have no one class to score
            sums[2] += math.nan
        elif crops == 1:  # the cross-entropy of the logits, else of the mean probabilities
            sums[2] += F.cross_entropy(scores, labels, reduction="sum")
        else:
            sums[2] += F.nll_loss(scores.clamp_min(1e-12).log(), labels, reduction="sum")
        sums[3] += labels.shape[0]
        if keep_scores:
            kept.append(scores.cpu())
        bar.update(1, images=labels.shape[0] * env.world_size)  # a line's images/s: on the host, no sync
    sums = all_reduce_sum(sums, env)
    n = int(sums[3].item())
    bar.close()  # after the device has finished: the last line's rate is the real one
    seconds = time.perf_counter() - start
    return Evaluation(
        top1_err=100.0 * (1 - sums[0].item() / n) if n else math.nan,
        top5_err=100.0 * (1 - sums[1].item() / n) if n else math.nan,
        loss=sums[2].item() / n if n else math.nan,
        n_images=n,
        skipped_images=int(sums[4].item()),
        images_per_s=n / seconds if seconds else 0.0,
        skipped_examples=examples,
        scores=torch.cat(kept) if keep_scores and kept else None,
    )


def _length(loader: Iterable) -> int | None:
    """Batches in ``loader``, or None when it cannot say (an iterable dataset without a length)."""
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return None
