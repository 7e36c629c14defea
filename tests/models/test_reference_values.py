"""Every deep architecture that claims a reference, checked by value against that reference.

- ``resnet101_v1`` / ``resnet152_v1`` / ``resnet101_v2`` / ``resnet152_v2``: keras.applications
  ``ResNet101`` ... ``ResNet152V2`` (Keras 3, torch backend, random weights), imported through
  :func:`resnet.weights.from_keras` from a legacy HDF5 file;
- ``resnetv2_101``: timm's ``resnetv2_101`` (random weights), through :func:`resnet.weights.from_timm`;
- ``resnet200_v2``: a functional rebuild of TensorNets' ``ResNet200v2`` (tensornets/resnets.py,
  ``resnet200v2`` and ``_block2``, the port of fb.resnet.torch's pre-activation ResNet-200), and
  its conv list derived from the published description.

Tolerance, every comparison: max |ours - reference| <= TOL * max |reference|, TOL = 1e-4. Both
sides are float32 with different conv algorithms and summation orders over 100-200 layers;
measured differences are ~1e-6 of the output scale, so 1e-4 leaves a 100x margin. Features
before pooling are compared as well as logits (averaging shrinks a border error ~10x). Each
check also shows it can fail: the same weights with one padding site (or the shortcut) wrong
must miss the reference by WRONG = 100 * TOL or more.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

import resnet
from resnet.weights import from_keras, from_timm
from tests.helpers.weights import n_params, sample, save_legacy_h5

# one worker: Keras is imported, and each module fixture built, once
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.xdist_group("keras")]  # tests/conftest.py

TOL = 1e-4  # relative to max |reference|, see the module docstring
WRONG = 100 * TOL  # a wrong padding or shortcut must miss the reference by at least this much
# Random BN: identity BN would hide a swapped or missing tensor. beta, moving mean, moving
# variance ~ U(BN_STATS); gamma ~ U(gamma range), which sets how much of the input survives 100+
# layers. Chosen per initialisation so the logits stay O(1) and still depend on the input: with
# Keras's Glorot init and gamma in (0.2, 0.6) (tests/models/test_weights.py) the logits of ResNet101
# move by 2e-4 of their scale between two unrelated inputs, below any useful tolerance; with
# torch's He init and gamma near 1 a pre-activation ResNet-101 gives logits of std ~6000.
BN_STATS = ((-0.2, 0.2), (-0.2, 0.2), (0.5, 1.5))
KERAS_GAMMA = (0.8, 1.2)
TORCH_GAMMA = (0.4, 0.8)


def randomise_bn(model: nn.Module) -> nn.Module:
    """Every BN's tensors from TORCH_GAMMA and BN_STATS (torch's RNG), eval mode."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                for tensor, bounds in zip((m.weight, m.bias, m.running_mean, m.running_var), (TORCH_GAMMA, *BN_STATS)):
                    tensor.uniform_(*bounds)
    return model.eval()


