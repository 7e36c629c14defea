"""keras.applications ResNet50/101/152 and ResNet50V2/101V2/152V2 weights: Keras's cache, its files.

``weights=keras:ResNet50V2`` reads ``$KERAS_HOME/models/<name>_weights_tf_dim_ordering_tf_kernels.h5``
(default ``~/.keras``), where ``keras.applications`` keeps them; ``weights=keras:/path/file.h5``
reads a file and tells the architecture from its layer names. Native preset ``keras``
(explicit ``ZeroPadding2D``, so the stem pool pads with zeros), BN epsilon 1.001e-5, preprocessing
``caffe`` for v1, ``tf`` for v2 (docs/padding.md, "Other things that silently change accuracy").
"""

from __future__ import annotations

import io
import os
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path

import h5py
import numpy as np
import torch
from torch import nn

from ..checkpoint import CheckpointError
from ..checkpoint.errors import error_line
from ..checkpoint.load import shapes
from ..model import ResNet, build_model
from .common import (
    LoadedWeights,
    OriginProtocol,
    StateDictMismatch,
    WeightsError,
    WeightsSpec,
    WeightsUnavailable,
    assign,
    check_shapes,
    convert_file,
    fetch,
    few,
    join,
    pick_arch,
)

# keras.applications names -> ours. v1 strides on the first 1x1; v2 is TF-slim's layout.
NAMES = {
    "ResNet50": "resnet50_v1",
    "ResNet101": "resnet101_v1",
    "ResNet152": "resnet152_v1",
    "ResNet50V2": "resnet50_v2",
    "ResNet101V2": "resnet101_v2",
    "ResNet152V2": "resnet152_v2",
}
BN_EPS = 1.001e-5  # every BatchNormalization in keras/src/applications/resnet.py
URL = "https://storage.googleapis.com/tensorflow/keras-applications/resnet/"
FORMS = ("keras:/path/to/resnet50v2.h5", f"keras:<{'|'.join(NAMES)}>")
EXPECTED = f"one of {', '.join(NAMES)} or a file path"


def from_keras(weights_file: str | Path, arch: str, *, num_classes: int | None = None) -> ResNet:
    """A ``keras.applications`` ResNet50/101/152 or ResNet50V2/101V2/152V2 weights file, eval mode.

    Reads the Keras 3 ``.weights.h5`` format (``model.save_weights``; also inside a
    ``.keras`` archive) and the legacy Keras 2 HDF5 layout of the published
    ``resnet50_weights_tf_dim_ordering_tf_kernels.h5`` files. ``arch`` is the Keras
    name or ours (``resnet50_v1`` ... ``resnet152_v2``). Layers are matched by their
    Keras names, so the file's layer order does not matter.

    ``num_classes`` is read from the ``predictions`` layer (1000, or 1001 for heads
    with TF-slim's background class). A file saved with ``include_top=False`` has
    no head: it loads only when ``num_classes`` is given, and then ``fc`` is freshly
    initialised.
    """
    name = pick_arch(NAMES.get(arch, arch), tuple(NAMES.values()), "from_keras", NAMES)
    layers = read_layers(Path(weights_file))
    head = layers.get("predictions", {}).get("kernel")
    if head is None and num_classes is None:
        raise ValueError(
            f"{weights_file} has no 'predictions' layer (saved with include_top=False?); "
            "pass num_classes=N to from_keras to load the backbone with a freshly initialised N-class fc"
        )
    if head is not None and num_classes is not None and head.shape[1] != num_classes:
        raise ValueError(f"{weights_file} has a {head.shape[1]}-class head; drop num_classes={num_classes}")
    n_classes = head.shape[1] if head is not None else num_classes
    with torch.device("meta"):
        # 224: keras.applications' default_size for every ResNet, V2 included.
        model = build_model(name, n_classes, "keras", source="keras", bn_eps=BN_EPS, eval_size=224)
    state_dict, missing, unused = _to_state_dict(layers, model, name.endswith("_v2"))
    if head is None:
        missing.discard("predictions")
    if missing or unused:
        guess = arch_of(layers)
        hint = f" It looks like {guess}: call from_keras(path, {guess!r})." if guess and guess != name else ""
        problems = join(few("missing Keras layer", missing), few("unused Keras layer", unused))
        fits = guess if guess != name else None
        raise StateDictMismatch(f"{weights_file} does not fit {name}: {problems}.{hint}", name, problems, fits)
    want = {k: v for k, v in shapes(model).items() if head is not None or not k.startswith("fc.")}
    check_shapes(want, state_dict, name, "from_keras", ())
    return assign(model, state_dict)


def is_published_name(text: str) -> bool:
    return text in NAMES


def load(spec: WeightsSpec, arch: str | None, download: bool) -> LoadedWeights:
    path = spec.path
    if spec.published:  # keras.applications' file (with the top), from Keras's cache
        file_name = f"{spec.name.lower()}_weights_tf_dim_ordering_tf_kernels.h5"  # keras/src/applications/resnet.py
        cache = Path(os.environ.get("KERAS_HOME", "~/.keras")).expanduser() / "models"
        path = fetch(URL + file_name, download, f"Keras {spec.name} weights", cache / file_name)
    if not path.is_file():
        raise WeightsUnavailable(f"no Keras weights file at {path}")
    name = spec.name or arch or arch_of(read_layers(path))
    if name is None:
        raise WeightsError(f"{path} holds none of {', '.join(NAMES)}; name the architecture with model=<arch>")
    return LoadedWeights(convert_file(path, from_keras, path, name), OriginProtocol())


