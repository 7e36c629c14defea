"""Re-gridding (resnet/regrid.py): each method changes what it says and nothing else."""

from __future__ import annotations

import re

import pytest
import torch

from resnet import build_model, with_padding
from resnet.regrid import batch_norms, distill, one_cycle, reestimate_bn, regrid

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


def test_distillation_asks_the_teacher_once_per_image_and_its_seeded_passes_repeat_exactly():
    data = batches(count=3)
    calls = []
    teacher = trained_like()
    teacher.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    students = []
    for _ in range(2):
        student = with_padding(trained_like(), "symmetric")
        assert distill(student, teacher, data, identity, lr=0.05, epochs=3, seed=7) == 72
        students.append(student.state_dict())
    assert calls == [8, 8, 8] * 2  # every image once per distillation, whatever the passes
    assert all(torch.equal(v, students[1][k]) for k, v in students[0].items())
    other = with_padding(trained_like(), "symmetric")
    distill(other, teacher, data, identity, lr=0.05, epochs=3, seed=8)  # another order of the same images
    assert not all(torch.equal(v, students[0][k]) for k, v in other.state_dict().items())


@pytest.mark.parametrize("steps", [1, 2, 7, 20, 333])
def test_the_distillation_schedule_peaks_once_and_every_step_learns(steps):
    factors = [one_cycle(steps)(i) for i in range(steps)]
    peak = factors.index(1.0)
    assert max(factors) == 1.0 and peak == max(1, round(0.15 * steps)) - 1
    assert factors[: peak + 1] == sorted(factors[: peak + 1]) and factors[peak:] == sorted(factors[peak:], reverse=True)
    assert min(factors) > 0  # the last step too


def test_bad_methods_and_empty_samples_are_one_line():
    with pytest.raises(ValueError, match="method=finetune is not one of bn, distill"):
        regrid(trained_like(), "symmetric", "finetune", batches(), identity)
    with pytest.raises(ValueError, match="no image to re-estimate"):
        reestimate_bn(trained_like(), [], identity)
    assert distill(trained_like(), trained_like(seed=1), [], identity) == 0


# --- resnet-regrid --------------------------------------------------------------------------------


def regrid_command(*overrides: str) -> dict:
    from resnet.cli.regrid import run
    from tests.helpers.compose import compose_config

    return run(compose_config("regrid", *overrides))


@pytest.fixture(scope="module")
def torchvision_file(tmp_path_factory):
    """Imported weights: torchvision's own ResNet-18 (random weights, 3 classes), saved as a state dict,
    and an image folder with a training split."""
    import torchvision

    from tests.helpers.imagegen import make_folder

    root = tmp_path_factory.mktemp("regrid")
    make_folder(root / "train", {"a": 6, "b": 6, "c": 6}, size=(72, 64))
    make_folder(root / "val", {"a": 2, "b": 2, "c": 2}, size=(72, 64))
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet18(num_classes=3).state_dict(), root / "resnet18.pth")
    return root


def folder(root, *extra: str) -> list[str]:
    return [f"weights=torchvision:{root / 'resnet18.pth'}", "model=resnet18", "data=imagefolder",
            f"data.root={root}", "data.num_classes=3", "data.workers=0", "device=cpu", "crop=64", "resize=72",
            *extra]  # fmt: skip


@pytest.mark.parametrize("method", ["bn", "distill"])
def test_the_command_regrids_imported_weights_and_records_where_they_came_from(torchvision_file, tmp_path, method):
    from resnet.checkpoint import load_checkpoint, load_model

    out = tmp_path / "sub" / "regridded.pt"
    report = regrid_command(*folder(torchvision_file, "+padding=asymmetric", f"method={method}", "images=12",
                                    "batch_size=4", f"out={out}"))  # fmt: skip
    assert report["images"] == 12 and report["from_padding"] == "symmetric" and report["to_padding"] == "asymmetric"
    saved = load_checkpoint(out)
    assert saved["meta"]["padding_name"] == "asymmetric" and saved["meta"]["arch"] == "resnet18"
    assert saved["regrid"]["method"] == method and saved["regrid"]["from"].startswith("torchvision:")
    assert saved["regrid"]["split"] == "train" and saved["regrid"]["seconds"] >= 0
    model = load_model(out)  # runs natively under the new grid
    assert model.meta.padding_name == "asymmetric"
    source = torch.load(torchvision_file / "resnet18.pth")
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, source[k])}
    assert changed and all(k.endswith(STATS) for k in changed) == (method == "bn")


def test_the_command_regrids_timm_weights(torchvision_file, tmp_path):
    # timm's resnet18 (random weights) saved as safetensors: read by the timm importer, re-gridded.
    import timm
    from safetensors.torch import save_file

    from resnet.checkpoint import load_checkpoint

    torch.manual_seed(0)
    save_file(timm.create_model("resnet18", num_classes=3).state_dict(), tmp_path / "resnet18.safetensors")
    out = tmp_path / "regridded.pt"
    args = [o for o in folder(torchvision_file) if not o.startswith("weights=")]
    report = regrid_command(f"weights=timm:{tmp_path / 'resnet18.safetensors'}", *args, "+padding=asymmetric",
                            "method=bn", "images=8", "batch_size=4", f"out={out}")  # fmt: skip
    assert (report["from_padding"], report["to_padding"], report["images"]) == ("symmetric", "asymmetric", 8)
    saved = load_checkpoint(out)
    assert saved["meta"]["padding_name"] == "asymmetric" and saved["regrid"]["from"].startswith("timm:")


