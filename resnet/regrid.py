"""Re-gridding: make weights trained under one padding scheme work under another.

A stride-2 layer's padding fixes the grid its outputs sample (docs/padding.md). Weights run
under another grid see every later feature map shifted by a pixel: the BatchNorm statistics
no longer match, and the error grows (the built-in demo: 7.7% -> 18.7% top-1 error). Two
remedies, each on a small sample of images and little compute:

* :func:`reestimate_bn` (``method=bn``): the same weights under the new grid, their BatchNorm
  running statistics measured again on unlabelled images (a cumulative average, no gradient).
  Nothing else changes.
* :func:`distill` (``method=distill``): BN re-estimation, then a short fine-tune of every weight
  towards the source model's predictions under its own grid (the teacher; KL divergence of the
  softened outputs, a one-cycle LR): no labels needed.

>>> model = with_padding(trained, "symmetric")        # the same tensors, the new grid
>>> used = reestimate_bn(model, batches, normalize)   # images used

The command, ``resnet-regrid`` (:mod:`resnet.cli.regrid`, ``configs/regrid.yaml``), re-grids
the weights ``weights=`` names on a sample of training images and saves a checkpoint.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .model import with_padding

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
    batches: Sequence[torch.Tensor],
    normalize: Normalize,
    lr: float = 0.01,
    temperature: float = 2.0,
    epochs: int = 1,
    seed: int = 0,
    augment: int = 0,
    features: float = 0.0,
) -> int:
    """``epochs`` passes of fine-tuning ``student`` towards ``teacher``'s softened predictions on
    the images of ``batches`` (uint8), reshuffled each pass (seeded): SGD with momentum 0.9, the
    LR one-cycle (:func:`one_cycle`), BatchNorm statistics held where they are (both models in
    eval mode: run :func:`reestimate_bn` first). Without ``augment`` the teacher sees each image
    once: its predictions are computed before the first step and reused. ``augment`` > 0: each
    step's images are the training augmentation of Fashion-MNIST (zero-pad by ``augment`` pixels,
    random crop, random horizontal flip; seeded), the teacher run on the same augmented images.
    ``features`` > 0 adds that weight x the mean squared difference of the globally pooled
    features (the classifier's input; spatially pooled, so the grids' one-pixel shift does not
    misalign them). The images are gathered on the CPU and each batch moved to the models'
    device, so the device holds no second copy of the sample. Returns the images used
    (images x passes); the teacher is not changed."""
    teacher.eval()
    student.eval()  # BN uses its (re-estimated) running statistics, and keeps them
    if not batches:
        return 0
    device = batches[0].device
    images = torch.cat([x.cpu() for x in batches])
    size, count = batches[0].shape[0], images.shape[0]
    if augment:
        from data.transforms import random_crop_flip  # data is imported only where a method needs it
    with _pooled(teacher) as teacher_pooled, _pooled(student) as student_pooled:
        targets = pooled = None
        if not augment:
            with torch.no_grad():
                logits = [teacher(normalize(x)) for x in batches]
                pooled = torch.cat(teacher_pooled) if features else None
                teacher_pooled.clear()
                targets = torch.cat([F.softmax(z / temperature, dim=1) for z in logits])
        params = [p for p in student.parameters() if p.requires_grad]
        optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, one_cycle(epochs * -(-count // size)))
        order = torch.Generator().manual_seed(seed)
        for _ in range(epochs):
            for chosen in torch.randperm(count, generator=order).split(size):
                x = images[chosen]
                if augment:
                    x = random_crop_flip(x, augment, generator=order).to(device, non_blocking=True)
                    with torch.no_grad():
                        target = F.softmax(teacher(normalize(x)) / temperature, dim=1)
                        target_pooled = teacher_pooled.pop()
                else:
                    x = x.to(device, non_blocking=True)
                    index = chosen.to(device)
                    target = targets[index]
                    target_pooled = pooled[index] if features else None
                    teacher_pooled.clear()
                log_probs = F.log_softmax(student(normalize(x)) / temperature, dim=1)
                loss = F.kl_div(log_probs, target, reduction="batchmean") * temperature**2
                if features:
                    loss = loss + features * F.mse_loss(student_pooled[-1], target_pooled)
                student_pooled.clear()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                schedule.step()
    return count * epochs


@contextlib.contextmanager
def _pooled(model: nn.Module):
    """A list that each forward of ``model`` appends its pooled features to (the input of its
    classifier ``fc``), while inside the block."""
    seen: list[torch.Tensor] = []
    handle = model.fc.register_forward_pre_hook(lambda module, args: seen.append(args[0].flatten(1)))
    try:
        yield seen
    finally:
        handle.remove()


def one_cycle(steps: int, warm_up: float = 0.15) -> Callable[[int], float]:
    """The LR factor of each of ``steps`` steps: up linearly to 1 over the first ``warm_up`` of
    them (at least one step, the last of which runs at the peak), then down linearly so that the
    last step still learns (1 / (steps after the peak + 1) of the peak). One step: the peak."""
    warm = max(1, round(warm_up * steps))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return (steps - step) / (steps - warm + 1)

    return factor


METHODS = ("bn", "distill")


def regrid(
    model: nn.Module,
    padding,
    method: str,
    batches: Sequence[torch.Tensor],
    normalize: Normalize,
    epochs: int = 1,
    lr: float = 0.01,
    **distill_options,
) -> tuple[nn.Module, dict]:
    """``model``'s weights adapted to ``padding`` (a preset name, mapping or Padding) by
    ``method`` (:data:`METHODS`) on ``batches`` (uint8 images, read ``epochs`` times by
    ``distill``); ``model`` itself is not changed. Returns the new model (eval mode; its meta
    records the new scheme) and what was done: method, schemes, images per stage.
    ``distill_options``: :func:`distill`'s ``temperature``, ``seed``, ``augment``, ``features``."""
    if method not in METHODS:
        raise ValueError(f"method={method} is not one of {', '.join(METHODS)}")
    source = model.eval()
    student = with_padding(copy.deepcopy(source), padding).eval()  # its own tensors: the source stays as it was
    report = {"method": method, "from_padding": source.meta.padding_name, "to_padding": student.meta.padding_name}
    report["bn_images"] = reestimate_bn(student, batches, normalize)
    distilled = 0
    if method == "distill":
        distilled = distill(student, source, batches, normalize, lr, epochs=epochs, **distill_options)
    report["distill_images"] = distilled
    return student.eval(), report


if __name__ == "__main__":  # python -m resnet.regrid, kept for old scripts: the command is resnet/cli/regrid.py
    import runpy

    runpy.run_module("resnet.cli.regrid", run_name="__main__", alter_sys=True)  # as python -m resnet.cli.regrid