def features_and_logits(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward pass of ``model``; the features are what its global average pool reads."""
    seen = []
    hook = model.avgpool.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    with torch.no_grad():
        logits = model(x)
    hook.remove()
    return seen[0], logits


def relative_diff(reference: torch.Tensor, ours: torch.Tensor) -> float:
    """max |ours - reference| / max |reference|."""
    return (ours - reference).abs().max().item() / reference.abs().max().item()


def assert_informative(logits: torch.Tensor) -> None:
    """Random deep nets can blow up or die out, and then a check could not fail. Finite and
    spread logits are necessary; that they depend on every padded site is what each test's
    control (:func:`assert_misses`) shows."""
    assert torch.isfinite(logits).all()
    assert 0.01 < logits.std().item() < 100, logits.std().item()


def assert_matches(reference: tuple[torch.Tensor, ...], ours: tuple[torch.Tensor, ...]) -> list[float]:
    """Features and logits within TOL; returns the relative differences."""
    assert_informative(reference[-1])
    diffs = [relative_diff(r, o) for r, o in zip(reference, ours, strict=True)]
    assert max(diffs) <= TOL, diffs
    return diffs


def n_tensors(model: nn.Module) -> int:
    """Parameters and BN statistics: what Keras's count_params counts."""
    return sum(v.numel() for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked"))


def assert_misses(reference: tuple[torch.Tensor, ...], wrong: nn.Module, x: torch.Tensor) -> None:
    """The control: the same weights, one site wrong, are far outside the tolerance."""
    diffs = [relative_diff(r, o) for r, o in zip(reference, features_and_logits(wrong, x), strict=True)]
    assert max(diffs) >= WRONG, diffs


# --- Keras: ResNet101/152, ResNet101V2/152V2 ----------------------------------------


@pytest.fixture(scope="module")
def keras():
    os.environ["KERAS_BACKEND"] = "torch"  # read when keras is first imported
    return pytest.importorskip("keras")


def keras_reference(keras, name: str):
    """keras.applications ``name`` with random weights, returning (features, logits).

    ``include_top=True`` fixes the input size, so the top is added here as
    keras/src/applications/resnet.py adds it: ``avg_pool`` then the ``predictions`` Dense.
    BN tensors are drawn from KERAS_GAMMA and BN_STATS, and biases get random values (Keras
    initialises them to identity and zeros, which would hide a swapped or missing tensor).
    """
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    base = getattr(keras.applications, name)(weights=None, include_top=False, input_shape=(None, None, 3))
    pooled = keras.layers.GlobalAveragePooling2D(name="avg_pool")(base.output)
    model = keras.Model(base.input, [base.output, keras.layers.Dense(1000, name="predictions")(pooled)])
    for layer in model.layers:
        arrays = layer.get_weights()
        if isinstance(layer, keras.layers.BatchNormalization):
            c = arrays[0].shape
            layer.set_weights([rng.uniform(*bounds, c) for bounds in (KERAS_GAMMA, *BN_STATS)])
        elif len(arrays) == 2:
            layer.set_weights([arrays[0], rng.normal(0, 0.05, arrays[1].shape)])
    return model


def keras_outputs(keras, model, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    features, logits = model(x.permute(0, 2, 3, 1).numpy(), training=False)  # channels last
    features = torch.from_numpy(keras.ops.convert_to_numpy(features)).permute(0, 3, 1, 2)
    return features, torch.from_numpy(keras.ops.convert_to_numpy(logits))


# (Keras name, our arch, input size, the preset that must miss).
# v1 at 64 (even: docs/padding.md asks for even sizes). Keras pads every site explicitly and
# symmetrically, so no size moves its grid; tf_same moves the stem by one pixel.
# v2 at 43 instead of the reference 299: every stride-2 site sees an input of the same parity
# as at 299 (stem conv 43 / 299 odd, stem pool 22 / 150 even, the strided last units of stages
# 1-3 on 11 / 75 odd, 6 / 38 even, 3 / 19 odd; n = 32 m - 21 keeps them all, 43 is m = 2), so
# the same pad cells are read or left unread as at 299. There the control is "symmetric": the
# stem pool pads with -inf instead of Keras's zeros, which matters because a pre-activation
# stem pool sees negatives (docs/padding.md, "Pooling").
KERAS_CASES = [
    ("ResNet101", "resnet101_v1", 64, "tf_same"),
    ("ResNet101V2", "resnet101_v2", 43, "symmetric"),
    ("ResNet152", "resnet152_v1", 64, "tf_same"),
    ("ResNet152V2", "resnet152_v2", 43, "symmetric"),
]


@pytest.mark.parametrize("name, arch, size, wrong_padding", KERAS_CASES)
def test_keras_by_value(keras, tmp_path: Path, name: str, arch: str, size: int, wrong_padding: str) -> None:
    reference_model = keras_reference(keras, name)
    model = from_keras(save_legacy_h5(reference_model, tmp_path / f"{name}.h5"), name)
    assert model.meta.arch == arch and model.meta.padding_name == "keras"
    assert n_tensors(model) == reference_model.count_params()  # Keras counts BN statistics too
    torch.manual_seed(0)
    x = sample(size)
    reference = keras_outputs(keras, reference_model, x)
    assert_matches(reference, features_and_logits(model, x))
    assert_misses(reference, resnet.with_padding(model, wrong_padding), x)


# --- timm: resnetv2_101 ----------------------------------------------------------------


def test_timm_resnetv2_101_by_value() -> None:
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    reference_model = randomise_bn(timm.create_model("resnetv2_101", pretrained=False))
    model = from_timm(reference_model.state_dict(), "resnetv2_101")
    assert model.meta.arch == "resnetv2_101" and n_params(model) == n_params(reference_model)
    x = sample(64)  # even, so tf_same pads the stem (2, 3) and (0, 1) instead of (3, 3) and (1, 1)
    with torch.no_grad():
        features = reference_model.forward_features(x)
        reference = (features, reference_model.forward_head(features))
    assert_matches(reference, features_and_logits(model, x))
    assert_misses(reference, resnet.with_padding(model, "tf_same"), x)


# --- resnet200_v2: fb.resnet.torch pre-activation ResNet-200, as TensorNets ports it -----

# The published description: bottleneck units [3, 24, 36, 3], widths 64/128/256/512 (x4 out),
# a 7x7/2 stem conv and a 3x3/2 max pool, stride 2 on the 3x3 of the first unit of stages 2-4,
# a 1x1 projection where a unit changes width or size, explicit symmetric pads k // 2
# (fb.resnet.torch models/preresnet.lua).
DEPTHS_200 = (3, 24, 36, 3)
WIDTHS_200 = (64, 128, 256, 512)
STRIDES_200 = (1, 2, 2, 2)


def resnet200_convs() -> list[tuple[int, int, int, int, int]]:
    """(in, out, kernel, stride, pad) of every conv, in the order TensorNets' ``_block2``
    runs them: the projection shortcut first, then the 1x1, 3x3 and 1x1 of the branch."""
    convs = [(3, 64, 7, 2, 3)]
    in_ch = 64
    for depth, width, stride in zip(DEPTHS_200, WIDTHS_200, STRIDES_200):
        for unit in range(depth):
            s = stride if unit == 0 else 1
            if unit == 0:
                convs.append((in_ch, 4 * width, 1, s, 0))
            convs += [(in_ch, width, 1, 1, 0), (width, width, 3, s, 1), (width, 4 * width, 1, 1, 0)]
            in_ch = 4 * width
    return convs


def tensornets_resnet200v2(state: dict[str, torch.Tensor], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """TensorNets' ``resnet200v2`` written again with torch.nn.functional, reading our tensors.

    Stem conv-BN-ReLU and a max pool padded by edge copies (≡ -inf); each unit: projection
    (conv + BN, on the raw input) in the first unit of a stage, BN-ReLU opening the branch,
    1x1 conv-BN-ReLU, 3x3/s conv-BN-ReLU, 1x1 conv, add; final BN-ReLU. BN epsilon 1e-5.
    """

    def bn(x: torch.Tensor, name: str) -> torch.Tensor:
        stats = (state[f"{name}.running_mean"], state[f"{name}.running_var"])
        return F.batch_norm(x, *stats, state[f"{name}.weight"], state[f"{name}.bias"], eps=1e-5)

    def conv(x: torch.Tensor, name: str, stride: int = 1) -> torch.Tensor:
        weight = state[f"{name}.weight"]
        return F.conv2d(x, weight, stride=stride, padding=weight.shape[-1] // 2)

    x = F.max_pool2d(F.relu(bn(conv(x, "conv1", 2), "bn1")), 3, 2, 1)
    for stage, (depth, stride) in enumerate(zip(DEPTHS_200, STRIDES_200), start=1):
        for unit in range(depth):
            p, s = f"layer{stage}.{unit}", stride if unit == 0 else 1
            shortcut = bn(conv(x, f"{p}.downsample.0", s), f"{p}.downsample.1") if unit == 0 else x
            y = F.relu(bn(x, f"{p}.bn1"))
            y = F.relu(bn(conv(y, f"{p}.conv1"), f"{p}.bn2"))
            y = F.relu(bn(conv(y, f"{p}.conv2", s), f"{p}.bn3"))
            x = shortcut + conv(y, f"{p}.conv3")
    features = F.relu(bn(x, "final_bn"))
    return features, F.linear(features.mean((2, 3)), state["fc.weight"], state["fc.bias"])


def test_resnet200_v2_layer_list() -> None:
    with torch.device("meta"):  # shapes only
        model = resnet.build_model("resnet200_v2")
        torchvision_200 = torchvision.models.resnet.ResNet(torchvision.models.resnet.Bottleneck, list(DEPTHS_200))
    assert [len(getattr(model, f"layer{i}")) for i in range(1, 5)] == list(DEPTHS_200)

    ran = []  # every conv as the forward pass runs it
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            module.register_forward_pre_hook(lambda conv, args: ran.append(conv))
    model(torch.empty(1, 3, 224, 224, device="meta"))
    described = resnet200_convs()
    assert [(c.in_channels, c.out_channels, c.kernel_size[0], c.stride[0], c.padding[0]) for c in ran] == described
    assert all(c.bias is None and c.kernel_size[0] == c.kernel_size[1] and c.padding[0] == c.padding[1] for c in ran)

    # torchvision's ResNet(Bottleneck, [3, 24, 36, 3]) is the post-activation ResNet-200 with the
    # stride on the 3x3: the same conv under every name, only the BNs sit elsewhere.
    def conv_shapes(net: nn.Module) -> dict[str, tuple]:
        return {k: (tuple(m.weight.shape), m.stride) for k, m in net.named_modules() if isinstance(m, nn.Conv2d)}

    assert conv_shapes(model) == conv_shapes(torchvision_200)

    # TensorNets' own test (tests/basics_test.py) expects 1224 variables for ResNet200v2: 203
    # convs with kernel and bias, 204 BNs with four tensors each (stem, 3 per unit, 4 projections,
    # final), the fc's two. Ours has the same convs without biases (fb.resnet.torch's ConvInit
    # drops them) and the same BNs: 64,673,960 parameters, 64,761,960 with TensorNets' biases.
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert (len(ran), len(bns)) == (203, 204) and 2 * 203 + 4 * 204 + 2 == 1224
    counted = sum(i * o * k * k for i, o, k, _, _ in described) + sum(2 * b.num_features for b in bns)
    assert n_params(model) == counted + 2048 * 1000 + 1000
    assert round(n_params(model) / 1e6) == 65  # the "65M" of TensorNets' README table


def test_resnet200_v2_by_value() -> None:
    torch.manual_seed(0)
    model = randomise_bn(resnet.build_model("resnet200_v2"))
    state = model.state_dict()
    x = sample(64)  # even: docs/padding.md's advice; the reference's pads do not depend on size
    with torch.no_grad():
        reference = tensornets_resnet200v2(state, x)
    assert_matches(reference, features_and_logits(model, x))
    # The control: the same tensors with the projection reading the pre-activated input
    # (TF-slim's and timm's block) must miss, or this check could not tell the two apart.
    with torch.device("meta"):
        preact_shortcut = resnet.build_model("resnet200_v2", block="preact")
    preact_shortcut.load_state_dict(state, assign=True)
    assert_misses(reference, preact_shortcut.eval(), x)
