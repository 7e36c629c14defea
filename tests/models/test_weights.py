"""Importers by value: reference models with random weights -> resnet.weights -> equal logits.

Every reference gets random BN running stats and affine parameters: BN at its default
(mean 0, var 1, identity affine) would hide a swapped or missing tensor.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import torchvision
from torch import nn

import resnet
from resnet.padding import PRESETS
from resnet.weights import from_keras, from_timm, from_torchvision
from resnet.weights.keras import BN_EPS as KERAS_BN_EPS
from tests.helpers.weights import n_params, sample, save_legacy_h5

TOL = 1e-4  # max |logit difference|, float32

# (arch, input size): the big models run on 32 px, which is still even at every stride-2 site.
TORCHVISION_CASES = [
    ("resnet18", 64),
    ("resnet34", 64),
    ("resnet50", 64),
    ("resnet101", 64),
    ("resnet152", 32),
    ("resnext50_32x4d", 64),
    ("resnext101_32x8d", 32),
    ("resnext101_64x4d", 32),
    ("wide_resnet50_2", 64),
    ("wide_resnet101_2", 32),
]


def test_preact_stem_pool_sees_negatives() -> None:
    """Pre-activation stems (TF-slim, Keras V2, timm ResNetV2) are conv + pool, no ReLU: their
    pool sees negatives, which is where Keras's zero pad differs from -inf (docs/padding.md, "Pooling")."""
    model = resnet.build_model("resnet_tiny_v2").eval()
    seen = []
    model.maxpool.register_forward_pre_hook(lambda module, args: seen.append(args[0].min().item()))
    with torch.no_grad():
        model(torch.randn(1, 3, 32, 32))
    assert seen and seen[0] < 0


# one worker: Keras is imported, and each module fixture built, once
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.xdist_group("keras")]  # tests/conftest.py


def randomise_bn(model: nn.Module) -> nn.Module:
    """Random BN affine and running stats, kept moderate so deep nets give O(1) logits."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.2, 0.6)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return model.eval()


def max_diff(reference: torch.Tensor, ours: nn.Module, x: torch.Tensor) -> float:
    with torch.no_grad():
        return (reference - ours(x)).abs().max().item()


# --- torchvision, timm -------------------------------------------------------------


@pytest.mark.parametrize("arch, size", TORCHVISION_CASES)
def test_torchvision_by_value(arch: str, size: int) -> None:
    torch.manual_seed(0)
    reference = randomise_bn(getattr(torchvision.models, arch)())
    model = from_torchvision(reference.state_dict(), arch)
    assert model.meta.padding_name == "symmetric"
    assert n_params(model) == n_params(reference)
    x = sample(size)
    with torch.no_grad():
        logits = reference(x)
    assert max_diff(logits, model, x) <= TOL


def test_resnet50_parameter_count() -> None:
    assert n_params(resnet.build_model("resnet50")) == 25_557_032


@pytest.mark.parametrize(
    "timm_name",
    ["resnetv2_50", "resnext101_32x4d", "resnet50.a1_in1k"],
)
def test_timm_by_value(timm_name: str) -> None:
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    reference = randomise_bn(timm.create_model(timm_name.split(".")[0], pretrained=False))
    model = from_timm(reference.state_dict(), timm_name)
    assert (model.meta.source, model.meta.padding_name, model.meta.preprocessing) == ("timm", "symmetric", "torch")
    assert n_params(model) == n_params(reference)
    x = sample(64)
    with torch.no_grad():
        logits = reference(x)
        # Before pooling, too: averaging shrinks a stem difference 10x on random weights.
        features = (reference.forward_features(x) - model.forward_features(x)).abs().max().item()
    assert max_diff(logits, model, x) <= TOL and features <= TOL


# --- Keras -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keras():
    os.environ["KERAS_BACKEND"] = "torch"  # read when keras is first imported
    return pytest.importorskip("keras")


@pytest.fixture(scope="module", params=["ResNet50", "ResNet50V2"])
def keras_case(request, keras, tmp_path_factory):
    """A Keras model with random weights at 224 and the same weights at 199, saved both ways."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    build = getattr(keras.applications, request.param)
    at_224 = build(weights=None, classifier_activation=None)
    for layer in at_224.layers:
        arrays = layer.get_weights()
        if isinstance(layer, keras.layers.BatchNormalization):
            c = arrays[0].shape
            # gamma near 1: with smaller ones 16 residual units shrink every input to nearly the same
            # logits, and a wrong layer would hide under the tolerance
            layer.set_weights([rng.uniform(*r, c) for r in ((0.8, 1.2), (-0.2, 0.2), (-0.2, 0.2), (0.5, 1.5))])
        elif len(arrays) == 2:  # Keras initialises biases to zero, which would hide them
            layer.set_weights([arrays[0], rng.normal(0, 0.05, arrays[1].shape)])
    at_199 = build(weights=None, classifier_activation=None, input_shape=(199, 199, 3))
    at_199.set_weights(at_224.get_weights())
    tmp = tmp_path_factory.mktemp(request.param)
    at_224.save_weights(tmp / "model.weights.h5")
    return {
        "name": request.param,
        "models": {224: at_224, 199: at_199},
        "keras3": tmp / "model.weights.h5",
        "legacy": save_legacy_h5(at_224, tmp / "legacy.h5"),
        "tmp": tmp,
    }


