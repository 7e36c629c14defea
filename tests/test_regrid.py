"""Re-gridding (resnet/regrid.py): each method changes what it says and nothing else."""

from __future__ import annotations

import pytest
import torch

from resnet import build_model, with_padding
from resnet.regrid import batch_norms, distill, reestimate_bn, regrid

STATS = ("running_mean", "running_var", "num_batches_tracked")


def identity(x: torch.Tensor) -> torch.Tensor:
    return x.float() / 255


def trained_like(padding: str = "asymmetric", seed: int = 0) -> torch.nn.Module:
    """resnet_tiny with random weights and random, non-default BN statistics and affine terms."""
    torch.manual_seed(seed)
    model = build_model("resnet_tiny", num_classes=5, padding=padding, in_chans=3)
    for bn in batch_norms(model):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.uniform_(0.5, 1.5)
        bn.bias.data.uniform_(-0.2, 0.2)
    return model.eval()


def batches(count: int = 4, size: int = 33, seed: int = 1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (8, 3, size, size), dtype=torch.uint8, generator=g) for _ in range(count)]


def test_bn_reestimation_changes_only_the_batchnorm_statistics():
    source = trained_like()
    before = {k: v.clone() for k, v in source.state_dict().items()}
    model, report = regrid(source, "symmetric", "bn", batches(), identity)
    assert report == {"method": "bn", "from_padding": "asymmetric", "to_padding": "symmetric",
                      "bn_images": 32, "distill_images": 0}  # fmt: skip
    assert model.meta.padding_name == "symmetric" and not model.training
    after = model.state_dict()
    for key, value in before.items():
        if key.endswith(STATS):
            assert not torch.equal(after[key], value), key  # measured again
        else:
            assert torch.equal(after[key], value), key  # weights, biases: untouched
    for key, value in source.state_dict().items():  # and the source model is as it was
        assert torch.equal(value, before[key]), key


def test_bn_statistics_are_the_averages_over_the_images_under_the_new_grid():
    model = with_padding(trained_like(), "symmetric")
    seen = {}
    first = batch_norms(model)[0]
    first.register_forward_hook(lambda m, inputs, out: seen.setdefault("x", []).append(inputs[0].detach()))
    data = batches(count=3)
    assert reestimate_bn(model, data, identity) == 24
    x = torch.cat(seen["x"][:3])  # the first BN's inputs during re-estimation, every batch the same size
    per_batch = [b.transpose(0, 1).flatten(1) for b in seen["x"][:3]]
    torch.testing.assert_close(first.running_mean, x.mean(dim=(0, 2, 3)), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(first.running_var, torch.stack([p.var(dim=1) for p in per_batch]).mean(0),
                               rtol=1e-5, atol=1e-6)  # fmt: skip
    assert first.momentum == 0.1 and not model.training  # as before


def test_the_new_grid_is_what_the_statistics_see():
    """Measured under symmetric, the statistics differ from those measured under asymmetric:
    the grid is part of what is re-estimated (an even input: at odd sizes SAME pads symmetrically)."""
    a = with_padding(trained_like(), "symmetric")
    b = trained_like()  # asymmetric
    reestimate_bn(a, batches(size=32), identity)
    reestimate_bn(b, batches(size=32), identity)
    last = [bn.running_mean for bn in batch_norms(a)][-1], [bn.running_mean for bn in batch_norms(b)][-1]
    assert not torch.allclose(*last)


def test_distillation_moves_the_weights_towards_the_teacher_and_leaves_it_alone():
    source = trained_like()
    teacher_state = {k: v.clone() for k, v in source.state_dict().items()}
    data = batches(count=6)
    student, report = regrid(source, "symmetric", "distill", data, identity, epochs=3, lr=0.05)
    assert report["bn_images"] == 48 and report["distill_images"] == 144
    for key, value in source.state_dict().items():
        assert torch.equal(value, teacher_state[key]), key
    stats_after_bn = with_padding(trained_like(), "symmetric")
    reestimate_bn(stats_after_bn, data, identity)
    changed = [k for k, v in student.state_dict().items() if not k.endswith(STATS)
               and not torch.equal(v, teacher_state[k])]  # fmt: skip
    assert changed  # weights moved
    for key, value in stats_after_bn.state_dict().items():
        if key.endswith(("running_mean", "running_var")):
            assert torch.equal(student.state_dict()[key], value), key  # distillation keeps the BN statistics

    def gap(model):
        with torch.no_grad():
            x = identity(torch.cat(data))
            return torch.nn.functional.kl_div(model(x).log_softmax(1), source(x).softmax(1), reduction="batchmean")

    assert gap(student) < gap(stats_after_bn)


def test_bad_methods_and_empty_samples_are_one_line():
    with pytest.raises(ValueError, match="method=finetune is not one of bn, distill"):
        regrid(trained_like(), "symmetric", "finetune", batches(), identity)
    with pytest.raises(ValueError, match="no image to re-estimate"):
        reestimate_bn(trained_like(), [], identity)
    assert distill(trained_like(), trained_like(seed=1), [], identity) == 0
