"""Padding formulas, layers and presets against docs/padding.md, timm and hand-made references."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from timm.layers import Conv2dSame
from timm.layers.pool2d_same import MaxPool2dSame
from torch import nn

import resnet
from resnet.inspect import pad_table
from resnet.padding import (
    CONV_SCHEMES,
    POOL_PAD_VALUES,
    POOL_SCHEMES,
    PRESETS,
    Padding,
    PadMaxPool2d,
    SameConv2d,
    SameMaxPool2d,
    conv_pad,
    fixed_pad,
    freeze_padding,
    make_conv,
    make_max_pool,
    resolve_padding,
    same_pad,
)

torch.manual_seed(0)


# --- formulas ----------------------------------------------------------------------


def tf_same_reference(n: int, k: int, s: int, d: int) -> tuple[int, int]:
    """TF's definition written independently: try pads until the output is ceil(n/s)."""
    k_eff = (k - 1) * d + 1
    want = math.ceil(n / s)
    for total in range(0, k_eff + s):
        if (n + total - k_eff) // s + 1 == want and (want - 1) * s + k_eff <= n + total:
            return total // 2, total - total // 2
    raise AssertionError("no SAME pad found")


@pytest.mark.parametrize("k", [1, 3, 7])
@pytest.mark.parametrize("s", [1, 2])
@pytest.mark.parametrize("d", [1, 2])
def test_same_pad_formula(k, s, d):
    for n in range(max(1, (k - 1) * d), 40):
        before, after = same_pad(n, k, s, d)
        assert (before, after) == tf_same_reference(n, k, s, d), (n, k, s, d)
        out = (n + before + after - ((k - 1) * d + 1)) // s + 1
        assert out == math.ceil(n / s)
        assert after - before in (0, 1)  # TF puts the odd pixel after


