"""BlurPool sites (docs/padding.md, "Anti-aliased downsampling (BlurPool)"): where the blur sits,
that it changes values but never state-dict keys or output shapes, that it equals timm's
anti-aliased ResNets by value, and that names, labels, tables and re-gridding carry it."""

from __future__ import annotations

import copy
import functools
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from timm.layers import BlurPool2d
from timm.models.resnet import BasicBlock as TimmBasicBlock
from timm.models.resnet import Bottleneck as TimmBottleneck
from timm.models.resnet import ResNet as TimmResNet
from torch import nn

import resnet
from resnet.checkpoint import load_model, save_checkpoint
from resnet.config import ConfigError, check_run_config, padding_from_config, padding_overrides
from resnet.inspect import format_pad_tables, pad_table
from resnet.padding import (
    BLUR_SITES,
    PRESETS,
    BlurMaxPool2d,
    NotABool,
    Padding,
    freeze_padding,
    resolve_padding,
)
from resnet.report.rows import latest_rows, read_rows, scheme_label
from resnet.report.tables import cross_markdown, cross_matrices, scheme_records, scheme_table, to_markdown
from tests.helpers.compose import compose_config

FIXTURE = Path(__file__).parents[1] / "fixtures" / "eval_rows.jsonl"  # results rows from before the blur sites

ALL = dict.fromkeys(BLUR_SITES, True)
SMALL = {"depths": (1, 1, 1, 1), "widths": (8, 16, 16, 16)}  # the real stem, tiny stages: milliseconds


def build(arch: str, padding, **kwargs) -> resnet.ResNet:
    return resnet.build_model(arch, 10, padding, **{**SMALL, **kwargs})


def random_bn(model: nn.Module, seed: int = 0) -> nn.Module:
    """BN statistics and affine parameters away from the identity, so every layer matters; eval mode."""
    gen = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.rand(n, generator=gen) - 0.5)
            m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(n, generator=gen) + 0.5)
            m.bias.data.copy_(torch.rand(n, generator=gen) - 0.5)
    return model.eval()


def blur_pools(model: nn.Module) -> dict[str, nn.Module]:
    return {name: m for name, m in model.named_modules() if isinstance(m, BlurPool2d)}


# --- structure: keys, where the blur sits --------------------------------------------------


@pytest.mark.parametrize("arch", ["resnet50", "resnet50_v1", "resnet50_v2", "resnet200_v2"])
def test_state_dict_keys_do_not_depend_on_blur(arch):
    with torch.device("meta"):  # shapes and names only
        plain, blurred = resnet.build_model(arch), resnet.build_model(arch, padding=ALL)
    assert blurred.meta.padding.blurred == ("stem_conv", "stem_pool", "block_conv")
    assert len(blur_pools(blurred)) == 2 + 3  # the stem conv and pool, one block per downsampling stage
    assert list(blurred.state_dict()) == list(plain.state_dict())  # the same keys, in the same order
    assert {k: v.shape for k, v in blurred.state_dict().items()} == {k: v.shape for k, v in plain.state_dict().items()}


FIRST_UNITS = ("layer2.0", "layer3.0", "layer4.0")