# Keras's weight names (legacy layout) and the order Keras 3 stores them in.
_ROLES = {2: ("kernel", "bias"), 1: ("kernel",), 4: ("gamma", "beta", "moving_mean", "moving_variance")}
_BN_ROLES = {"weight": "gamma", "bias": "beta", "running_mean": "moving_mean", "running_var": "moving_variance"}


def read_layers(path: Path) -> dict[str, dict[str, np.ndarray]]:
    """Keras layer name -> {weight role: array}, from either HDF5 layout.

    A file h5py or zipfile cannot read (cut short, not HDF5, a .keras archive without
    weights) raises :class:`resnet.checkpoint.CheckpointError`, one line naming it."""
    try:
        if zipfile.is_zipfile(path):  # a .keras archive keeps its weights in model.weights.h5
            with zipfile.ZipFile(path) as archive, h5py.File(io.BytesIO(archive.read("model.weights.h5")), "r") as f:
                return _read_h5_file(f, path)
        with h5py.File(path, "r") as f:
            return _read_h5_file(f, path)
    except (OSError, KeyError, RuntimeError, zipfile.BadZipFile, NotImplementedError) as err:
        raise CheckpointError(
            f"{path} is not a readable Keras weights file ({error_line(err)}): it is cut short, damaged, "
            "or not HDF5; copy it again, or save the weights with model.save_weights('x.weights.h5')"
        ) from None


def _read_h5_file(f: h5py.File, path: Path) -> dict[str, dict[str, np.ndarray]]:
    root = f.get("model_weights", f)  # a whole model saved with model.save(.h5)
    if "layer_names" in root.attrs:  # Keras 2: group per layer, attrs name the weights
        layers = {}
        for layer in map(_str, root.attrs["layer_names"]):
            names = [_str(n) for n in root[layer].attrs.get("weight_names", [])]
            if names:
                layers[layer] = {n.split("/")[-1].split(":")[0]: root[layer][n][()] for n in names}
        return layers
    if "layers" in f:  # Keras 3: layers/<class-based key>/vars/<index>, the layer name in an attr
        layers, unnamed = {}, []

        def visit(key: str, group) -> None:
            if not (key.endswith("vars") and isinstance(group, h5py.Group) and len(group)):
                return
            if "name" not in group.attrs:
                unnamed.append(key)
                return
            arrays = [group[str(i)][()] for i in range(len(group))]
            layers[_str(group.attrs["name"])] = dict(zip(_ROLES.get(len(arrays), ()), arrays))

        f["layers"].visititems(visit)
        if unnamed:
            raise ValueError(
                f"{path} was written by a Keras 3 version that does not store layer names ({unnamed[0]}); "
                "load it in Keras and save it again with a current Keras (model.save_weights('x.weights.h5'))"
            )
        return layers
    raise ValueError(f"{path} is neither a Keras 3 .weights.h5 file nor a legacy Keras HDF5 weights file")


def _str(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _layer_name(module: str, preact: bool) -> str:
    """Our module name -> the Keras layer name (keras/src/applications/resnet.py)."""
    fixed = {"conv1": "conv1_conv", "bn1": "conv1_bn", "final_bn": "post_bn", "fc": "predictions"}
    if module in fixed:
        return fixed[module]
    stage, unit, layer = re.fullmatch(r"layer(\d+)\.(\d+)\.(.+)", module).groups()
    block = f"conv{int(stage) + 1}_block{int(unit) + 1}"  # Keras counts stages from conv2, units from 1
    if layer.startswith("downsample."):  # downsample.0 conv, downsample.1 BN
        return f"{block}_0_{'conv' if layer.endswith('0') else 'bn'}"
    kind, index = layer[:-1], int(layer[-1])  # conv1..3, bn1..3
    if kind == "bn" and preact:  # pre-activation: bn1 opens the block, bn2/bn3 follow conv1/conv2
        return f"{block}_preact_bn" if index == 1 else f"{block}_{index - 1}_bn"
    return f"{block}_{index}_{kind}"


def _to_state_dict(
    layers: Mapping[str, Mapping[str, np.ndarray]], model: nn.Module, preact: bool
) -> tuple[dict[str, torch.Tensor], set[str], set[str]]:
    """Our state dict from Keras arrays; also the Keras layers missing and left unused."""
    state_dict, missing, used = {}, set(), set()
    for key in model.state_dict():
        module_name, attr = key.rsplit(".", 1)
        module = model.get_submodule(module_name)
        layer = _layer_name(module_name, preact)
        if attr == "num_batches_tracked":
            state_dict[key] = torch.tensor(0)
            continue
        role = _BN_ROLES[attr] if isinstance(module, nn.BatchNorm2d) else {"weight": "kernel"}.get(attr, attr)
        if role not in layers.get(layer, {}):
            missing.add(f"{layer}/{role}" if layer in layers else layer)
            continue
        used.add(layer)
        value = torch.from_numpy(np.asarray(layers[layer][role], dtype=np.float32))
        if isinstance(module, nn.Conv2d) and attr == "weight":
            value = value.permute(3, 2, 0, 1)  # Keras HWIO -> torch OIHW
        elif isinstance(module, nn.Linear) and attr == "weight":
            value = value.T  # Dense (in, out) -> Linear (out, in)
        state_dict[key] = value.contiguous()
    return state_dict, missing, set(layers) - used


def arch_of(layers: Mapping[str, object]) -> str | None:
    """Which of our archs a Keras file holds, from its layer names (for error messages)."""
    depth = {6: "50", 23: "101", 36: "152"}.get(sum(bool(re.fullmatch(r"conv4_block\d+_1_conv", n)) for n in layers))
    return f"resnet{depth}_{'v2' if 'post_bn' in layers else 'v1'}" if depth else None
