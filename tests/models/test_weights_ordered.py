"""Weights laid out by position, by value: fb.resnet.torch's ResNet-200 converted to PyTorch
(``weights=fbtorch:``) and TensorNets' ``.npz`` files (``weights=tensornets:``).

Each source layout is written (tests/helpers/weights.py) from its own description (fb.resnet.torch's
``models/preresnet.lua`` as convert_torch_to_pytorch numbers it; the TF variables TensorNets'
``resnets.py`` creates, with their names), never by walking our model. The loaded models are
compared with forwards written here from the raw source tensors, or each source tensor is
filled with its own index and found in the parameter it belongs to. Nothing is downloaded;
ResNet-200 is built once per module and runs at 32 px.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from resnet.checkpoint import CheckpointError
from resnet.weights import WeightsError, from_fbtorch, from_tensornets, load_weights, parse_weights
from resnet.weights.tensornets import tf_variables
from tests.helpers.weights import TENSORNETS, lua_preresnet, random_values, save_npz, tensornets_variables

# one worker: its module fixtures are built once
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.xdist_group("weights_ordered")]  # tests/conftest.py

EPS = 1e-5  # nn.SpatialBatchNormalization's and TensorNets' batch_norm epsilon


def close(ours: torch.Tensor, reference: torch.Tensor) -> None:
    torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-4 * reference.abs().max().item())


# --- fb.resnet.torch: preresnet.lua as convert_torch_to_pytorch numbers it ----------------------


def lua_forward(sd: dict[str, torch.Tensor], x: torch.Tensor, depths=(3, 24, 36, 3)) -> torch.Tensor:
    """preresnet.lua's forward from the converted tensors (Torch7 pads every conv and pool symmetrically)."""

    def conv(key, x, stride=1, pad=0):
        return F.conv2d(x, sd[f"{key}.weight"], sd.get(f"{key}.bias"), stride, pad)

    def bn(key, x):
        mean, var, weight, bias = (sd[f"{key}.{t}"] for t in ("running_mean", "running_var", "weight", "bias"))
        return F.batch_norm(x, mean, var, weight, bias, False, 0.0, EPS)

    x = F.max_pool2d(F.relu(bn("1", conv("0", x, 2, 3))), 3, 2, 1)
    for s, count in enumerate(depths):
        for i in range(count):
            unit, stride = f"{4 + s}.{i}.0", 2 if s > 0 and i == 0 else 1
            h = conv(f"{unit}.0.2", F.relu(bn(f"{unit}.0.0", x)))
            h = conv(f"{unit}.0.5", F.relu(bn(f"{unit}.0.3", h)), stride, 1)
            h = conv(f"{unit}.0.8", F.relu(bn(f"{unit}.0.6", h)))
            shortcut = bn(f"{unit}.1.1", conv(f"{unit}.1.0", x, stride)) if f"{unit}.1.0.weight" in sd else x
            x = h + shortcut
    x = F.relu(bn("9", x)).mean((2, 3))
    return F.linear(x, sd["13.1.weight"], sd["13.1.bias"])


@pytest.fixture(scope="module")
def resnet200(tmp_path_factory):
    """(the converted state dict, its file, the model eval.py's path loads from it, an input)."""
    sd = random_values(lua_preresnet(), seed=0)
    path = tmp_path_factory.mktemp("fbtorch") / "resnet200.pth"
    torch.save(sd, path)
    loaded = load_weights(parse_weights(f"fbtorch:{path}"))
    return sd, path, loaded, torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def test_fbtorch_by_value(resnet200) -> None:
    sd, _, loaded, x = resnet200
    with torch.no_grad():
        close(loaded.model(x), lua_forward(sd, x))
    meta = loaded.model.meta
    assert (meta.arch, meta.padding_name, meta.source) == ("resnet200_v2", "symmetric", "fbtorch")
    assert dict(meta.overrides) == {"conv_bias": "unnormed"}  # the branch's last conv keeps its bias
    origin = loaded.origin
    assert (origin.crop, origin.resize, origin.interpolation, origin.preprocessing) == (224, 256, "bicubic", "torch")