@pytest.mark.parametrize(
    "arch, blocks, conv",
    [
        ("resnet18", FIRST_UNITS, "conv1"),  # basic: the first 3x3
        ("resnet50", FIRST_UNITS, "conv2"),  # v1.5: the 3x3
        ("resnet50_v1", FIRST_UNITS, "conv1"),  # v1: the stride sits on the first 1x1
        ("resnet50_v2", ("layer1.2", "layer2.3", "layer3.5"), "conv2"),  # TF-slim v2: a stage's last unit
    ],
)
def test_a_blurred_site_is_its_op_at_stride_1_then_a_stride_2_blurpool(arch, blocks, conv):
    with torch.device("meta"):
        plain, model = resnet.build_model(arch), resnet.build_model(arch, padding=ALL)
    assert list(blur_pools(model)) == ["stem_aa", "maxpool.blur", *(f"{b}.aa" for b in blocks)]
    assert model.conv1.stride == (1, 1) and model.conv1.padding == (3, 3)
    assert model.stem_aa.stride == 2 and model.stem_aa.channels == 64
    assert isinstance(model.maxpool, BlurMaxPool2d) and model.maxpool.stride == 1 and model.maxpool.padding == 1
    assert model.maxpool.blur.stride == 2
    for block in blocks:
        unit = model.get_submodule(block)
        strided = getattr(unit, unit.strided_conv)
        assert unit.strided_conv == conv and strided.stride == (1, 1)
        assert getattr(plain.get_submodule(block), conv).stride == (2, 2)
        assert unit.aa.stride == 2 and unit.aa.channels == strided.out_channels
        assert unit.aa.pad_mode == "reflect" and unit.aa.filt_size == 3
        shortcut = unit.downsample[0] if isinstance(unit.downsample, nn.Sequential) else unit.downsample
        assert shortcut.stride in ((2, 2), 2)  # the projection (v2: a 1x1/2 max pool) stays strided, as timm's
    assert plain.stem_aa is None and not blur_pools(plain)


@pytest.mark.parametrize("block, arch", [(TimmBasicBlock, "resnet18"), (TimmBottleneck, "resnet50")])
def test_equals_timm_antialiased_resnet(block, arch):
    """timm's ResNet(aa_layer=BlurPool2d) (``resnetblur18`` / ``resnetblur50``) is our
    ``symmetric+blur(stem_pool,block_conv)``: its state dict loads as it is, and the logits agree."""
    torch.manual_seed(0)
    theirs = random_bn(TimmResNet(block, (1, 1, 1, 1), num_classes=10, channels=SMALL["widths"], aa_layer=BlurPool2d))
    ours = build(arch, "symmetric+blur(stem_pool,block_conv)").eval()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=1e-5)
        assert (resnet.with_padding(ours, "symmetric")(x) - theirs(x)).abs().max() > 1e-2


def test_stem_conv_blur_subsamples_after_the_stem_relu():
    torch.manual_seed(0)
    model = random_bn(build("resnet18", {"stem_conv_blur": True}))
    x = torch.randn(2, 3, 65, 65)
    seen = {}
    model.maxpool.register_forward_pre_hook(lambda m, args: seen.setdefault("in", args[0]))
    with torch.no_grad():
        model(x)
        stem = model.relu(model.bn1(F.conv2d(x, model.conv1.weight, padding=3)))  # stride 1, symmetric
        expected = BlurPool2d(64, filt_size=3, stride=2)(stem)
    torch.testing.assert_close(seen["in"], expected, rtol=0, atol=1e-6)
    assert seen["in"].shape[-1] == 33  # ceil(65 / 2), as the strided conv gives


# --- shapes and values ----------------------------------------------------------------


@functools.cache
def stage_shapes(arch: str, padding: str, size: int) -> list[tuple[int, ...]]:
    """Output shapes of the stem conv, stem pool and every stage (``padding``: a scheme's name)."""
    model = build(arch, padding).eval()
    shapes = []
    names = ["stem_aa" if model.stem_aa is not None else "conv1", "maxpool", "layer1", "layer2", "layer3", "layer4"]
    for name in names:
        model.get_submodule(name).register_forward_hook(lambda m, a, out: shapes.append(tuple(out.shape)))
    with torch.no_grad():
        model(torch.zeros(1, 3, size, size))
    return shapes