def keras_logits(keras, keras_model, x: torch.Tensor) -> torch.Tensor:
    nhwc = x.permute(0, 2, 3, 1).numpy()  # the same image, channels last
    return torch.from_numpy(keras.ops.convert_to_numpy(keras_model(nhwc, training=False)))


@pytest.mark.parametrize("layout", ["keras3", "legacy"])
def test_keras_by_value(keras, keras_case, layout: str) -> None:
    model = from_keras(keras_case[layout], keras_case["name"])
    torch.manual_seed(0)
    for size, keras_model in keras_case["models"].items():  # 224 even, 199 odd
        x = sample(size)
        reference = keras_logits(keras, keras_model, x)
        tol = TOL * max(1.0, reference.abs().max().item())  # float32 over 50 layers, relative to the scale
        assert max_diff(reference, model, x) <= tol, size
        if size == 224:  # the check can fail: the stem one pixel off (TF 'SAME' on an even input) misses
            assert max_diff(reference, resnet.with_padding(model, "tf_same"), x) > 10 * tol


def test_keras_layouts_agree_and_meta(keras_case) -> None:
    from_keras3 = from_keras(keras_case["keras3"], keras_case["name"])
    from_legacy = from_keras(keras_case["legacy"], keras_case["name"])
    legacy_state = from_legacy.state_dict()
    assert all(torch.equal(v, legacy_state[k]) for k, v in from_keras3.state_dict().items())
    v2 = keras_case["name"].endswith("V2")
    meta = from_keras3.meta
    assert (meta.arch, meta.source, meta.padding_name) == ("resnet50_v2" if v2 else "resnet50_v1", "keras", "keras")
    assert meta.preprocessing == ("tf" if v2 else "caffe")
    assert meta.bn_eps == KERAS_BN_EPS == from_keras3.layer1[0].bn2.eps
    assert meta.padding.stem_pool_value == "zero" and meta.eval_size == 224
    keras_model = keras_case["models"][224]
    assert sum(v.numel() for k, v in from_keras3.state_dict().items() if "num_batches" not in k) == (
        keras_model.count_params()
    )
    keras_model.save(keras_case["tmp"] / "model.keras")  # a zip holding model.weights.h5
    archived = from_keras(keras_case["tmp"] / "model.keras", keras_case["name"]).state_dict()
    assert all(torch.equal(v, archived[k]) for k, v in from_keras3.state_dict().items())


