"""Which padding preset were these weights trained with? Ask a few hundred labelled images.

Weights of unknown origin run best under the sampling grid they were trained on
(docs/padding.md: a mismatched stem costs 0.3-0.7 points of top-1 on ImageNet).
:func:`detect_padding` runs the same weights under every preset of
:data:`resnet.padding.PRESETS` (:func:`resnet.with_padding`), scores each with the
evaluation loop on the images and reports the best fit and its margin over the runner-up.

Presets that pad every stride-2 layer identically at this input size (equal
:func:`resnet.inspect.pad_table`; at odd sizes SAME is symmetric, so many collapse) are one
group, evaluated once. Groups whose logits still agree on every image (a zero-padded max
pool after a ReLU equals a -inf one) are merged too. Presets in one group are reported as
indistinguishable, never picked between.

>>> report = detect_padding(model, loader, Normalize(model.meta.preprocessing), input_size=224)
>>> print(report)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

from .config import Runtime
from .evaluation.loop import evaluate
from .inspect import pad_table
from .model import build_model, with_padding
from .padding import PRESETS

SAME_LOGITS_ATOL = 1e-5  # relative to the largest |logit|: float32 noise, not a padding difference


@dataclass(frozen=True)
class SchemeScore:
    """One group of presets that this model cannot tell apart at this input size."""

    presets: tuple[str, ...]
    loss: float  # mean cross-entropy over the images: the primary score, smooth with few images
    top1_err: float  # in %


@dataclass(frozen=True)
class DetectionReport:
    arch: str
    input_size: int
    n_images: int
    scores: tuple[SchemeScore, ...]  # best first (lowest loss)

    @property
    def best(self) -> SchemeScore:
        return self.scores[0]

    @property
    def margin(self) -> float | None:
        """Runner-up loss minus best loss; None when every preset is the same at this size."""
        return self.scores[1].loss - self.scores[0].loss if len(self.scores) > 1 else None

    @property
    def indistinguishable(self) -> bool:
        """True when all presets give this model the same outputs at this input size."""
        return len(self.scores) == 1

    def __str__(self) -> str:
        head = f"padding detection: {self.arch} at {self.input_size}x{self.input_size}, {self.n_images} images"
        if self.indistinguishable:
            return f"{head}\nall presets are indistinguishable here ({', '.join(self.best.presets)}): use an even size"
        lines = [head, "| presets (indistinguishable within a row) | mean CE | top-1 err (%) |", "|---|---:|---:|"]
        lines += [f"| {', '.join(s.presets)} | {s.loss:.4f} | {s.top1_err:.2f} |" for s in self.scores]
        lines.append(f"best fit: {' = '.join(self.best.presets)}, margin {self.margin:.4f} nats over the runner-up")
        return "\n".join(lines)


def preset_groups(model: nn.Module, input_size: int) -> list[tuple[str, ...]]:
    """Presets grouped by the pad table they give ``model``'s architecture at ``input_size``."""
    meta = model.meta
    tables: dict[tuple, list[str]] = {}
    for name in PRESETS:
        with torch.device("meta"):  # pad tables need shapes only: a fresh build, no weights
            candidate = build_model(meta.arch, meta.num_classes, name, **meta.build_kwargs())
        # eval mode: the pad table's 1-image probe would break train-mode BN at 1x1
        tables.setdefault(tuple(pad_table(candidate.eval(), input_size)), []).append(name)
    return [tuple(names) for names in tables.values()]


def detect_padding(
    model: nn.Module,
    batches: Iterable,
    normalize: Callable[[torch.Tensor], torch.Tensor],
    input_size: int,
) -> DetectionReport:
    """Score ``model``'s weights under every preset on ``batches`` of (uint8 images, labels).

    ``model`` must come from :func:`resnet.build_model` (or an importer / checkpoint loader),
    so that ``model.meta`` names its architecture. ``batches`` is read once; images must be
    ``input_size`` square, on any device (they are moved to the model's).
    """
    meta = getattr(model, "meta", None)
    if meta is None:
        raise ValueError("detect_padding needs a model built by resnet.build_model (it reads model.meta.arch)")
    batches = list(batches)  # the caller's iterable is read once; every group scores the same images
    for batch in batches:
        if tuple(batch[0].shape[-2:]) != (input_size, input_size):
            raise ValueError(f"images are {tuple(batch[0].shape[-2:])}, but input_size={input_size}")
    runtime = Runtime.local(next(model.parameters()).device)
    groups = preset_groups(model, input_size)
    results = [
        evaluate(with_padding(model, group[0]), batches, runtime, normalize, keep_scores=True, progress=False)
        for group in groups
    ]
    n_images = results[0].n_images
    if n_images == 0:
        raise ValueError("no images: batches was empty")
    same = [[_same_outputs(a.scores, b.scores) for b in results] for a in results]

    scores, merged = [], set()
    for a in range(len(groups)):
        if a in merged:
            continue
        members = [b for b in range(a, len(groups)) if b == a or (same[a][b] and b not in merged)]
        merged.update(members)
        presets = tuple(p for p in PRESETS if any(p in groups[b] for b in members))
        scores.append(SchemeScore(presets, results[a].loss, results[a].top1_err))
    scores.sort(key=lambda s: (s.loss, s.top1_err))
    if any(math.isnan(s.loss) for s in scores):
        raise ValueError("a preset gave NaN logits; check the weights and the normalisation")
    return DetectionReport(meta.arch, input_size, n_images, tuple(scores))


def _same_outputs(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal up to float32 noise, relative to the largest |score|."""
    scale = max(a.abs().max().item(), 1.0)
    return (a - b).abs().max().item() <= SAME_LOGITS_ATOL * scale