@pytest.mark.parametrize("size", [64, 65])
def test_blurred_shapes_are_the_plain_models(size):
    """A blurred site outputs ceil(n / 2), as a symmetric or SAME stride-2 op does: the shapes
    are the unblurred model's. The exception is Caffe's ceil-mode pool, which pads nothing
    (on 33 rows, from 65 px: 16 outputs, blurred 17): there the shapes are symmetric's."""
    every = ",".join(site.removesuffix("_blur") for site in BLUR_SITES)
    for preset in PRESETS:
        for sites in [site.removesuffix("_blur") for site in BLUR_SITES] + [every]:
            ceil_pool_replaced = preset == "caffe" and "stem_pool" in sites
            want = stage_shapes("resnet18", "symmetric" if ceil_pool_replaced else preset, size)
            assert stage_shapes("resnet18", f"{preset}+blur({sites})", size) == want, (preset, sites)
    for preset in ("caffe", "symmetric"):  # v1: the blurred 1x1 at stride 1
        want = stage_shapes("resnet50_v1", preset, size)
        assert stage_shapes("resnet50_v1", f"{preset}+blur(block_conv)", size) == want
    odd_pool = stage_shapes("resnet18", "caffe+blur(stem_pool)", 65)[1][-1]
    assert (stage_shapes("resnet18", "caffe", 65)[1][-1], odd_pool) == (16, 17)


@pytest.mark.parametrize("site", BLUR_SITES)
def test_blur_changes_values_not_weights(site):
    torch.manual_seed(0)
    plain = random_bn(build("resnet18", "symmetric"))
    blurred = resnet.with_padding(plain, {site: True})
    assert blurred.meta.padding_name == f"symmetric+blur({site.removesuffix('_blur')})"
    shared = blurred.state_dict()
    assert all(shared[k].data_ptr() == v.data_ptr() for k, v in plain.state_dict().items())  # the same tensors
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        a, b = plain(x), blurred(x)
        assert torch.isfinite(b).all() and (a - b).abs().max() > 1e-3  # the sampling grid moved
        torch.testing.assert_close(resnet.with_padding(blurred, "symmetric")(x), a, rtol=0, atol=0)


# --- with_padding, freeze_padding, checkpoints -----------------------------------------------


def test_with_padding_makes_the_blur_filters_beside_the_weights():
    torch.manual_seed(0)
    plain = random_bn(build("resnet50", "symmetric"))
    moved = resnet.with_padding(plain, {"preset": "symmetric", "block_conv_blur": True})
    direct = build("resnet50", "symmetric+blur(block_conv)").eval()
    direct.load_state_dict(plain.state_dict())
    assert all(not b.filt.is_meta for b in blur_pools(moved).values())
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        got = moved(x)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, direct(x), rtol=0, atol=0)
    double = resnet.with_padding(plain.double(), "symmetric+blur(block_conv)")
    assert {b.filt.dtype for b in blur_pools(double).values()} == {torch.float64}
    with torch.no_grad():
        torch.testing.assert_close(double(x.double()).float(), got, rtol=1e-4, atol=1e-4)


def test_freeze_padding_keeps_the_outputs_of_a_blurred_model():
    torch.manual_seed(0)
    model = random_bn(resnet.build_model("resnet18", padding={"preset": "tf_same", "block_conv_blur": True}))
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = model(x)
        frozen = freeze_padding(copy.deepcopy(model), 64)  # the SAME stem is still dynamic
        assert not any(type(m).__name__.startswith("Same") for m in frozen.modules())
        torch.testing.assert_close(frozen(x), expected, rtol=0, atol=0)
        everything = random_bn(resnet.build_model("resnet18", padding=ALL))
        torch.testing.assert_close(freeze_padding(copy.deepcopy(everything), 64)(x), everything(x), rtol=0, atol=0)


@pytest.mark.slow
def test_onnx_export_of_a_blurred_model(tmp_path):
    """The BlurPool's reflect pad is a constant Pad node, and onnxruntime agrees with PyTorch."""
    import onnx

    from resnet.export import check_onnx, export_onnx, static_pads

    torch.manual_seed(0)
    model = random_bn(resnet.build_model("resnet_tiny", 10, "tf_same+blur(stem_conv,block_conv)"))
    path = export_onnx(model, tmp_path / "blur.onnx", 28)
    assert sum(op == "Pad" for op, _, _ in static_pads(onnx.load(path))) >= 3  # stem_aa and two blocks' aa
    assert all(difference <= allowed for _, difference, allowed in check_onnx(path, model))


