"""Re-gridding: make weights trained under one padding scheme work under another.

Weights run under another grid see every later feature map shifted by a pixel, and their BatchNorm
statistics no longer match. Two remedies on a small sample of unlabelled images (docs/evaluation.md,
"Re-gridding weights to another padding scheme"): :func:`reestimate_bn` (``method=bn``) measures the
statistics again under the new grid; :func:`distill` (``method=distill``) then fine-tunes every weight
towards the source model under its own grid. The command is ``resnet-regrid`` (:mod:`resnet.cli.regrid`).
"""

from __future__ import annotations

import contextlib
import copy
import re
from collections.abc import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from data.progress import Progress, image_pass

from .model import with_padding
from .schema import choices

Normalize = Callable[[torch.Tensor], torch.Tensor]


def batch_norms(model: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


@torch.no_grad()
def reestimate_bn(
    model: nn.Module, batches: Iterable[torch.Tensor], normalize: Normalize, progress: bool = True
) -> int:
    """Replace every BatchNorm's running mean and variance with their averages over ``batches``
    (uint8 images [N, C, H, W], on the model's device), measured under the model's own padding;
    return how many images were used. Weights, biases and every other tensor are left as they
    are; the model is left in the mode it was in. ``progress``: a bar on a terminal; in a log, a line at
    the end and every :data:`data.progress.PASS_LINE_SECONDS` before it (a CPU takes
    minutes on ImageNet's sizes)."""
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
    total = sum(x.shape[0] for x in batches) if isinstance(batches, Sequence) else None
    try:
        with image_pass(total, "BN statistics", progress) as shown:
            for images in batches:
                model(normalize(images))
                seen += images.shape[0]
                shown.update(images.shape[0], images=images.shape[0])
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
    clip: float = 1.0,
    progress: bool = True,
) -> int:
    """``epochs`` passes of fine-tuning ``student`` towards ``teacher``'s softened predictions on
    the images of ``batches`` (uint8), reshuffled each pass (seeded): SGD with momentum 0.9, the
    LR one-cycle (:func:`one_cycle`), BatchNorm statistics held where they are (both models in
    eval mode: run :func:`reestimate_bn` first). Plain, the teacher sees each image once: its
    predictions are computed before the first step and reused. ``augment`` > 0: each step's
    images are the training augmentation of Fashion-MNIST (zero-pad by ``augment`` pixels, random
    crop, random horizontal flip; seeded), the teacher run on the same augmented images.
    ``features`` > 0 adds, for each stage (``layer1``, ``layer2``, ...), that weight x the mean
    squared difference between the student's output and the teacher's, over the teacher's
    variance in the batch (averaged over channels): a dense target for the layers next to the
    stride-2 sites whose grid moved (the teacher then runs on every step's images). Each step's
    gradient norm is clipped at ``clip`` (0: not clipped): the first steps, far from the
    teacher's features, would otherwise throw the weights out of reach. The images are gathered
    on the CPU and each batch moved to the models' device, so the device holds no second copy of
    the sample. ``progress``: a bar on a terminal, a line in a log (:class:`data.progress.Progress`)
    every twentieth of the steps with the loss (a 15,000-image run takes minutes on a CPU).
    Returns the images used (images x passes); the teacher is not changed."""
    teacher.eval()
    student.eval()  # BN uses its (re-estimated) running statistics, and keeps them
    if not batches:
        return 0
    device = batches[0].device
    images = torch.cat([x.cpu() for x in batches])
    size, count = batches[0].shape[0], images.shape[0]
    if augment:
        from data.transforms import random_crop_flip  # data is imported only where a method needs it
    every_step = bool(augment or features)  # the teacher's outputs are needed for each step's images
    targets = None if every_step else _soft_targets(teacher, batches, normalize, temperature, progress)
    params = [p for p in student.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9)
    order = torch.Generator().manual_seed(seed)
    steps = epochs * -(-count // size)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, one_cycle(steps))
    every = max(steps // 20, 1)  # the loss is read on the host this often: a device sync each time
    shown = Progress(steps, "distill", unit="steps", enabled=progress)
    with (shown, _stage_outputs(teacher, features) as teacher_stages,
          _stage_outputs(student, features) as student_stages):  # fmt: skip
        for _ in range(epochs):
            for chosen in torch.randperm(count, generator=order).split(size):
                x = images[chosen]
                if augment:
                    x = random_crop_flip(x, augment, generator=order)
                x = normalize(x.to(device, non_blocking=True))
                if every_step:
                    with torch.no_grad():
                        target = F.softmax(teacher(x) / temperature, dim=1)
                else:
                    target = targets[chosen.to(device)]
                log_probs = F.log_softmax(student(x) / temperature, dim=1)
                loss = F.kl_div(log_probs, target, reduction="batchmean") * temperature**2
                if features:
                    loss = loss + features * _stage_distance(student_stages, teacher_stages)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if clip:
                    torch.nn.utils.clip_grad_norm_(params, clip)
                optimizer.step()
                schedule.step()
                shown.update(1, images=len(chosen))
                if shown.n % every == 0 or shown.n == steps:
                    shown.log({"loss": f"{loss.item():.4f}", "lr": f"{schedule.get_last_lr()[0]:.3g}"})
    return count * epochs


def _soft_targets(teacher: nn.Module, batches: Sequence[torch.Tensor], normalize: Normalize, temperature: float,
                  progress: bool) -> torch.Tensor:  # fmt: skip
    """The teacher's softened outputs on every image, once (as long as a BN pass: shown too)."""
    count = sum(x.shape[0] for x in batches)
    with torch.no_grad(), image_pass(count, "teacher outputs", progress) as shown:
        outputs = []
        for x in batches:
            outputs.append(F.softmax(teacher(normalize(x)) / temperature, dim=1))
            shown.update(x.shape[0], images=x.shape[0])
    return torch.cat(outputs)


def stages(model: nn.Module) -> list[nn.Module]:
    """The model's stages (its children ``layer1``, ``layer2``, ...), in order."""
    found = [module for name, module in model.named_children() if re.fullmatch(r"layer\d+", name)]
    if not found:
        raise ValueError(f"{type(model).__name__} has no layer1, layer2, ... children to match features at")
    return found


@contextlib.contextmanager
def _stage_outputs(model: nn.Module, enabled: float):
    """A list that holds the outputs of ``model``'s :func:`stages` in its last forward (empty and
    no hook when not ``enabled``), while inside the block."""
    outputs: list[torch.Tensor] = []
    handles = []
    if enabled:
        found = stages(model)
        handles.append(found[0].register_forward_pre_hook(lambda module, args: outputs.clear()))
        handles += [stage.register_forward_hook(lambda module, args, out: outputs.append(out)) for stage in found]
    try:
        yield outputs
    finally:
        for handle in handles:
            handle.remove()


def _stage_distance(student: list[torch.Tensor], teacher: list[torch.Tensor]) -> torch.Tensor:
    """The sum over stages of the mean squared difference of their outputs, each divided by the
    teacher's variance in the batch averaged over its channels (so that every stage weighs alike,
    and a channel that barely varies does not weigh more)."""
    total = 0.0
    for s, t in zip(student, teacher, strict=True):
        scale = t.float().var(dim=(0, 2, 3)).mean() + 1e-5
        total = total + ((s.float() - t.float()) ** 2).mean() / scale
    return total


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


METHODS = choices("method")  # bn, distill


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
    ``distill_options``: :func:`distill`'s ``temperature``, ``seed``, ``augment``, ``features``,
    ``clip`` (recorded in the report)."""
    if method not in METHODS:
        raise ValueError(f"method={method} is not one of {', '.join(METHODS)}")
    source = model.eval()
    student = with_padding(copy.deepcopy(source), padding).eval()  # its own tensors: the source stays as it was
    report = {"method": method, "from_padding": source.meta.padding_name, "to_padding": student.meta.padding_name}
    report["bn_images"] = reestimate_bn(student, batches, normalize, progress=distill_options.get("progress", True))
    distilled = 0
    if method == "distill":
        distilled = distill(student, source, batches, normalize, lr, epochs=epochs, **distill_options)
        report |= {"lr": lr, "epochs": epochs, **distill_options}
    report["distill_images"] = distilled
    return student.eval(), report
