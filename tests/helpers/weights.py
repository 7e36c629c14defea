"""Weights and inputs for the importer tests, written from each source's own layout (never by
walking our model): Keras's legacy HDF5 files, fb.resnet.torch's converted state dicts (in Lua
module order) and TensorNets' ``.npz`` files (its TF variables, by name), of random values."""

from __future__ import annotations

import math
from pathlib import Path

import h5py
import numpy as np
import torch
from torch import nn

BN = ("weight", "bias", "running_mean", "running_var")  # a Torch7 BN's tensors, as the converter writes them


def sample(size: int) -> torch.Tensor:
    """An input whose mean is off zero, so some stem channels are negative over whole windows,
    as in trained stems: only there does a ReLU before a max pool change anything."""
    return torch.randn(1, 3, size, size) + 2


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def save_legacy_h5(keras_model, path: Path, replace: dict[str, list[np.ndarray] | None] | None = None) -> Path:
    """The Keras 2 HDF5 layout of the published ``*_weights_tf_dim_ordering_tf_kernels.h5``.

    ``replace`` swaps a layer's arrays (None drops the layer, as ``include_top=False`` does).
    """
    replace = replace or {}
    layers = [layer for layer in keras_model.layers if replace.get(layer.name, ()) is not None]
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = [layer.name.encode() for layer in layers]
        f.attrs["backend"], f.attrs["keras_version"] = b"tensorflow", b"2.2.4"
        for layer in layers:
            group = f.create_group(layer.name)
            names = [f"{layer.name}/{v.name}:0" for v in layer.weights]
            arrays = replace.get(layer.name) or [np.asarray(v.numpy()) for v in layer.weights]
            group.attrs["weight_names"] = [n.encode() for n in names]
            for name, array in zip(names, arrays):
                group.create_dataset(name, data=array)
    return path


def random_values(shapes: list[tuple[str, tuple[int, ...]]], seed: int, tf: bool = False) -> dict[str, torch.Tensor]:
    """Kernels scaled by fan-in (``tf``: HWIO and (in, out) kernels), BN scales and variances
    around 1, small shifts: 66 residual units stay in float32's comfortable range, and no BN
    is the identity."""
    g = torch.Generator().manual_seed(seed)
    values = {}
    for key, shape in shapes:
        role = key.removesuffix(":0").replace("/", ".").rsplit(".", 1)[-1]
        if len(shape) > 1:
            fan_in = (math.prod(shape[:-1]) if len(shape) == 4 else shape[0]) if tf else math.prod(shape[1:])
            bound = math.sqrt(3 / fan_in)
            values[key] = torch.empty(shape).uniform_(-bound, bound, generator=g)
        elif role in ("running_var", "moving_variance", "weight", "gamma"):
            values[key] = torch.empty(shape).uniform_(0.5, 1.5, generator=g)
        else:
            values[key] = torch.empty(shape).uniform_(-0.2, 0.2, generator=g)
    return values


def lua_preresnet(depths=(3, 24, 36, 3), biases: bool = True, classes: int = 1000) -> list[tuple[str, tuple]]:
    """(key, shape) in Lua module order: model:add(conv, BN, ReLU, max pool, 4 stages, Copy, BN,
    ReLU, avg pool, View, Linear); a unit is Sequential{ConcatTable{branch, shortcut}, CAddTable},
    its branch BN, ReLU, conv1x1, BN, ReLU, conv3x3, BN, ReLU, conv1x1 (c530106, every unit
    pre-activated); the Linear is the converter's Sequential{reshape, Linear}."""
    entries = []

    def conv(key: str, cin: int, cout: int, k: int) -> None:
        entries.append((f"{key}.weight", (cout, cin, k, k)))
        if biases:
            entries.append((f"{key}.bias", (cout,)))

    def bn(key: str, c: int) -> None:
        entries.extend((f"{key}.{t}", (c,)) for t in BN)

    conv("0", 3, 64, 7)
    bn("1", 64)
    channels = 64
    for s, (n, count) in enumerate(zip((64, 128, 256, 512), depths)):
        for i in range(count):
            unit = f"{4 + s}.{i}.0"
            bn(f"{unit}.0.0", channels)
            conv(f"{unit}.0.2", channels, n, 1)
            bn(f"{unit}.0.3", n)
            conv(f"{unit}.0.5", n, n, 3)
            bn(f"{unit}.0.6", n)
            conv(f"{unit}.0.8", n, 4 * n, 1)
            if channels != 4 * n:  # shortcutType 'B': a projection only where the width changes
                conv(f"{unit}.1.0", channels, 4 * n, 1)
                bn(f"{unit}.1.1", 4 * n)
            channels = 4 * n
    bn("9", channels)
    return entries + [("13.1.weight", (classes, channels)), ("13.1.bias", (classes,))]