def test_a_checkpoint_records_and_restores_the_blur(tmp_path):
    torch.manual_seed(0)
    model = random_bn(build("resnet18", "asymmetric+blur(stem_pool,block_conv)"))
    path = save_checkpoint(tmp_path / "blur.pt", model)
    loaded = load_model(path)
    assert loaded.meta.padding == model.meta.padding and loaded.meta.padding_name == model.meta.padding_name
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)


# --- values, names, config -----------------------------------------------------------


@pytest.mark.parametrize("value", ["yes", 1, 0.5])
def test_a_blur_site_takes_true_or_false(value):
    with pytest.raises(NotABool) as err:
        resolve_padding({"preset": "symmetric", "block_conv_blur": value})
    message = str(err.value)
    assert "\n" not in message and "block_conv_blur" in message and "true or false" in message
    with pytest.raises(ValueError, match="stem_pool_blur must be true or false"):
        Padding(stem_pool_blur="true")  # the dataclass itself takes bools only
    assert resolve_padding({"block_conv_blur": "True"}).block_conv_blur is True  # a quoted value
    assert resolve_padding({"preset": "keras+blur(block_conv)", "block_conv_blur": "false"}) == PRESETS["keras"]


def test_names_read_back():
    assert all(p.name == name and not p.blurred for name, p in PRESETS.items())  # unchanged
    assert replace(PRESETS["tf_same"], block_conv_blur=True).name == "tf_same+blur(block_conv)"
    assert Padding(**ALL).name == "symmetric+blur(stem_conv,stem_pool,block_conv)"  # site order
    assert Padding(stem_pool="valid", block_conv_blur=True).name == "symmetric[stem_pool=valid]+blur(block_conv)"
    for preset in PRESETS.values():
        for sites in (("block_conv",), ("stem_conv", "stem_pool"), ("stem_conv", "stem_pool", "block_conv")):
            padding = replace(preset, **{f"{site}_blur": True for site in sites})
            assert resolve_padding(padding.name) == padding and padding.blurred == sites
    with pytest.raises(ValueError, match="unknown blur site.*'stem'.*stem_conv, stem_pool, block_conv"):
        resolve_padding("symmetric+blur(stem)")
    with pytest.raises(ValueError, match="unknown padding preset 'symetric'"):
        resolve_padding("symetric+blur(block_conv)")
    # files keep an unblurred scheme's four sites, as before the blur sites: old readers read them
    assert PRESETS["tf_same"].as_dict() == {
        "stem_conv": "same",
        "stem_pool": "same",
        "stem_pool_value": "-inf",
        "block_conv": "same",
    }
    assert Padding(block_conv_blur=True).as_dict()["block_conv_blur"] is True


def test_config_sites_and_overrides():
    cfg = compose_config("train", "+padding=symmetric", "+padding.block_conv_blur=true")
    assert resolve_padding(padding_from_config(cfg)).name == "symmetric+blur(block_conv)"
    cfg = compose_config("train", *padding_overrides("tf_slim+blur(stem_pool,block_conv)"))
    assert resolve_padding(padding_from_config(cfg)) == replace(
        PRESETS["tf_slim"], stem_pool_blur=True, block_conv_blur=True
    )
    assert padding_overrides("caffe") == ["+padding=caffe"]
    with pytest.raises(
        ConfigError,
        match=r"padding.stem_conv_blur must be true or false, not 'yes' "
        r"\(e.g. \+\+padding.stem_conv_blur=true\)",
    ):
        check_run_config(compose_config("train", "+padding=symmetric", "+padding.stem_conv_blur=yes"))