@pytest.mark.parametrize("k", [1, 3, 7])
def test_same_pad_parity_rules(k):
    # docs/padding.md, "Convolution schemes"
    for n in range(8, 30, 2):
        assert same_pad(n, k, 2) == (max(k // 2 - 1, 0), k // 2)
    for n in range(9, 31, 2):
        assert same_pad(n, k, 2) == (k // 2, k // 2) == conv_pad("symmetric", n, k, 2) == fixed_pad(k, 2)


@pytest.mark.parametrize(
    "k, d, expected", [(7, 1, (3, 3)), (3, 1, (1, 1)), (1, 1, (0, 0)), (3, 2, (2, 2)), (4, 1, (1, 2))]
)
def test_fixed_and_symmetric_pads(k, d, expected):
    assert fixed_pad(k, 2, d) == expected
    assert conv_pad("fixed", None, k, 2, d) == expected  # no input size needed
    assert conv_pad("valid", 10, k, 2, d) == (0, 0)
    if k % 2:
        assert conv_pad("symmetric", None, k, 2, d) == expected


def caffe_pool_len(n: int, k: int = 3, s: int = 2) -> int:
    """Caffe's pool output length at pad 0 (docs/padding.md, "Pooling"): ceil, minus one if the last
    window starts past the image."""
    out = math.ceil((n - k) / s) + 1
    return out - 1 if (out - 1) * s >= n else out


def test_pool_out_sizes():
    # ResNet-50's stem pool at 112: 56 under every scheme but valid (legacy Keras ResNet50: 55)
    sizes = [make_max_pool(s)(torch.zeros(1, 1, 112, 112)).shape[-1] for s in ("symmetric", "same", "ceil", "valid")]
    assert sizes == [56, 56, 56, 55]
    for n in range(5, 40):
        assert caffe_pool_len(n) == make_max_pool("ceil")(torch.zeros(1, 1, n, n)).shape[-1]


# --- layers by value ---------------------------------------------------------------

SIZES = [(32, 32), (33, 33), (32, 35), (31, 28)]


@pytest.mark.parametrize("k, d", [(3, 1), (7, 1), (3, 2), (1, 1)])
@pytest.mark.parametrize("hw", SIZES)
def test_same_conv_equals_timm(k, d, hw):
    ours = make_conv("same", 4, 6, k, stride=2, bias=True, dilation=d)
    theirs = Conv2dSame(4, 6, k, stride=2, dilation=d, bias=True)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(2, 4, *hw)
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=1e-5)


@pytest.mark.parametrize("hw", SIZES + [(112, 112), (150, 150)])
def test_same_pool_equals_timm(hw):
    x = torch.randn(2, 3, *hw) - 2.0  # mostly negative: a zero pad would show
    expected = MaxPool2dSame(3, 2)(x)
    torch.testing.assert_close(make_max_pool("same", "-inf")(x), expected, rtol=0, atol=0)
    frozen = nn.Sequential(make_max_pool("same", "-inf"))
    freeze_padding(frozen.append(nn.Conv2d(3, 3, 1)), hw)  # a conv so it has parameters
    assert not isinstance(frozen[0], SameMaxPool2d)
    torch.testing.assert_close(frozen[0](x), expected, rtol=0, atol=0)


def caffe_pool_reference(x: torch.Tensor, k: int = 3, s: int = 2) -> torch.Tensor:
    """Caffe ceil-mode max pool with pad 0, windows clipped, written out with loops."""
    n_h, n_w = x.shape[-2:]
    out_h, out_w = caffe_pool_len(n_h, k, s), caffe_pool_len(n_w, k, s)
    y = torch.empty(*x.shape[:-2], out_h, out_w)
    for i in range(out_h):
        for j in range(out_w):
            window = x[..., i * s : min(i * s + k, n_h), j * s : min(j * s + k, n_w)]
            y[..., i, j] = window.amax(dim=(-2, -1))
    return y


@pytest.mark.parametrize("n", [10, 11, 12, 13])
def test_ceil_pool_equals_caffe_and_torch_ceil_mode(n):
    x = torch.randn(1, 2, n, n)
    ours = make_max_pool("ceil")(x)
    torch.testing.assert_close(ours, caffe_pool_reference(x), rtol=0, atol=0)
    torch.testing.assert_close(ours, F.max_pool2d(x, 3, 2, ceil_mode=True), rtol=0, atol=0)
    if n % 2 == 0:  # docs/padding.md: at even n Caffe's ceil mode is TF SAME (0, 1)
        torch.testing.assert_close(ours, make_max_pool("same")(x), rtol=0, atol=0)


@pytest.mark.parametrize("n", [14, 15])
def test_keras_pool_is_zero_pad_then_valid_pool(n):
    x = torch.randn(2, 3, n, n) - 1.0
    keras = make_max_pool("symmetric", "zero")
    assert isinstance(keras, PadMaxPool2d)
    torch.testing.assert_close(keras(x), F.max_pool2d(F.pad(x, (1, 1, 1, 1)), 3, 2), rtol=0, atol=0)
    assert not torch.equal(keras(x), make_max_pool("symmetric", "-inf")(x))  # differs on negatives
    relu_x = x.clamp(min=0)  # post-ReLU inputs (v1 stems): zero and -inf agree
    torch.testing.assert_close(keras(relu_x), make_max_pool("symmetric", "-inf")(relu_x), rtol=0, atol=0)
    same_zero = make_max_pool("same", "zero")(x)
    torch.testing.assert_close(same_zero, F.max_pool2d(F.pad(x, _same_pad4(n)), 3, 2), rtol=0, atol=0)


def _same_pad4(n: int) -> tuple[int, int, int, int]:
    b, a = same_pad(n, 3, 2)
    return (b, a, b, a)


# --- build-time decisions ----------------------------------------------------------


def _layer_types(model: nn.Module) -> set[type]:
    return {type(m) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.MaxPool2d))}


def test_static_schemes_build_plain_layers():
    assert _layer_types(resnet.build_model("resnet50", padding="symmetric")) == {nn.Conv2d, nn.MaxPool2d}
    # TF-slim's fixed pad at odd kernels is symmetric: plain layers everywhere but the SAME pool
    slim = resnet.build_model("resnet50", padding="tf_slim")
    assert [type(m) for m in slim.modules() if isinstance(m, (SameConv2d, SameMaxPool2d))] == [SameMaxPool2d]
    asym = resnet.build_model("resnet50", padding="asymmetric")
    dynamic = [n for n, m in asym.named_modules() if isinstance(m, (SameConv2d, SameMaxPool2d))]
    assert dynamic == ["conv1", "maxpool"]
    tf_same = resnet.build_model("resnet50", padding="tf_same")
    dynamic = [n for n, m in tf_same.named_modules() if isinstance(m, (SameConv2d, SameMaxPool2d))]
    assert dynamic == ["conv1", "maxpool", "layer2.0.conv2", "layer3.0.conv2", "layer4.0.conv2"]
    assert type(make_conv("same", 3, 3, 3, stride=1)) is nn.Conv2d  # SAME at stride 1 is static