def test_fbtorch_tensor_list_without_biases(resnet200) -> None:
    """A list in Lua module order (the converter's state_dict().values(), num_batches_tracked
    scalars included), from convs without biases: the plain resnet200_v2."""
    sd, _, _, x = resnet200
    plain = {k: v for k, v in sd.items() if not (k.endswith(".bias") and sd[k.replace(".bias", ".weight")].ndim == 4)}
    listed = []
    for key, value in plain.items():
        listed.append(value)
        if key.endswith("running_var"):
            listed.append(torch.tensor(7))
    model = from_fbtorch(listed)
    assert model.meta.overrides == () and "layer1.0.conv3.bias" not in model.state_dict()
    with torch.no_grad():
        close(model(x), lua_forward(plain, x))


@pytest.mark.parametrize(
    "content, said",
    [
        ({"0.weight": torch.zeros(64, 3, 3, 3)}, "0.weight is (64, 3, 3, 3), expected (64, 3, 7, 7) for conv1.weight"),
        ({"0.weight": torch.zeros(64, 3, 7, 7), "0.bias": torch.zeros(64)}, "has no 1.weight (bn1.weight"),
        ({"conv1.weight": torch.zeros(64, 3, 7, 7)}, "its first key is 'conv1.weight'"),
        ([torch.zeros(3), torch.zeros(2)], "is a list of 2 tensors"),
        ({"0.weight": "conv"}, "has a str at 0.weight"),
        (torch.zeros(3), "holds a tensor of shape (3,)"),
    ],
    ids=["shape", "missing", "torchvision-names", "list-length", "not-a-tensor", "a-tensor"],
)
def test_fbtorch_bad_files_say_one_line(tmp_path, content, said: str) -> None:
    path = tmp_path / "resnet200.pth"
    torch.save(content, path)
    with pytest.raises(WeightsError) as err:
        load_weights(parse_weights(f"fbtorch:{path}"))
    message = str(err.value)
    assert said in message and str(path) in message and "\n" not in message


def test_fbtorch_refuses_what_it_cannot_read(tmp_path, resnet200) -> None:
    text = tmp_path / "notes.pth"
    text.write_text("not a checkpoint\n")
    code = tmp_path / "module.pth"
    torch.save(torch.nn.Linear(2, 2), code)  # a pickled module: unpickling it would run code
    cases = {
        f"fbtorch:{text}": "is not a torch checkpoint",
        f"fbtorch:{code}": "refusing to load",
        f"fbtorch:{tmp_path / 'resnet-200.t7'}": "is a Torch7 file",
        f"fbtorch:{tmp_path / 'absent.pth'}": "no converted fb.resnet.torch file",
    }
    for weights, said in cases.items():
        with pytest.raises(WeightsError, match=said) as err:
            load_weights(parse_weights(weights))
        assert "\n" not in str(err.value)
    with pytest.raises(WeightsError, match="from_fbtorch cannot import 'resnet50'; choose one of resnet200_v2"):
        load_weights(parse_weights(f"fbtorch:{resnet200[1]}"), arch="resnet50")
    extra = {**resnet200[0], "14.weight": torch.zeros(3)}
    with pytest.raises(CheckpointError, match=r"has 1 tensor\(s\) fb.resnet.torch's resnet200_v2 does not, e.g. 14"):
        from_fbtorch(extra, where="x.pth")


# --- TensorNets: resnets.py's TF variables, by name --------------------------------------------


