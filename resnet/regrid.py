"""Re-gridding: make weights trained under one padding scheme work under another.

A stride-2 layer's padding fixes the grid its outputs sample (docs/padding.md). Weights run
under another grid see every later feature map shifted by a pixel: the BatchNorm statistics
no longer match, and the error grows (the built-in demo: 6.5% -> 16% top-1 error). Two
remedies, each on a small sample of images and little compute:

* :func:`reestimate_bn` (``method=bn``): the same weights under the new grid, their BatchNorm
  running statistics measured again on unlabelled images (a cumulative average, no gradient).
  Nothing else changes.
* :func:`distill` (``method=distill``): BN re-estimation, then a short fine-tune of every weight
  towards the source model's predictions under its own grid (the teacher; KL divergence of the
  softened outputs): no labels needed.

>>> model = with_padding(trained, "symmetric")        # the same tensors, the new grid
>>> used = reestimate_bn(model, batches, normalize)   # images used
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

Normalize = Callable[[torch.Tensor], torch.Tensor]


def batch_norms(model: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


@torch.no_grad()
def reestimate_bn(model: nn.Module, batches: Iterable[torch.Tensor], normalize: Normalize) -> int:
    """Replace every BatchNorm's running mean and variance with their averages over ``batches``
    (uint8 images [N, C, H, W], on the model's device), measured under the model's own padding;
    return how many images were used. Weights, biases and every other tensor are left as they
    are; the model is left in eval mode."""
    norms = batch_norms(model)
    if not norms:
        raise ValueError("the model has no BatchNorm layer: there is nothing to re-estimate")
    momenta = [bn.momentum for bn in norms]
    for bn in norms:
        bn.reset_running_stats()
        bn.momentum = None  # a cumulative moving average: every batch weighs the same
    was_training = model.training
    model.train()
    seen = 0
    try:
        for images in batches:
            model(normalize(images))
            seen += images.shape[0]
    finally:
        for bn, momentum in zip(norms, momenta):
            bn.momentum = momentum
        model.train(was_training)
    if seen == 0:
        raise ValueError("no image to re-estimate the BatchNorm statistics on")
    return seen


def distill(
    student: nn.Module,
    teacher: nn.Module,
    batches: Iterable[torch.Tensor],
    normalize: Normalize,
    lr: float = 1e-3,
    temperature: float = 2.0,
) -> int:
    """One pass of fine-tuning ``student`` towards ``teacher``'s softened predictions on
    ``batches`` (uint8 images), SGD with momentum, BatchNorm statistics held where they are
    (both models in eval mode: run :func:`reestimate_bn` first); return the images used.
    The teacher is not changed."""
    teacher.eval()
    student.eval()  # BN uses its (re-estimated) running statistics, and keeps them
    params = [p for p in student.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9)
    seen = 0
    for images in batches:
        x = normalize(images)
        with torch.no_grad():
            target = F.softmax(teacher(x) / temperature, dim=1)
        log_probs = F.log_softmax(student(x) / temperature, dim=1)
        loss = F.kl_div(log_probs, target, reduction="batchmean") * temperature**2
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        seen += images.shape[0]
    return seen


METHODS = ("bn", "distill")


def regrid(
    model: nn.Module,
    padding,
    method: str,
    batches: Iterable[torch.Tensor] | Callable[[], Iterable[torch.Tensor]],
    normalize: Normalize,
    epochs: int = 1,
    lr: float = 1e-3,
) -> tuple[nn.Module, dict]:
    """``model``'s weights adapted to ``padding`` (a preset name, mapping or Padding) by
    ``method`` (:data:`METHODS`) on ``batches`` (or a function that returns a fresh iterable
    of them, needed for ``epochs`` > 1); ``model`` itself is not changed. Returns the new model
    (eval mode; its meta records the new scheme) and what was done: method, images, passes."""
    import copy

    from .model import with_padding

    if method not in METHODS:
        raise ValueError(f"method={method} is not one of {', '.join(METHODS)}")
    source = model.eval()
    student = with_padding(copy.deepcopy(source), padding).eval()  # its own tensors: the source stays as it was
    fresh = batches if callable(batches) else (lambda: batches)
    report = {"method": method, "from_padding": source.meta.padding_name, "to_padding": student.meta.padding_name}
    report["bn_images"] = reestimate_bn(student, fresh(), normalize)
    report["distill_images"] = 0
    if method == "distill":
        for _ in range(epochs):
            report["distill_images"] += distill(student, source, fresh(), normalize, lr=lr)
    return student.eval(), report
