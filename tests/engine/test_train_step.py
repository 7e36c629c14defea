"""One training step on its own (resnet.engine.loop.train_step), against the same step written out
by hand with torch: normalise, forward, backward, SGD, schedule."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from data import Normalize
from resnet import build_model
from resnet.engine.loop import StepContext, train_step
from resnet.runtime.device import Runtime

NUM_CLASSES = 5


def tiny(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return build_model("resnet_tiny", num_classes=NUM_CLASSES)


def batch(n: int = 4, size: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=generator)
    return images, torch.randint(0, NUM_CLASSES, (n,), generator=generator)


def sgd(model: nn.Module) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5**step)


def context(**options) -> StepContext:
    options = {"loss_fn": nn.CrossEntropyLoss(), **options}
    options = {"on_nonfinite": "stop", "log_every": 50, **options}
    return StepContext(runtime=Runtime.local(), normalize=Normalize("torch"), progress=False, **options)


def test_a_step_is_the_plain_torch_step():
    images, labels = batch()
    model, reference = tiny(), tiny()
    optimizer, scheduler = sgd(model)
    ref_optimizer, ref_scheduler = sgd(reference)

    done = train_step(model, images, labels, optimizer, scheduler, context(), step=0)

    ref_optimizer.zero_grad()
    ref_loss = nn.functional.cross_entropy(reference(Normalize("torch")(images)), labels)
    ref_loss.backward()
    ref_optimizer.step()
    ref_scheduler.step()
    assert done.taken and done.images == 4 and done.lr == pytest.approx(0.1)
    assert done.loss.item() == pytest.approx(ref_loss.item(), rel=1e-6)
    for (name, p), q in zip(model.state_dict().items(), reference.state_dict().values()):
        torch.testing.assert_close(p, q, msg=name)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)  # the schedule stepped once


def test_on_loss_sees_the_loss_before_the_backward_and_each_step_draws_its_preset():
    images, labels = batch()
    model = tiny()
    optimizer, scheduler = sgd(model)
    seen, steps = [], []

    def on_loss(loss):
        seen.append((loss.requires_grad, any(p.grad is not None for p in model.parameters())))

    ctx = context(before_step=steps.append)
    train_step(model, images, labels, optimizer, scheduler, ctx, step=7, on_loss=on_loss)
    assert seen == [(False, False)]  # detached, and no gradient yet: called between forward and backward
    assert steps == [7]


def test_a_nonfinite_loss_under_skip_takes_no_step():
    images, labels = batch()
    model = tiny()
    before = copy.deepcopy(model.state_dict())
    optimizer, scheduler = sgd(model)
    ctx = context(on_nonfinite="skip", loss_fn=lambda logits, y: nn.functional.cross_entropy(logits, y) * float("nan"))
    done = train_step(model, images, labels, optimizer, scheduler, ctx, step=0)
    assert not done.taken and done.lr is None and done.host_loss != done.host_loss  # NaN, read on the host
    assert all(p.grad is None for p in model.parameters())
    params = dict(model.named_parameters())
    for name, value in before.items():
        if name in params:  # BN's running statistics moved in the forward; no weight did
            torch.testing.assert_close(params[name].detach(), value, msg=name)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.1)  # nor did the schedule


def test_the_ema_is_updated_every_ema_every_steps_at_the_decay_to_that_power():
    from timm.utils import ModelEmaV3

    images, labels = batch()
    decay, every = 0.9, 4
    model = tiny()
    start = copy.deepcopy(model)
    optimizer, scheduler = sgd(model)
    ema = ModelEmaV3(model, decay=decay**every)
    ctx = context(ema=ema, ema_every=every)
    expected = {k: v.clone() for k, v in start.state_dict().items() if v.is_floating_point()}
    for step in range(8):
        train_step(model, images, labels, optimizer, scheduler, ctx, step=step)
        if step in (3, 7):  # after the 4th and the 8th step
            for name, value in model.state_dict().items():
                if name in expected:
                    expected[name] = decay**every * expected[name] + (1 - decay**every) * value
    for name, value in ema.module.state_dict().items():
        if name in expected:
            torch.testing.assert_close(value, expected[name], msg=name)