def test_freeze_padding_keeps_values_and_keys():
    model = resnet.build_model("resnet18", padding="tf_same").eval()
    x = torch.randn(1, 3, 64, 64)
    expected = model(x)
    keys = set(model.state_dict())
    freeze_padding(model, 64)
    assert not any(isinstance(m, (SameConv2d, SameMaxPool2d)) for m in model.modules())
    assert set(model.state_dict()) == keys
    torch.testing.assert_close(model(x), expected, rtol=0, atol=0)
    built_frozen = resnet.build_model("resnet18", padding="tf_same", input_size=64).eval()
    built_frozen.load_state_dict(model.state_dict())
    torch.testing.assert_close(built_frozen(x), expected, rtol=0, atol=0)


def test_frozen_pool_is_fast_or_explicit():
    x = torch.randn(1, 2, 112, 112) - 1
    fast = freeze_padding(nn.Sequential(make_max_pool("same"), nn.Conv2d(2, 2, 1)), 112)[0]
    explicit = freeze_padding(nn.Sequential(make_max_pool("same"), nn.Conv2d(2, 2, 1)), 112, explicit=True)[0]
    assert type(fast) is nn.MaxPool2d and fast.ceil_mode  # no padded copy at training time
    assert isinstance(explicit, PadMaxPool2d) and explicit.pad == (0, 1, 0, 1)  # a Pad op in ONNX
    torch.testing.assert_close(fast(x), explicit(x), rtol=0, atol=0)


@pytest.mark.parametrize("arch, size", [("resnet50", 32), ("resnet_tiny", 4)])
def test_freezing_works_down_to_1x1_maps(arch, size):
    model = resnet.build_model(arch, padding="tf_same", input_size=size)
    assert model.training  # the meta pass runs in eval mode and restores the mode
    assert not any(isinstance(m, (SameConv2d, SameMaxPool2d)) for m in model.modules())


def test_frozen_same_conv_is_plain_where_symmetric():
    model = nn.Sequential(make_conv("same", 3, 4, 7, stride=2))
    freeze_padding(model, 33)  # odd: SAME is (3, 3), a plain conv
    assert type(model[0]) is nn.Conv2d and model[0].padding == (3, 3)


# --- whole models: symmetric vs asymmetric (docs/padding.md) ---------------------------


@pytest.mark.parametrize("arch", ["resnet18", "resnet_tiny_v2"])
def test_symmetric_vs_asymmetric_values(arch):
    sym = resnet.build_model(arch, num_classes=10, padding="symmetric").eval()
    state = sym.state_dict()
    for name in ("asymmetric", "tf_same"):
        other = resnet.build_model(arch, num_classes=10, padding=name).eval()
        other.load_state_dict(state)  # same keys under every preset
        even = torch.randn(2, 3, 64, 64)
        a, b = sym(even), other(even)
        assert a.shape == b.shape
        assert (a - b).abs().max() > 1e-4, "even input: SAME must sample another grid"
        # 65 -> 33 -> 17 -> 9 -> 5 -> 3: every strided layer sees an odd size, where
        # SAME equals the symmetric pad (docs/padding.md, "Convolution schemes").
        odd = torch.randn(2, 3, 65, 65)
        torch.testing.assert_close(sym(odd), other(odd), rtol=0, atol=1e-6)


# --- pad tables (docs/padding.md, "ResNet-50 at 224x224" and the 299 paragraph) ---------

