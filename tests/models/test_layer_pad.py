"""What a layer reports it pads (resnet.padding.layer_pad) is what it applies: its output equals its
op, unpadded, run on the input padded by hand (F.pad) as reported, at odd and even sizes. The grid
keeps each layer's mode, and refuses one a conv cannot run on."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import resnet
import resnet.grid
from resnet.grid import GridConv2d, GridMaxPool2d, make_grid, set_grid
from resnet.inspect import pad_table
from resnet.padding import (
    CONV_SCHEMES,
    POOL_PAD_VALUES,
    POOL_SCHEMES,
    AppliedPad,
    PadConv2d,
    freeze_padding,
    is_blur_pool,
    layer_pad,
    make_conv,
    make_max_pool,
)

SIZES = [(14, 14), (15, 15), (16, 17), (17, 14)]  # even, odd, and each mixed
HAND_PAD = {"zero": {"value": 0.0}, "-inf": {"value": -math.inf}, "reflect": {"mode": "reflect"},
            "replicate": {"mode": "replicate"}, "circular": {"mode": "circular"}}  # fmt: skip


def padded(x: torch.Tensor, pad: AppliedPad) -> torch.Tensor:
    return F.pad(x, (pad.left, pad.right, pad.top, pad.bottom), **HAND_PAD[pad.mode])


def by_hand(layer: nn.Module, x: torch.Tensor, pad: AppliedPad | None = None) -> torch.Tensor:
    """``layer``'s op with no padding of its own, on ``x`` padded by ``pad`` (default: as the layer reports)."""
    pad = pad or layer_pad(layer, tuple(x.shape[-2:]))
    if is_blur_pool(layer):
        return F.conv2d(padded(x, pad), layer.filt, stride=layer.stride, groups=x.shape[1])
    if isinstance(layer, nn.Conv2d):
        return F.conv2d(padded(x, pad), layer.weight, layer.bias, layer.stride, 0, layer.dilation, layer.groups)
    pool = layer.variants[layer.active] if isinstance(layer, GridMaxPool2d) else layer
    out = F.max_pool2d(padded(x, pad), pool.kernel_size, pool.stride)
    return pool.blur(out) if hasattr(pool, "blur") else out  # BlurMaxPool2d: its stride-1 pool, then its blur