def test_keras_without_top_and_1001_classes(keras, keras_case) -> None:
    keras_model = keras_case["models"][224]
    notop = save_legacy_h5(keras_model, keras_case["tmp"] / "notop.h5", {"predictions": None})
    with pytest.raises(ValueError, match="include_top=False.*num_classes"):
        from_keras(notop, keras_case["name"])
    backbone = from_keras(notop, keras_case["name"], num_classes=10)
    assert backbone.fc.weight.shape == (10, 2048) and backbone.meta.num_classes == 10
    assert torch.isfinite(backbone(torch.randn(1, 3, 64, 64))).all()

    kernel = np.random.default_rng(1).normal(0, 0.01, (2048, 1001)).astype(np.float32)  # TF-slim: background first
    slim_head = {"predictions": [kernel, np.zeros(1001, np.float32)]}
    model = from_keras(save_legacy_h5(keras_model, keras_case["tmp"] / "1001.h5", slim_head), keras_case["name"])
    assert model.meta.num_classes == 1001
    assert torch.equal(model.fc.weight, torch.from_numpy(kernel.T))


def test_keras_wrong_arch_names_the_right_one(keras_case) -> None:
    wrong = "resnet101_v2" if keras_case["name"].endswith("V2") else "resnet101_v1"
    with pytest.raises(ValueError, match=r"missing Keras layer.*conv4_block10_1_bn.*from_keras\(path, 'resnet50_v"):
        from_keras(keras_case["keras3"], wrong)


# --- metadata, keys, errors -------------------------------------------------------


def test_torchvision_meta_and_another_padding() -> None:
    torch.manual_seed(0)
    state = torchvision.models.resnet18().state_dict()
    model = from_torchvision(state, "resnet18")
    meta = model.meta
    assert (meta.source, meta.padding_name, meta.preprocessing) == ("torchvision", "symmetric", "torch")
    assert meta.bn_eps == 1e-5 and meta.num_classes == 1000
    assert not model.training
    assert resnet.with_padding(model, "tf_same").meta.padding_name == "tf_same"
    assert resnet.with_padding(model, "tf_same").meta.source == "torchvision"
    assert model.conv1.weight.data_ptr() != state["conv1.weight"].data_ptr()  # a copy, not a view


@pytest.mark.parametrize("arch", ["resnet50", "resnet50_v1", "resnet50_v2"])
def test_state_dict_keys_never_depend_on_padding(arch: str) -> None:
    state = resnet.build_model(arch).state_dict()
    with torch.device("meta"):  # only keys and shapes matter here
        targets = [resnet.build_model(arch, padding=preset) for preset in PRESETS]
        targets.append(resnet.build_model(arch, padding="tf_same", input_size=64))  # frozen pads
    for target in targets:
        target.load_state_dict(state, assign=True)  # strict: every key, every shape


def test_unknown_arch_lists_valid_ones() -> None:
    state = {"fc.weight": torch.zeros(10, 512)}
    with pytest.raises(ValueError, match="choose one of resnet18, resnet34"):
        from_torchvision(state, "resnet51")
    with pytest.raises(ValueError, match="resnetv2_50"):
        from_timm(state, "resnet50d.a1_in1k")
    with pytest.raises(ValueError, match="resnet50_v1"):
        from_keras("unused.h5", "ResNeXt50")


def test_wrong_arch_names_keys_and_the_right_arch() -> None:
    torch.manual_seed(0)
    state = torchvision.models.resnet18().state_dict()
    with pytest.raises(ValueError, match=r"missing key.*layer1\.0\.bn3\.bias.*\(state_dict, 'resnet18'\)"):
        from_torchvision(state, "resnet50")
    grouped = torchvision.models.resnext50_32x4d().state_dict()
    with pytest.raises(ValueError, match=r"shape mismatch.*bn1\.bias \(128,\), want \(64,\).*'resnext50_32x4d'"):
        from_torchvision(grouped, "resnet50")