SYM, SAME_EVEN = (1, 1), (0, 1)
EXPECTED_TABLES = {
    # (arch, size): {preset: [stem conv, stem pool, block convs...]}
    ("resnet50", 224): {
        "symmetric": [(3, 3), SYM, SYM, SYM, SYM],
        "asymmetric": [(2, 3), SAME_EVEN, SYM, SYM, SYM],
        "tf_same": [(2, 3), SAME_EVEN, SAME_EVEN, SAME_EVEN, SAME_EVEN],
        "tf_slim": [(3, 3), SAME_EVEN, SYM, SYM, SYM],
        "caffe": [(3, 3), SAME_EVEN, SYM, SYM, SYM],
        "keras": [(3, 3), SYM, SYM, SYM, SYM],
    },
    ("resnet50", 299): {
        "symmetric": [(3, 3), SYM, SYM, SYM, SYM],
        "asymmetric": [(3, 3), SAME_EVEN, SYM, SYM, SYM],
        "tf_same": [(3, 3), SAME_EVEN, SYM, SAME_EVEN, SYM],
        "tf_slim": [(3, 3), SAME_EVEN, SYM, SYM, SYM],
        "caffe": [(3, 3), SAME_EVEN, SYM, SYM, SYM],
        "keras": [(3, 3), SYM, SYM, SYM, SYM],
    },
}
EXPECTED_TABLES[("resnet50_v2", 224)] = EXPECTED_TABLES[("resnet50", 224)]
EXPECTED_TABLES[("resnet50_v2", 299)] = EXPECTED_TABLES[("resnet50", 299)]
EXPECTED_LAYERS = {
    "resnet50": ["conv1", "maxpool", "layer2.0.conv2", "layer3.0.conv2", "layer4.0.conv2"],
    "resnet50_v2": ["conv1", "maxpool", "layer1.2.conv2", "layer2.3.conv2", "layer3.5.conv2"],
}
EXPECTED_INPUTS = {224: [224, 112, 56, 28, 14], 299: [299, 150, 75, 38, 19]}


@pytest.mark.parametrize("arch, size", list(EXPECTED_TABLES))
@pytest.mark.parametrize("preset", list(PRESETS))
def test_pad_tables(arch, size, preset):
    rows = pad_table(resnet.build_model(arch, padding=preset), size)
    assert [r.layer for r in rows] == EXPECTED_LAYERS[arch]
    assert [r.input_size[0] for r in rows] == EXPECTED_INPUTS[size]
    assert [r.pad_h for r in rows] == EXPECTED_TABLES[(arch, size)][preset]
    assert all(r.pad_h == r.pad_w for r in rows)
    assert rows[1].value == ("zero" if preset == "keras" else "-inf")


def test_v1_padding_touches_only_the_stem():
    rows = pad_table(resnet.build_model("resnet50_v1", padding="tf_same"), 224)
    assert [r.layer for r in rows] == ["conv1", "maxpool"]  # stride on the 1x1 in v1


# --- configuration and errors ------------------------------------------------------


def test_resolve_padding_forms():
    assert resolve_padding("asymmetric") is PRESETS["asymmetric"]
    assert resolve_padding(None, native="caffe") is PRESETS["caffe"]
    mixed = resolve_padding({"preset": "symmetric", "stem_pool": "same"})
    assert mixed == Padding(stem_pool="same") and mixed.name == "symmetric[stem_pool=same]"
    assert resolve_padding({"stem_conv": "same", "stem_pool": "same"}).name == "asymmetric"
    assert resolve_padding({"stem_pool": "ceil"}).name == "caffe"  # a site override can land on a preset
    model = resnet.build_model("resnet18", padding={"stem_pool": "valid"})
    assert model.meta.padding.stem_pool == "valid" and model.meta.padding_name == "symmetric[stem_pool=valid]"


def every_padding() -> list[Padding]:
    """Every scheme the sites allow, blur included (ceil with a zero pad value has no meaning)."""
    sites = itertools.product(CONV_SCHEMES, POOL_SCHEMES, POOL_PAD_VALUES, CONV_SCHEMES, *[(False, True)] * 3)
    return [Padding(*s) for s in sites if not (s[1] == "ceil" and s[2] == "zero")]


def test_every_scheme_has_its_own_name_and_it_reads_back():
    paddings = every_padding()
    names = [p.name for p in paddings]
    pools = len(POOL_SCHEMES) * len(POOL_PAD_VALUES) - 1  # ceil pads with -inf alone
    assert len(set(names)) == len(paddings) == len(CONV_SCHEMES) ** 2 * pools * 2**3  # two never read alike
    assert all(resolve_padding(name) == p for name, p in zip(names, paddings))
    assert not any(c in name for name in names for c in " '\"")  # a shell word, a CSV cell, a W&B name
    presets = [p for p in paddings if p in PRESETS.values()]
    assert sorted(p.name for p in presets) == sorted(PRESETS)  # a preset is named by its name alone