def test_inspect_shows_the_blur_per_site():
    with torch.device("meta"):
        rows = pad_table(build("resnet50_v1", "caffe+blur(block_conv)").eval(), 64)
    assert [(r.site, r.kind) for r in rows] == [("conv1", "conv"), ("maxpool", "pool")] + [
        (f"layer{i}.0.conv1", "blur") for i in (2, 3, 4)
    ]
    assert rows[2].layer == "layer2.0.aa" and rows[2].stride == 2 and rows[2].value == "reflect"
    text = format_pad_tables("resnet_tiny", [28], ["symmetric", "symmetric+blur(stem_conv,block_conv)"])
    assert "| conv1 | 3/2 | 28 | (1, 1) | blur (1, 1) reflect |" in text
    assert "| layer2.0.conv1 | 3/2 | 14 | (1, 1) | blur (1, 1) reflect |" in text


# --- result rows and tables --------------------------------------------------------------


def result_row(trained: str, evaluated: str, top1: float, **padding_extra) -> dict:
    padding = resolve_padding(evaluated)
    return {
        "arch": "resnet_small",
        "weights": f"runs/{trained}/last.pt",
        "weights_source": "checkpoint",
        "trained_padding": trained,
        "padding_name": padding.name,
        "padding": {**padding.as_dict(), **padding_extra},
        "input_size": 28,
        "resize": 28,
        "crop": 28,
        "interpolation": "bilinear",
        "preprocessing": "torch",
        "crops": 1,
        "dataset": "fashion_mnist",
        "top1_err": top1,
        "top5_err": 1.0,
        "n_images": 10000,
        "date": "2025-02-01T00:00:00+00:00",
        "git_commit": "0" * 12,
    }


def test_blurred_schemes_are_rows_and_columns_of_their_own():
    blur = "symmetric+blur(block_conv)"
    rows = [
        result_row(t, e, top1)
        for (t, e), top1 in {
            ("symmetric", "symmetric"): 10.0,
            ("symmetric", blur): 12.0,
            (blur, "symmetric"): 13.0,
            (blur, blur): 9.0,
        }.items()
    ]
    custom = {**result_row("symmetric", "symmetric", 15.0), "padding_name": "custom"}
    custom["padding"] = {**Padding(stem_pool="same", block_conv_blur=True).as_dict()}
    rows.append(custom)
    per_site = "symmetric[stem_pool=same]+blur(block_conv)"
    assert scheme_label(custom) == per_site  # a row of before per-site names: named from its sites

    (matrix,) = cross_matrices(rows)
    assert matrix.trained == ["symmetric", blur]
    assert matrix.evaluated == ["symmetric", blur, per_site]
    assert matrix.cell(blur, blur) == 9.0 and matrix.cell("symmetric", blur) == 12.0 and matrix.matched(blur, blur)
    text = cross_markdown([matrix])
    assert f"| trained with \\ evaluated with | symmetric | {blur} |" in text
    assert f"| {blur} | 13.000 | **9.000** |" in text

    table = scheme_table(rows, schemes=["symmetric", blur])
    columns, records = scheme_records(table)
    markdown = to_markdown(columns, records)
    assert f"{blur} Top-1" in markdown and "symmetric Top-1" in markdown
    assert f"Δ Top-1 ({blur} − symmetric)" in columns


def test_old_rows_still_read_label_and_deduplicate():
    rows = read_rows(FIXTURE)
    assert all(set(r["padding"]) <= {"stem_conv", "stem_pool", "stem_pool_value", "block_conv"} for r in rows)
    labels = {scheme_label(r) for r in rows}
    assert "symmetric" in labels and all("blur" not in label for label in labels)
    # the same evaluation written again with the blur sites spelled out (off) replaces the old row
    old = rows[0]
    again = {
        **old,
        "padding": {**old["padding"], **dict.fromkeys(BLUR_SITES, False)},
        "top1_err": 1.0,
        "date": "2030-01-01T00:00:00+00:00",
    }
    (kept,) = latest_rows([old, again])
    assert kept["top1_err"] == 1.0 and scheme_label(kept) == scheme_label(old)