@pytest.mark.parametrize(
    "extra, message",
    [
        ((), "say which grid to move the weights to: +padding=<preset>"),
        (("+padding=symmetric",), "is already under symmetric: pass the grid to move to, e.g. +padding=asymmetric or"),
        (("+padding=asymmetric", "method=finetune"), "method=finetune: expected one of bn, distill, e.g. method=bn"),
        (("+padding=asymmetric", "images=0"), "images=0: expected a whole number >= 1, e.g. images=512"),
        (("+padding=asymmetric", "lr=-1"), "lr=-1: expected a number > 0, e.g. lr=0.01"),
        (("+padding=asymmetric", "features=-1"), "features=-1: expected a number >= 0, e.g. features=3.0"),
    ],
)
def test_bad_command_values_are_one_line(torchvision_file, tmp_path, extra, message):
    from resnet.config import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        regrid_command(*folder(torchvision_file, f"out={tmp_path / 'x.pt'}", *extra))
    assert "\n" not in str(caught.value) and not (tmp_path / "x.pt").exists()


def test_out_must_be_a_pt_file(torchvision_file, tmp_path):
    from resnet.config import ConfigError

    with pytest.raises(ConfigError, match=r"out=.*x.json must name a .pt file, e.g. out=regridded.pt"):
        regrid_command(*folder(torchvision_file, "+padding=asymmetric", f"out={tmp_path / 'x.json'}"))


def test_the_command_line_prints_one_line_for_a_bad_value(tmp_path):
    import sys

    from tests.helpers import procs

    args = [sys.executable, "-m", "resnet.cli.regrid", f"weights={tmp_path / 'none.pt'}", "+padding=symmetric",
            f"out={tmp_path / 'o.pt'}"]  # fmt: skip
    proc = procs.run(args, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr  # missing weights: status 1, as eval.py
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("resnet-regrid: no checkpoint at") and "none.pt" in line


def _student_after(seed: int, **options) -> dict:
    teacher = trained_like()
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    student = with_padding(trained_like(), "symmetric")
    distill(student, teacher, batches(count=3), identity, lr=0.05, epochs=2, seed=seed, **options)
    assert all(torch.equal(v, before[k]) for k, v in teacher.state_dict().items())  # the teacher is untouched
    return student.state_dict()


def _same(a: dict, b: dict) -> bool:
    return all(torch.equal(v, b[k]) for k, v in a.items())


def test_augmented_distillation_is_seeded_and_differs_from_plain():
    augmented = _student_after(7, augment=2)
    assert _same(augmented, _student_after(7, augment=2))  # the crops and flips are drawn from the seed
    assert not _same(augmented, _student_after(8, augment=2))
    assert not _same(augmented, _student_after(7))  # the augmentation is applied


def test_augmented_distillation_asks_the_teacher_for_every_augmented_batch():
    teacher, calls = trained_like(), []
    teacher.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    distill(with_padding(trained_like(), "symmetric"), teacher, batches(count=3), identity, epochs=2, augment=2)
    assert calls == [8] * 6  # the augmented images differ every pass: the teacher sees each


def test_feature_matching_adds_a_term_and_leaves_no_hook_behind():
    matched = _student_after(7, features=1.0)
    assert not _same(matched, _student_after(7))
    teacher, student = trained_like(), with_padding(trained_like(), "symmetric")
    distill(student, teacher, batches(count=2), identity, features=1.0)
    for model in (teacher, student):
        assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_feature_matching_compares_every_stage_output_per_channel_scale():
    """The term is, per stage, the squared difference over the teacher's channel variance,
    averaged per stage mean, summed over the stages: zero for equal outputs, and unchanged when
    a stage's outputs are all scaled alike."""
    from resnet.regrid import _stage_distance, stages

    model = trained_like()
    assert [name for name, m in model.named_children() if any(m is s for s in stages(model))] == [
        f"layer{i}" for i in range(1, len(stages(model)) + 1)
    ]
    gen = torch.Generator().manual_seed(0)
    teacher = [torch.randn(4, c, 6, 6, generator=gen) for c in (3, 5)]
    student = [t + 0.5 * torch.randn(t.shape, generator=gen) for t in teacher]
    assert float(_stage_distance(teacher, teacher)) == 0
    expected = sum(((s - t) ** 2).mean() / t.var(dim=(0, 2, 3)).mean() for s, t in zip(student, teacher))
    assert torch.allclose(_stage_distance(student, teacher), expected, rtol=1e-4)
    scaled = _stage_distance([10 * s for s in student], [10 * t for t in teacher])
    assert torch.allclose(scaled, expected, rtol=1e-4)


def test_regrid_passes_the_distillation_options_on():
    source, data = trained_like(), batches(count=3)
    plain, _ = regrid(source, "symmetric", "distill", data, identity, lr=0.05)
    hotter, _ = regrid(source, "symmetric", "distill", data, identity, lr=0.05, temperature=4.0)
    assert not _same(plain.state_dict(), hotter.state_dict())