# model -> (unit, filters per stage, units per stage, groups); resnets.py's stack_fn of each.
TENSORNETS = {
    "resnet200v2": ("block2", (64, 128, 256, 512), (3, 24, 36, 3), 1),
    "resnext50c32": ("block3", (128, 256, 512, 1024), (3, 4, 6, 3), 32),
    "resnext101c32": ("block3", (128, 256, 512, 1024), (3, 4, 23, 3), 32),
    "resnext101c64": ("block3", (256, 512, 1024, 2048), (3, 4, 23, 3), 64),
    "wideresnet50": ("blockw", (128, 256, 512, 1024), (3, 4, 6, 3), 1),
    "resnet50v2": ("block2s", (64, 128, 256, 512), (3, 4, 6, 3), 1),
    "resnet101v2": ("block2s", (64, 128, 256, 512), (3, 4, 23, 3), 1),
    "resnet152v2": ("block2s", (64, 128, 256, 512), (3, 8, 36, 3), 1),
}


def tensornets_variables(model: str, classes: int = 1000, gamma_first: bool = False) -> list[tuple[str, tuple]]:
    """(TF variable name, shape) in TensorNets' graph order. ``convbn`` is conv2d (scope
    ``conv``) then batch_norm (scope ``bn``: beta, gamma, moving_mean, moving_variance as in
    its README's print_weights; ``gamma_first``: TF >= 1.4's order); ``gconvbn`` a separable
    conv without pointwise part (``sconv/depthwise_weights``); biases where conv_bias is set."""
    unit, filters, depths, groups = TENSORNETS[model]
    preact, biased = unit == "block2s", unit in ("block2", "block2s")
    names = []

    def var(name: str, shape: tuple) -> None:
        names.append((f"{model}/{name}:0", shape))

    def bn(scope: str, c: int) -> None:
        for role in (
            ("gamma", "beta", "moving_mean", "moving_variance")
            if gamma_first
            else ("beta", "gamma", "moving_mean", "moving_variance")
        ):
            var(f"{scope}/{role}", (c,))

    def conv2d(scope: str, k: int, cin: int, cout: int, bias: bool) -> None:
        var(f"{scope}/weights", (k, k, cin, cout))
        if bias:
            var(f"{scope}/biases", (cout,))

    def convbn(scope: str, k: int, cin: int, cout: int, bias: bool = unit == "block2") -> None:
        conv2d(f"{scope}/conv", k, cin, cout, bias)
        bn(f"{scope}/bn", cout)

    if preact:
        conv2d("conv1", 7, 3, 64, True)
    else:
        convbn("conv1", 7, 3, 64)
    channels = 64
    for s, (f, count) in enumerate(zip(filters, depths)):
        out = {"block3": 64 // groups * f, "blockw": 2 * f}.get(unit, 4 * f)
        for i in range(count):
            b = f"conv{s + 2}/block{i + 1}"
            if unit == "block2s":
                bn(f"{b}/preact", channels)
                if i == 0:
                    conv2d(f"{b}/0", 1, channels, out, True)
                convbn(f"{b}/1", 1, channels, f, False)
                convbn(f"{b}/2", 3, f, f, False)
                conv2d(f"{b}/3/conv", 1, f, out, True)
            else:
                if i == 0:
                    convbn(f"{b}/0", 1, channels, out)
                if unit == "block2":
                    bn(f"{b}/bn", channels)
                convbn(f"{b}/1", 1, channels, f)
                if unit == "block3":
                    var(f"{b}/2/sconv/depthwise_weights", (3, 3, f, f // groups))
                    bn(f"{b}/2/bn", f)
                else:
                    convbn(f"{b}/2", 3, f, f)
                if unit == "block2":
                    conv2d(f"{b}/3/conv", 1, f, out, True)
                else:
                    convbn(f"{b}/3", 1, f, out)
            channels = out
    if unit in ("block2", "block2s"):
        bn("postnorm" if preact else "bn", channels)
    var("logits/weights", (channels, classes))
    var("logits/biases", (classes,))
    assert biased or not any(n.endswith("biases:0") and "logits" not in n for n, _ in names)
    return names


def save_npz(path, names: list[str], arrays: list[np.ndarray]) -> None:
    """As tensornets.utils.save: np.savez(names=..., values=...), values a pickled object array."""
    values = np.empty(len(arrays), dtype=object)
    values[:] = arrays
    np.savez(path, names=np.array(names), values=values)
