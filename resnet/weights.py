"""Pretrained weights from torchvision, timm and Keras, as :func:`resnet.build_model` models.

One public function per source. Each returns a model in eval mode whose ``meta``
(:class:`resnet.model.ModelMeta`) records the source, the source's native padding
preset and its input preprocessing (PADDING.md, "Framework-native presets" and
"Other things that silently change accuracy"). ``padding`` runs the same weights
under another preset, which is the experiment this project is about; state-dict
keys never depend on it.

>>> model = from_torchvision(torchvision.models.resnet50(weights="DEFAULT").state_dict(), "resnet50")
>>> model = from_keras("resnet50_weights_tf_dim_ordering_tf_kernels.h5", "ResNet50")

The model is built on the meta device and the converted tensors are assigned to
it, so no weights are initialised only to be overwritten.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path

import h5py
import numpy as np
import torch
from torch import nn

from .archs import canonical_name
from .model import ResNet, build_model

TORCHVISION_ARCHS = (
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "resnext50_32x4d",
    "resnext101_32x8d",
    "resnext101_64x4d",
    "wide_resnet50_2",
    "wide_resnet101_2",
)
# timm's ResNet uses torchvision's module names; its ResNetV2 gets renamed (_TIMM_V2_KEYS).
TIMM_ARCHS = (*TORCHVISION_ARCHS, "resnext101_32x4d", "resnetv2_50", "resnetv2_101")
# keras.applications names -> ours. v1 strides on the first 1x1; v2 is TF-slim's layout.
KERAS_ARCHS = {
    "ResNet50": "resnet50_v1",
    "ResNet101": "resnet101_v1",
    "ResNet152": "resnet152_v1",
    "ResNet50V2": "resnet50_v2",
    "ResNet101V2": "resnet101_v2",
    "ResNet152V2": "resnet152_v2",
}
KERAS_BN_EPS = 1.001e-5  # every BatchNormalization in keras/src/applications/resnet.py

# (timm ResNetV2 key pattern, our key): the first pattern that matches renames a key.
_TIMM_V2_KEYS = (
    (r"^stem\.conv\.", "conv1."),
    (r"^stages\.(\d+)\.blocks\.(\d+)\.norm(\d)\.", lambda m: f"layer{int(m[1]) + 1}.{m[2]}.bn{m[3]}."),
    (r"^stages\.(\d+)\.blocks\.(\d+)\.downsample\.conv\.", lambda m: f"layer{int(m[1]) + 1}.{m[2]}.downsample.0."),
    (r"^stages\.(\d+)\.blocks\.(\d+)\.", lambda m: f"layer{int(m[1]) + 1}.{m[2]}."),
    (r"^norm\.", "final_bn."),
    (r"^head\.fc\.", "fc."),
)


def from_torchvision(
    state_dict: Mapping[str, torch.Tensor], arch: str, *, padding: str | Mapping | None = "symmetric"
) -> ResNet:
    """A torchvision ResNet / ResNeXt / Wide ResNet state dict -> our ``arch``, eval mode.

    Keys already match. ``num_classes`` is read from ``fc.weight``. Native preset
    ``symmetric`` (torch pads every conv and pool symmetrically), preprocessing ``torch``.
    """
    name = _pick_arch(arch, TORCHVISION_ARCHS, "from_torchvision")
    return _assemble(name, dict(state_dict), TORCHVISION_ARCHS, "from_torchvision", "torchvision", padding)


def from_timm(
    state_dict: Mapping[str, torch.Tensor], arch: str, *, padding: str | Mapping | None = "symmetric"
) -> ResNet:
    """A timm ``resnet*`` / ``resnext*`` / ``wide_resnet*`` / ``resnetv2_50|101`` state dict, eval mode.

    The timm models of :data:`TIMM_ARCHS`; variants with another stem or shortcut
    (``resnet50d``, BiT's ``resnetv2_50x1_bit``) are refused. ``arch`` may be a timm
    model name with its pretrained tag (``'resnet50.a1_in1k'``). ResNetV2 keys are
    renamed and its 1x1-conv classifier becomes a Linear ``fc``. Native preset
    ``symmetric``, preprocessing ``torch``.
    """
    name = _pick_arch(arch.removeprefix("timm/").split(".")[0], TIMM_ARCHS, "from_timm")
    if any(key.startswith("stages.") for key in state_dict):  # timm ResNetV2 layout
        state_dict = {_rename_timm_v2(key): value for key, value in state_dict.items()}
        if "fc.weight" in state_dict and state_dict["fc.weight"].ndim == 4:  # timm's head.fc is a 1x1 conv
            state_dict["fc.weight"] = state_dict["fc.weight"].flatten(1)
    return _assemble(name, dict(state_dict), TIMM_ARCHS, "from_timm", "timm", padding)


def from_keras(
    weights_file: str | Path, arch: str, *, padding: str | Mapping | None = "keras", num_classes: int | None = None
) -> ResNet:
    """A ``keras.applications`` ResNet50/101/152 or ResNet50V2/101V2/152V2 weights file, eval mode.

    Reads the Keras 3 ``.weights.h5`` format (``model.save_weights``; also inside a
    ``.keras`` archive) and the legacy Keras 2 HDF5 layout of the published
    ``resnet50_weights_tf_dim_ordering_tf_kernels.h5`` files. ``arch`` is the Keras
    name or ours (``resnet50_v1`` ... ``resnet152_v2``). Layers are matched by their
    Keras names, so the file's layer order does not matter.

    ``num_classes`` is read from the ``predictions`` layer (1000, or 1001 for heads
    with TF-slim's background class). A file saved with ``include_top=False`` has
    no head: it loads only when ``num_classes`` is given, and then ``fc`` is freshly
    initialised. Native preset ``keras`` (explicit zero pads, so the stem pool pads
    with zeros), BN epsilon 1.001e-5, preprocessing ``caffe`` for v1, ``tf`` for v2.
    """
    name = _pick_arch(KERAS_ARCHS.get(arch, arch), tuple(KERAS_ARCHS.values()), "from_keras", tuple(KERAS_ARCHS))
    layers = _read_keras_h5(Path(weights_file))
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
        model = build_model(name, n_classes, padding, bn_eps=KERAS_BN_EPS)
    model.meta.input_size = 224  # keras.applications' default_size for every ResNet, V2 included
    state_dict, missing, unused = _keras_to_state_dict(layers, model, name.endswith("_v2"))
    if head is None:
        missing.discard("predictions")
    if missing or unused:
        guess = _keras_arch_of(layers)
        hint = f" It looks like {guess}: call from_keras(path, {guess!r})." if guess and guess != name else ""
        problems = _join(_few("missing Keras layer", missing), _few("unused Keras layer", unused))
        raise ValueError(f"{weights_file} does not fit {name}: {problems}.{hint}")
    want = {k: v for k, v in _shapes(model).items() if head is not None or not k.startswith("fc.")}
    _check_shapes(want, state_dict, name, "from_keras", ())
    return _finish(model, state_dict, "keras")


# --- shared ------------------------------------------------------------------------


def _pick_arch(arch: str, valid: tuple[str, ...], caller: str, source_names: tuple[str, ...] = ()) -> str:
    try:
        name = canonical_name(arch)
    except ValueError:
        name = None
    if name not in valid:
        also = f" (or the source's names: {', '.join(source_names)})" if source_names else ""
        raise ValueError(f"{caller} cannot import {arch!r}; choose one of {', '.join(valid)}{also}")
    return name


def _rename_timm_v2(key: str) -> str:
    for pattern, replacement in _TIMM_V2_KEYS:
        key, n = re.subn(pattern, replacement, key, count=1)
        if n:
            return key
    return key


def _assemble(
    name: str,
    state_dict: dict[str, torch.Tensor],
    candidates: tuple[str, ...],
    caller: str,
    source: str,
    padding: str | Mapping | None,
) -> ResNet:
    if "fc.weight" not in state_dict:
        raise ValueError(f"the state dict has no classifier (fc.weight) to read num_classes from; {caller} needs one")
    num_classes = state_dict["fc.weight"].shape[0]
    with torch.device("meta"):
        model = build_model(name, num_classes, padding)
    _check_shapes(_shapes(model), state_dict, name, caller, candidates)
    # A copy, so the imported model never shares storage with the caller's tensors.
    return _finish(model, {k: v.detach().clone() for k, v in state_dict.items()}, source)


def _check_shapes(
    want: dict[str, tuple[int, ...]],
    state_dict: Mapping[str, torch.Tensor],
    name: str,
    caller: str,
    candidates: tuple[str, ...],
) -> None:
    """Fail with the keys that differ, and the candidate arch the state dict fits, if any."""
    got = _shapes(state_dict)
    if want == got:
        return
    wrong = sorted(k for k in want.keys() & got.keys() if want[k] != got[k])
    problems = _join(
        _few("missing key", want.keys() - got.keys()),
        _few("unexpected key", got.keys() - want.keys()),
        _few("shape mismatch", [f"{k} {got[k]}, want {want[k]}" for k in wrong]),
    )
    guess = next((c for c in candidates if c != name and _shapes(_meta_model(c, state_dict)) == got), None)
    hint = f" It is a {guess} state dict: call {caller}(state_dict, {guess!r})." if guess else ""
    raise ValueError(f"the state dict does not fit {name}: {problems}.{hint}")


def _meta_model(name: str, state_dict: Mapping[str, torch.Tensor]) -> nn.Module:
    with torch.device("meta"):
        return build_model(name, state_dict["fc.weight"].shape[0])


def _shapes(source: nn.Module | Mapping[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    tensors = source.state_dict() if isinstance(source, nn.Module) else source
    return {k: tuple(v.shape) for k, v in tensors.items()}


def _few(what: str, items, limit: int = 4) -> str:
    """'3 missing key(s) (a, b, c)': a few names, so the message stays readable."""
    items = sorted(items)
    if not items:
        return ""
    more = f", ... {len(items) - limit} more" if len(items) > limit else ""
    return f"{len(items)} {what}(s) ({', '.join(items[:limit])}{more})"


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _finish(model: ResNet, state_dict: dict[str, torch.Tensor], source: str) -> ResNet:
    """Assign ``state_dict`` (cast to the model's dtypes) to the meta-built ``model``; init what is left."""
    targets = model.state_dict()
    converted = {k: v.to(targets[k].dtype) for k, v in state_dict.items()}
    model.load_state_dict(converted, strict=False, assign=True)
    for module in model.modules():  # only a head left out by from_keras(num_classes=...)
        if any(t.is_meta for t in module.parameters(recurse=False)):
            module.to_empty(device="cpu", recurse=False)
            module.reset_parameters()
    model.meta.source = source
    return model.eval()


# --- Keras -------------------------------------------------------------------------

# Keras's weight names (legacy layout) and the order Keras 3 stores them in.
_KERAS_ROLES = {2: ("kernel", "bias"), 1: ("kernel",), 4: ("gamma", "beta", "moving_mean", "moving_variance")}
_BN_ROLES = {"weight": "gamma", "bias": "beta", "running_mean": "moving_mean", "running_var": "moving_variance"}


def _read_keras_h5(path: Path) -> dict[str, dict[str, np.ndarray]]:
    """Keras layer name -> {weight role: array}, from either HDF5 layout."""
    if zipfile.is_zipfile(path):  # a .keras archive keeps its weights in model.weights.h5
        with zipfile.ZipFile(path) as archive, h5py.File(io.BytesIO(archive.read("model.weights.h5")), "r") as f:
            return _read_keras_h5_file(f, path)
    with h5py.File(path, "r") as f:
        return _read_keras_h5_file(f, path)


def _read_keras_h5_file(f: h5py.File, path: Path) -> dict[str, dict[str, np.ndarray]]:
    root = f.get("model_weights", f)  # a whole model saved with model.save(.h5)
    if "layer_names" in root.attrs:  # Keras 2: group per layer, attrs name the weights
        layers = {}
        for layer in map(_str, root.attrs["layer_names"]):
            names = [_str(n) for n in root[layer].attrs.get("weight_names", [])]
            if names:
                layers[layer] = {n.split("/")[-1].split(":")[0]: root[layer][n][()] for n in names}
        return layers
    if "layers" in f:  # Keras 3: layers/<class-based key>/vars/<index>, the layer name in an attr
        layers = {}
        unnamed = []

        def visit(key: str, group) -> None:
            if not (key.endswith("vars") and isinstance(group, h5py.Group) and len(group)):
                return
            if "name" not in group.attrs:
                unnamed.append(key)
                return
            arrays = [group[str(i)][()] for i in range(len(group))]
            layers[_str(group.attrs["name"])] = dict(zip(_KERAS_ROLES.get(len(arrays), ()), arrays))

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


def _keras_layer_name(module: str, preact: bool) -> str:
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


def _keras_to_state_dict(
    layers: Mapping[str, Mapping[str, np.ndarray]], model: nn.Module, preact: bool
) -> tuple[dict[str, torch.Tensor], set[str], set[str]]:
    """Our state dict from Keras arrays; also the Keras layers missing and left unused."""
    state_dict, missing, used = {}, set(), set()
    for key in model.state_dict():
        module_name, attr = key.rsplit(".", 1)
        module = model.get_submodule(module_name)
        layer = _keras_layer_name(module_name, preact)
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


def _keras_arch_of(layers: Mapping[str, object]) -> str | None:
    """Which of our archs a Keras file holds, from its layer names (for error messages)."""
    depth = {6: "50", 23: "101", 36: "152"}.get(sum(bool(re.fullmatch(r"conv4_block\d+_1_conv", n)) for n in layers))
    if depth is None:
        return None
    return f"resnet{depth}_{'v2' if 'post_bn' in layers else 'v1'}"