@pytest.mark.parametrize(
    "padding, name",
    [
        (Padding("same", "symmetric", "-inf", "same"), "tf_same[stem_pool=symmetric]"),  # 1 site from tf_same
        (Padding(block_conv="same"), "symmetric[block_conv=same]"),
        (Padding(stem_conv="same"), "symmetric[stem_conv=same]"),  # as near asymmetric: the first preset wins
        (Padding("valid", "valid", "zero", "valid"), "keras[stem_conv=valid,stem_pool=valid,block_conv=valid]"),
        (Padding(stem_pool="valid", stem_conv_blur=True, block_conv_blur=True),
         "symmetric[stem_pool=valid]+blur(stem_conv,block_conv)"),
    ],
)  # fmt: skip
def test_a_per_site_name_says_what_departs_from_the_nearest_preset(padding, name):
    assert padding.name == name and resolve_padding(name) == padding
    preset, changed = padding.departures()
    assert name.startswith(preset) and all(f"{site}={scheme}" in name for site, scheme in changed.items())


def test_a_per_site_name_in_another_spelling_reads_as_the_same_scheme():
    same = resolve_padding("symmetric[block_conv=same, stem_conv=same]")  # other order, other base, spaces
    assert same == resolve_padding("tf_same[stem_pool=symmetric]") and same.name == "tf_same[stem_pool=symmetric]"
    assert resolve_padding("asymmetric[]") == PRESETS["asymmetric"]


@pytest.mark.parametrize(
    "spec, words",
    [
        ("custom", ["'custom' names no one scheme", "symmetric[stem_pool=same]"]),
        ("symmetric[stem_cnv=same]", ["'stem_cnv=same'", "the sites are stem_conv", "block_conv"]),
        ("symmetric[block_conv_blur=true]", ["the sites are", "stem_pool_value"]),  # blur: +blur(...)
        ("symmetric[stem_conv=sideways]", ["stem_conv", ", ".join(CONV_SCHEMES)]),
        ("symetric[stem_conv=same]", ["unknown padding preset 'symetric'", "asymmetric"]),
        ("asymetric", ["unknown padding preset", "asymmetric", "tf_slim"]),
        ({"stem_cnv": "same"}, ["unknown padding site", "stem_conv", "block_conv"]),
        ({"stem_conv": "sideways"}, ["stem_conv", ", ".join(CONV_SCHEMES)]),
        ({"stem_pool": "ceil", "stem_pool_value": "zero"}, ["ceil", "-inf"]),
    ],
)
def test_padding_errors_list_the_choices(spec, words):
    with pytest.raises(ValueError) as err:
        resolve_padding(spec)
    for word in words:
        assert word in str(err.value)


def test_unknown_arch_lists_choices():
    with pytest.raises(ValueError, match="resnet50.*ResNet50v2"):
        resnet.build_model("resnet51")
    assert resnet.build_model("ResNet50v2").meta.arch == "resnet50_v2"  # TensorNets alias


def test_library_misuse_of_the_padding_layers_is_one_line():
    """What the builder never makes, a caller of the library could: each is refused, not run wrongly."""
    with pytest.raises(TypeError, match="padding"):  # SAME's pad is its own: a padding of the conv's would be ignored
        resnet.padding.SameConv2d(2, 2, 3, 2, padding=1)
    conv, x = nn.Conv2d(2, 2, 3), torch.zeros(1, 2, 5, 5)
    with pytest.raises(ValueError, match="a conv cannot run on cells padded with '-inf'"):
        resnet.padding.conv_with_pads(conv, x, resnet.padding.AppliedPad(1, 1, 1, 1, "-inf"))
    with pytest.raises(ValueError, match="freeze_padding takes a model holding such layers, not a SameConv2d"):
        resnet.padding.freeze_padding(resnet.padding.SameConv2d(2, 2, 3, 2), 9)
    # an empty stage; a stage count the widths and strides disagree with; no stage at all
    for stages in [{"depths": (2, 0, 2, 2)}, {"depths": (2, 2, 2)}, {"depths": (), "widths": (), "strides": ()}]:
        with pytest.raises(ValueError, match=r"one entry per stage in each, and at least one block per stage"):
            resnet.build_model("resnet18", **stages)