def assert_applies_what_it_reports(layer: nn.Module, hw: tuple[int, int], channels: int = 2) -> None:
    x = torch.randn(2, channels, *hw, dtype=torch.float64)  # negative cells: a -inf and a zero pad differ
    with torch.no_grad():
        torch.testing.assert_close(layer(x), by_hand(layer, x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("hw", SIZES)
@pytest.mark.parametrize("k", [1, 3, 7])
@pytest.mark.parametrize("scheme", CONV_SCHEMES)
def test_each_conv_scheme_applies_what_it_reports(scheme, k, hw):
    conv = make_conv(scheme, 2, 3, k, 2).double()
    assert_applies_what_it_reports(conv, hw)
    frozen = freeze_padding(nn.Sequential(conv), hw)[0]  # the static layer of this size reports the same
    assert layer_pad(frozen, hw) == layer_pad(conv, hw)


@pytest.mark.parametrize("hw", SIZES)
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_a_torch_conv_reports_its_padding_mode(mode, hw):
    conv = nn.Conv2d(2, 3, 3, 2, padding=1, padding_mode=mode).double()
    assert layer_pad(conv, hw).mode == mode
    assert_applies_what_it_reports(conv, hw)


@pytest.mark.parametrize("hw", SIZES)
@pytest.mark.parametrize("blur", [False, True])
@pytest.mark.parametrize(
    "scheme, value",
    [(scheme, value) for scheme in POOL_SCHEMES for value in POOL_PAD_VALUES if (scheme, value) != ("ceil", "zero")],
)  # ceil clips: no pad value
def test_each_pool_scheme_applies_what_it_reports(scheme, value, blur, hw):
    pool = make_max_pool(scheme, value, blur=blur, channels=2).double()
    pad = layer_pad(pool, hw)
    assert pad.mode == value or pad == AppliedPad(0, 0, 0, 0, "-inf")  # a pool that pads nothing: torch's own
    assert_applies_what_it_reports(pool, hw)
    if blur:
        assert_applies_what_it_reports(pool.blur, hw)


@pytest.mark.parametrize("hw", SIZES)
@pytest.mark.parametrize("padding", [0, 1])
def test_a_ceil_mode_pool_reports_the_cells_its_windows_read_past_the_image(padding, hw):
    pool = nn.MaxPool2d(3, 2, padding=padding, ceil_mode=True)
    assert_applies_what_it_reports(pool, hw)
    pad, x = layer_pad(pool, hw), torch.randn(1, 1, *hw)
    if pad.bottom > pad.top:  # the last window reads past the image: one cell less, and it is gone
        assert by_hand(pool, x, replace(pad, bottom=pad.bottom - 1)).shape[-2] == pool(x).shape[-2] - 1


def inputs_and_outputs(model: nn.Module, names: list[str], x: torch.Tensor) -> dict[str, tuple]:
    """(input, output) of each named layer of ``model`` in one forward of ``x``."""
    seen: dict[str, tuple] = {}

    def record(name: str):
        def hook(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
            seen.setdefault(name, (args[0], out))

        return hook

    hooks = [model.get_submodule(name).register_forward_hook(record(name)) for name in names]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


@pytest.mark.parametrize("scheme", ["symmetric", "symmetric+blur(stem_conv,stem_pool,block_conv)", *resnet.PRESETS])
@pytest.mark.parametrize("arch", ["resnet_tiny", "resnet_tiny_v2", "resnet50_v1"])
def test_every_strided_layer_of_a_model_applies_what_its_pad_table_row_says(arch, scheme):
    """Each row of resnet-inspect's table (what detect compares) against the layer's real output."""
    torch.manual_seed(0)
    model = resnet.build_model(arch, num_classes=3, padding=scheme).double().eval()
    for size in (32, 33):
        rows = pad_table(model, size)
        seen = inputs_and_outputs(model, [row.layer for row in rows], torch.randn(1, 3, size, size).double())
        for row in rows:
            x, out = seen[row.layer]
            assert row.input_size == tuple(x.shape[-2:])
            with torch.no_grad():
                claimed = by_hand(model.get_submodule(row.layer), x, AppliedPad.of(row.pad_h, row.pad_w, row.value))
            torch.testing.assert_close(out, claimed, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("hw", SIZES)
def test_grid_layers_apply_what_they_report_under_each_preset(hw):
    presets = ["symmetric", "asymmetric", "tf_same", "tf_slim", "caffe"]
    model = make_grid(resnet.build_model("resnet18", padding=presets[0]).double(), presets)  # with a stem pool
    for index in range(len(presets)):
        set_grid(model, index)
        assert_applies_what_it_reports(model.conv1, hw, channels=3)
        assert_applies_what_it_reports(model.maxpool, hw, channels=model.conv1.out_channels)


def test_a_grid_models_pad_table_is_that_of_a_model_built_under_the_active_preset():
    presets = ["symmetric", "asymmetric", "tf_same", "tf_slim", "caffe"]
    with torch.device("meta"):
        grid = make_grid(resnet.build_model("resnet50_v2", padding=presets[0]), presets)
    for preset in presets:
        set_grid(grid, preset)
        with torch.device("meta"):
            plain = resnet.build_model("resnet50_v2", padding=preset)
        pads = [[(r.input_size, r.pad_h, r.pad_w, r.value) for r in pad_table(m.eval(), 64)] for m in (grid, plain)]
        assert pads[0] == pads[1], preset


def _make_conv_with(scheme: str, layer: type[nn.Conv2d], **kwargs):
    """resnet.padding.make_conv with one more scheme, as a new scheme would add it there."""

    def make(name: str, *args, **options) -> nn.Conv2d:
        if name != scheme:
            return make_conv(name, *args, **options)
        in_ch, out_ch, k, stride, groups = args
        return layer(in_ch, out_ch, k, stride, groups=groups, dilation=options.get("dilation", 1), **kwargs)

    return make


def test_a_grid_conv_pads_with_its_schemes_mode_not_zeros(monkeypatch):
    monkeypatch.setattr(
        resnet.grid, "make_conv", _make_conv_with("reflect", nn.Conv2d, padding=3, padding_mode="reflect")
    )
    torch.manual_seed(0)
    stem = make_conv("symmetric", 3, 4, 7, 2)
    grid = GridConv2d.like(stem, ["symmetric", "reflect"])
    reflect = nn.Conv2d(3, 4, 7, 2, padding=3, padding_mode="reflect", bias=False)
    reflect.weight = stem.weight
    x = torch.randn(1, 3, 16, 16)
    grid.active = 1
    assert layer_pad(grid, (16, 16)) == AppliedPad(3, 3, 3, 3, "reflect")
    with torch.no_grad():
        assert torch.equal(grid(x), reflect(x))
        assert not torch.equal(grid(x), stem(x))  # not zeros
        grid.active = 0
        assert torch.equal(grid(x), stem(x))


class NegInfConv(PadConv2d):
    """A conv that says it pads with -inf: nothing a conv can run on."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, pad=(1, 1, 1, 1), **kwargs)

    def applied_pad(self, input_hw):
        return AppliedPad.from_f_pad(self.pad, "-inf")


def test_a_grid_refuses_a_scheme_whose_mode_a_conv_cannot_run_on(monkeypatch):
    monkeypatch.setattr(resnet.grid, "make_conv", _make_conv_with("holes", NegInfConv))
    with pytest.raises(ValueError, match="a grid conv cannot hold the 'holes' scheme: its layer pads with '-inf'"):
        GridConv2d.like(make_conv("symmetric", 3, 4, 3, 2), ["symmetric", "holes"])


def test_a_mode_outside_the_vocabulary_and_a_module_that_does_not_pad_are_refused():
    with pytest.raises(ValueError, match="unknown pad mode 'symmetric'; the modes are zero, -inf, reflect"):
        AppliedPad(1, 1, 1, 1, "symmetric")  # TF's tf.pad SYMMETRIC: F.pad has no such mode
    with pytest.raises(TypeError, match="ReLU is not a padding layer"):
        layer_pad(nn.ReLU(), (8, 8))


def test_the_pad_table_tells_a_reflected_stem_from_a_zero_padded_one():
    """detect groups presets by their pad tables: the same amounts in another mode are another group."""
    plain = resnet.build_model("resnet_tiny", padding="symmetric").eval()
    reflected = resnet.build_model("resnet_tiny", padding="symmetric").eval()
    conv = plain.conv1
    reflected.conv1 = nn.Conv2d(
        conv.in_channels,
        conv.out_channels,
        conv.kernel_size,
        conv.stride,
        padding=conv.padding,
        bias=False,
        padding_mode="reflect",
    )
    ours, theirs = pad_table(plain, 32), pad_table(reflected, 32)
    assert [r.value for r in theirs] == ["reflect"] + [r.value for r in ours[1:]]
    assert ours[0].pad_h == theirs[0].pad_h and ours != theirs