def tf_forward_resnext(v: dict[str, np.ndarray], x: torch.Tensor, model: str) -> torch.Tensor:
    """TensorNets' resnext forward (``_block3``, ``gconvbn``) under symmetric pads, from its arrays."""
    _, filters, depths, groups = TENSORNETS[model]
    t = {k.split("/", 1)[1].removesuffix(":0"): torch.from_numpy(a) for k, a in v.items()}

    def conv(scope, x, stride=1, pad=0):
        return F.conv2d(x, t[f"{scope}/conv/weights"].permute(3, 2, 0, 1), None, stride, pad)

    def bn(scope, x):
        mean, var, gamma, beta = (t[f"{scope}/{r}"] for r in ("moving_mean", "moving_variance", "gamma", "beta"))
        return F.batch_norm(x, mean, var, gamma, beta, False, 0.0, EPS)

    def gconv(scope, x, stride):  # layers.gconvbn: depthwise (multiplier c), then a constant 1x1 summing groups
        dw = t[f"{scope}/sconv/depthwise_weights"]  # (3, 3, f, c); TF output k * c + m
        f, c = dw.shape[2], dw.shape[3]
        x = F.conv2d(x, dw.permute(2, 3, 0, 1).reshape(f * c, 1, 3, 3), None, stride, 1, groups=f)
        kernel = torch.zeros(f, f * c, 1, 1)
        for i in range(f):
            start = (i // c) * c * c + i % c
            kernel[i, start : start + c * c : c] = 1.0
        return F.conv2d(x, kernel)

    x = F.max_pool2d(F.relu(bn("conv1/bn", conv("conv1", x, 2, 3))), 3, 2, 1)
    for s, count in enumerate(depths):
        for i in range(count):
            b, stride = f"conv{s + 2}/block{i + 1}", 2 if s > 0 and i == 0 else 1
            shortcut = bn(f"{b}/0/bn", conv(f"{b}/0", x, stride)) if i == 0 else x
            h = F.relu(bn(f"{b}/1/bn", conv(f"{b}/1", x)))
            h = F.relu(bn(f"{b}/2/bn", gconv(f"{b}/2", h, stride)))
            x = F.relu(shortcut + bn(f"{b}/3/bn", conv(f"{b}/3", h)))
    return x.mean((2, 3)) @ t["logits/weights"] + t["logits/biases"]


def test_tensornets_resnext_by_value(tmp_path) -> None:
    names, shapes = zip(*tensornets_variables("resnext50c32", classes=10))
    v = {k: a.numpy() for k, a in random_values(list(zip(names, shapes)), seed=2, tf=True).items()}
    path = tmp_path / "resnext_50_32x4d.npz"
    save_npz(path, list(names), [v[n] for n in names])
    loaded = load_weights(parse_weights(f"tensornets:{path}"))
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        close(loaded.model(x), tf_forward_resnext(v, x, "resnext50c32"))
    meta, origin = loaded.model.meta, loaded.origin
    assert (meta.arch, meta.padding_name, meta.source, meta.num_classes) == (
        "resnext50_32x4d",
        "symmetric",
        "tensornets",
        10,
    )
    assert (origin.crop, origin.resize, origin.interpolation, origin.preprocessing) == (224, 256, "bilinear", "torch")


def our_key(name: str) -> str:
    """TensorNets' variable name -> our parameter, for the pre-activation models (written from
    resnets.py ``_block2`` / ``_block2s`` and blocks.PreActBottleneck's names)."""
    path, role = name.split("/", 1)[1].removesuffix(":0").rsplit("/", 1)
    attr = {
        "gamma": "weight",
        "beta": "bias",
        "moving_mean": "running_mean",
        "moving_variance": "running_var",
        "weights": "weight",
        "biases": "bias",
    }[role]
    fixed = {
        "conv1": "conv1",
        "conv1/conv": "conv1",
        "conv1/bn": "bn1",
        "bn": "final_bn",
        "postnorm": "final_bn",
        "logits": "fc",
    }
    if path in fixed:
        return f"{fixed[path]}.{attr}"
    stage, block, layer = path.split("/", 2)
    unit = f"layer{int(stage[4:]) - 1}.{int(block[5:]) - 1}"
    module = {
        "preact": "bn1",
        "bn": "bn1",
        "0": "downsample.0",
        "0/conv": "downsample.0",
        "0/bn": "downsample.1",
        "1/conv": "conv1",
        "1/bn": "bn2",
        "2/conv": "conv2",
        "2/bn": "bn3",
        "3/conv": "conv3",
    }[layer]
    return f"{unit}.{module}.{attr}"


@pytest.mark.parametrize("model, arch", [("resnet50v2", "resnet50_v2"), ("resnet200v2", "resnet200_v2")])
def test_tensornets_preact_tensors_land_where_they_belong(model: str, arch: str) -> None:
    """Each array filled with its own index (BN gamma first, as TF >= 1.4 saves): every one of
    our parameters holds the index of the variable it comes from; a conv bias a BN follows is
    folded into that BN's running mean (ResNet200v2: biases on every conv)."""
    variables = tensornets_variables(model, gamma_first=True)
    names = [n for n, _ in variables]
    arrays = [np.full(shape, float(i), np.float32) for i, (_, shape) in enumerate(variables)]
    model_ = from_tensornets(names, arrays, model)  # in memory: test_tensornets_resnext_by_value reads a file
    assert model_.meta.arch == arch and model_.meta.source == "tensornets"
    want = {}
    for i, name in enumerate(names):
        want[our_key(name)] = float(i)
    for name in names:  # a conv with a BN after it: its bias moves into the BN's mean
        key = our_key(name)
        bn = name.replace("/conv/biases", "/bn/moving_mean")
        if bn != name and bn in names:
            want[our_key(bn)] -= want.pop(key)
    got = {k: v for k, v in model_.state_dict().items() if not k.endswith("num_batches_tracked")}
    assert sorted(got) == sorted(want)
    for key, value in got.items():
        assert torch.all(value == want[key]), key


@pytest.mark.parametrize("model", ["resnext101c32", "resnext101c64", "wideresnet50", "resnet101v2", "resnet152v2"])
def test_tensornets_layouts(model: str) -> None:
    """The order and shapes the loader expects equal the description of resnets.py above."""
    from resnet import build_model
    from resnet.weights.tensornets import MODELS

    with torch.device("meta"):
        ours = build_model(MODELS[model][0])
    expected = [(n.rsplit("/", 1)[1].removesuffix(":0"), shape) for n, shape in tensornets_variables(model)]
    assert [(role, shape) for _, role, _, shape in tf_variables(ours)] == expected


def test_tensornets_refusals_and_bad_files(tmp_path) -> None:
    """Each bad file says so in one line. The loader checks the count, then each array in order,
    so arrays past the first wrong one can be placeholders (small files)."""
    names, shapes = zip(*tensornets_variables("resnext50c32", classes=10))
    stub = [np.zeros(1, np.float32)] * len(names)
    cases = {}
    save_npz(tmp_path / "shape.npz", list(names), [np.zeros(s, np.float32) for s in shapes[:5]] + stub[5:])
    cases["shape.npz"] = re.escape(
        "values[5] 'resnext50c32/conv2/block1/0/conv/weights:0' is (1,), expected weights of shape (1, 1, 64, 256) "
        "for layer1.0.downsample.0.weight"
    )
    save_npz(tmp_path / "short.npz", list(names[:-3]), stub[:-3])
    cases["short.npz"] = f"holds {len(names) - 3} arrays where TensorNets' resnext50c32 has {len(names)}"
    np.savez(tmp_path / "unnamed.npz", values=np.array([np.zeros(3), np.zeros(2)], dtype=object))
    cases["unnamed.npz"] = "an .npz without names"
    (tmp_path / "cut.npz").write_bytes((tmp_path / "shape.npz").read_bytes()[:5000])
    cases["cut.npz"] = "is not a readable TensorNets weights file"
    evil = np.empty(2, dtype=object)
    evil[:] = [np.zeros(1), print]  # a pickled global other than numpy's
    np.savez(tmp_path / "code.npz", names=np.array(["a", "b"]), values=evil)
    cases["code.npz"] = "refusing to load .* holds pickled builtins.print"
    cases["resnet50.h5"] = "ResNet50/101/152 .* are not read here.*keras:ResNet50"
    save_npz(tmp_path / "custom.npz", ["mynet/" + n.split("/", 1)[1] for n in names], stub)
    cases["custom.npz"] = "cannot tell which model it holds .* 'mynet'.*model=<arch>"
    for file, said in cases.items():
        with pytest.raises(WeightsError, match=said) as err:
            load_weights(parse_weights(f"tensornets:{tmp_path / file}"))
        assert "\n" not in str(err.value)
    custom = parse_weights(f"tensornets:{tmp_path / 'custom.npz'}")
    with pytest.raises(WeightsError, match=r"fit TensorNets' resnext50c32: values\[0\] 'mynet/conv1/conv/weights:0'"):
        load_weights(custom, arch="ResNeXt50c32")  # model= names it: read as that model
    with pytest.raises(WeightsError, match="ResNet50/101/152"):
        load_weights(custom, arch="ResNet50")
