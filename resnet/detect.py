"""Which padding preset were these weights trained with? Ask a few hundred labelled images.

Weights of unknown origin run best under the sampling grid they were trained on
(docs/padding.md: a mismatched stem costs 0.3-0.7 points of top-1 on ImageNet).
:func:`detect_padding` runs the same weights under every preset of
:data:`resnet.padding.PRESETS` (:func:`resnet.with_padding`), scores each with the
evaluation loop on the images and ranks them by mean cross-entropy, each with its margin
over the best and that margin's standard error (of the per-image differences: the same
images score every preset, so the comparison is paired).

Presets that pad every stride-2 layer identically at this input size (equal
:func:`resnet.inspect.pad_table`: the same amounts and modes, as each layer reports them through
:func:`resnet.padding.layer_pad`; at odd sizes SAME is symmetric, so many collapse) are one
group, evaluated once. Groups whose logits still agree on every image (a zero-padded max
pool after a ReLU equals a -inf one) are merged too. Presets in one group are reported as
indistinguishable, never picked between. The command is ``resnet-detect`` (:mod:`resnet.cli.detect`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .evaluation.loop import evaluate
from .grid import use_preset_norms
from .inspect import pad_table
from .model import build_model, with_padding
from .padding import PRESETS
from .report.console import format_table
from .runtime.device import Runtime

SAME_LOGITS_ATOL = 1e-5  # relative to the largest |logit|: float32 noise, not a padding difference
CLEAR_MARGIN = 2.0  # standard errors: a runner-up closer than this is within noise (~95 %, one-sided)


@dataclass(frozen=True)
class SchemeScore:
    """One group of presets that this model cannot tell apart at this input size."""

    presets: tuple[str, ...]
    loss: float  # mean cross-entropy over the images: the primary score, smooth with few images
    top1_err: float  # in %
    margin: float = 0.0  # loss minus the best group's loss (nats); 0 for the best
    margin_se: float = 0.0  # standard error of that margin, from the per-image differences


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
        return self.scores[1].margin if len(self.scores) > 1 else None

    @property
    def indistinguishable(self) -> bool:
        """True when all presets give this model the same outputs at this input size."""
        return len(self.scores) == 1

    @property
    def within_noise(self) -> bool:
        """True when the runner-up trails the best by less than :data:`CLEAR_MARGIN` standard
        errors: these images cannot tell the two apart (more images might)."""
        return not self.indistinguishable and self.scores[1].margin < CLEAR_MARGIN * self.scores[1].margin_se

    def verdict(self) -> str:
        """One line that says what the ranking shows, and what it cannot."""
        best, listed = " = ".join(self.best.presets), ", ".join(self.best.presets)
        if self.indistinguishable:
            return f"all presets are indistinguishable here ({listed}): use an even size"
        runner_up = self.scores[1]
        margin = f"{runner_up.margin:.4f} ± {runner_up.margin_se:.4f} nats"
        if self.within_noise:
            return (
                f"the top is indistinguishable: {best} leads {' = '.join(runner_up.presets)} by only {margin} "
                f"(under {CLEAR_MARGIN:g} s.e.) on {self.n_images} images; run again with more images"
            )
        strength = runner_up.margin / runner_up.margin_se if runner_up.margin_se > 0 else math.inf
        line = f"best fit: {best}, margin {margin} ({strength:.1f} s.e.) over the runner-up"
        if len(self.best.presets) > 1:
            line += f"; {listed} give identical outputs at this size, so no images can tell them apart"
        return line

    def __str__(self) -> str:
        head = f"padding detection: {self.arch} at {self.input_size}x{self.input_size}, {self.n_images} images"
        rows = [
            {
                "rank": rank,
                "presets (identical outputs)": ", ".join(s.presets),
                "mean CE": f"{s.loss:.4f}",
                "margin ± s.e. (nats)": "best" if rank == 1 else f"{s.margin:.4f} ± {s.margin_se:.4f}",
                "top-1 err %": f"{s.top1_err:.2f}",
            }
            for rank, s in enumerate(self.scores, 1)
        ]
        return "\n".join([head, format_table(rows), self.verdict()])

    def as_dict(self) -> dict:
        """Plain data for JSON: the ranking best first, each group with its rank."""
        ranking = [{"rank": rank, **asdict(s), "presets": list(s.presets)} for rank, s in enumerate(self.scores, 1)]
        for row in ranking:
            row["margin_se"] = row["margin_se"] if math.isfinite(row["margin_se"]) else None
        return {
            "arch": self.arch,
            "input_size": self.input_size,
            "n_images": self.n_images,
            "best": list(self.best.presets),
            "indistinguishable": self.indistinguishable,
            "within_noise": self.within_noise,
            "verdict": self.verdict(),
            "ranking": ranking,
        }


def preset_groups(model: nn.Module, input_size: int) -> list[tuple[str, ...]]:
    """Presets grouped by the pad table they give ``model``'s architecture at ``input_size``: a
    pad of the same amounts in another mode (zeros, -inf, a reflection) is another group."""
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
    *,
    num_classes: int | None = None,
    progress: bool = False,
    preset_norms: Mapping[str, Mapping[str, torch.Tensor]] | None = None,
) -> DetectionReport:
    """Score ``model``'s weights under every preset on ``batches`` of (uint8 images, labels).

    ``model`` must come from :func:`resnet.build_model` (or an importer / checkpoint loader),
    so that ``model.meta`` names its architecture. ``batches`` is read once; images must be
    ``input_size`` square, on any device (they are moved to the model's). ``num_classes``:
    the data's classes, so that a head with one more (TF-slim's background) has it dropped.
    ``progress``: a progress bar per preset group. ``preset_norms``: a grid model's BatchNorm
    entries per preset (:attr:`resnet.weights.LoadedWeights.preset_norms`): each preset of the
    grid is scored with its own, as ``eval.py +padding=<preset>`` runs it.
    """
    meta = getattr(model, "meta", None)
    if meta is None:
        raise ValueError("detect_padding needs a model built by resnet.build_model (it reads model.meta.arch)")
    batches = list(batches)  # the caller's iterable is read once; every group scores the same images
    for batch in batches:
        if tuple(batch[0].shape[-2:]) != (input_size, input_size):
            raise ValueError(f"images are {tuple(batch[0].shape[-2:])}, but input_size={input_size}")
        if batch[1].dim() != 1:
            raise ValueError("detect_padding needs one class label per image (not sets of labels)")
    runtime = Runtime.local(next(model.parameters()).device)
    groups = preset_groups(model, input_size)
    norms = preset_norms or {}
    options = dict(num_classes=num_classes, keep_scores=True, progress=progress)
    results = []
    for i, group in enumerate(groups, 1):
        chosen = use_preset_norms(with_padding(model, next((p for p in group if p in norms), group[0])), norms)
        results.append(evaluate(chosen, batches, runtime, normalize, desc=f"preset group {i}/{len(groups)}", **options))
    n_images = results[0].n_images
    if n_images == 0:
        raise ValueError("no images: batches was empty")
    same = [[_same_outputs(a.scores, b.scores) for b in results] for a in results]

    merged_groups, merged = [], set()  # (presets, index of the result that scores them)
    for a in range(len(groups)):
        if a in merged:
            continue
        members = [b for b in range(a, len(groups)) if b == a or (same[a][b] and b not in merged)]
        merged.update(members)
        merged_groups.append((tuple(p for p in PRESETS if any(p in groups[b] for b in members)), a))
    merged_groups.sort(key=lambda group: (results[group[1]].loss, results[group[1]].top1_err))
    if any(math.isnan(results[a].loss) for _, a in merged_groups):
        raise ValueError("a preset gave NaN logits; check the weights and the normalisation")

    labels = torch.cat([batch[1].cpu() for batch in batches])
    per_image = {a: F.cross_entropy(results[a].scores, labels, reduction="none").double() for _, a in merged_groups}
    best = merged_groups[0][1]
    scores = []
    for presets, a in merged_groups:
        difference = per_image[a] - per_image[best]  # paired: the same images under both
        se = difference.std().item() / math.sqrt(n_images) if n_images > 1 else math.inf
        r = results[a]
        scores.append(SchemeScore(presets, r.loss, r.top1_err, r.loss - results[best].loss, 0.0 if a == best else se))
    return DetectionReport(meta.arch, input_size, n_images, tuple(scores))


def _same_outputs(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal up to float32 noise, relative to the largest |score|."""
    scale = max(a.abs().max().item(), 1.0)
    return (a - b).abs().max().item() <= SAME_LOGITS_ATOL * scale
