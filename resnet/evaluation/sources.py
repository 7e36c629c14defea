"""``weights=`` values: parse them, then load the model they name with its native padding.

The forms (:data:`FORMS`)::

    /path/to/last.pt  or  checkpoint:/path/to/last.pt   our checkpoints (train.py, resnet.checkpoint)
    torchvision:ResNet50_Weights.IMAGENET1K_V1          torchvision's published weights (DEFAULT works)
    torchvision:/path/to/state_dict.pth                 a torchvision state dict on disk
    timm:resnet50.a1_in1k                               timm's published weights (Hugging Face hub)
    timm:/path/to/model.safetensors                     a timm state dict on disk (.safetensors, .pth, .bin)
    keras:/path/to/resnet50v2.h5                        a keras.applications weights file (.h5, .keras)
    keras:ResNet50V2                                    keras.applications' published file (Keras's cache)

Published weights are read from their hub's cache and fetched only with ``download=True``
(:mod:`resnet.evaluation.hub`). The architecture comes from the weights: the
checkpoint's meta, the torchvision / timm / Keras name, or, for a bare file, its
tensor shapes (Keras: its layer names); ``arch`` names it instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..archs import canonical_name
from ..checkpoint import load_checkpoint, load_model
from ..model import ResNet, build_model
from ..padding import Padding
from ..weights import KERAS_ARCHS, TIMM_ARCHS, TORCHVISION_ARCHS, from_keras, from_timm, from_torchvision
from .hub import (
    OriginProtocol,
    WeightsError,
    WeightsUnavailable,
    keras_file,
    load_state_dict_file,
    timm_weights,
    torchvision_weights,
)

SOURCES = ("checkpoint", "torchvision", "timm", "keras")
FORMS = (
    "/path/to/last.pt or checkpoint:/path/to/last.pt",
    "torchvision:ResNet50_Weights.IMAGENET1K_V1",
    "torchvision:/path/to/state_dict.pth",
    "timm:resnet50.a1_in1k",
    "timm:/path/to/model.safetensors",
    "keras:/path/to/resnet50v2.h5",
    f"keras:<{'|'.join(KERAS_ARCHS)}>",
)
FILE_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".h5", ".keras")
_TORCHVISION_NAME = re.compile(r"[A-Za-z0-9_]+_Weights\.[A-Za-z0-9_]+")
_TIMM_NAME = re.compile(r"[a-z0-9_]+(\.[a-z0-9_]+)?")


@dataclass(frozen=True)
class WeightsSpec:
    """A parsed ``weights=`` value: published weights by ``name``, or a file at ``path``."""

    source: str  # checkpoint | torchvision | timm | keras
    name: str | None = None  # ResNet50_Weights.IMAGENET1K_V1, resnet50.a1_in1k, ResNet50V2
    path: Path | None = None
    text: str = ""  # the value as given

    @property
    def published(self) -> bool:
        return self.name is not None


@dataclass
class LoadedWeights:
    model: ResNet  # eval mode, on the CPU, under the weights' native padding
    origin: OriginProtocol  # how the weights' publisher (or the training run) evaluates them


def parse_weights(text: str | None) -> WeightsSpec:
    """Parse a ``weights=`` value; a malformed one fails listing the valid forms."""
    value = (text or "").strip()
    if not value:
        _malformed(text, "it is empty")
    source, sep, rest = value.partition(":")
    if not sep or len(source) == 1 or "/" in source or "\\" in source:  # no prefix (a colon in a path, a drive)
        if _path_like(value):
            return WeightsSpec("checkpoint", path=Path(value), text=value)
        _malformed(value, "it has no source prefix and is not a file path")
    if source not in SOURCES:
        _malformed(value, f"unknown source {source!r}")
    if not rest:
        _malformed(value, f"nothing follows {source}:")
    if source == "checkpoint":
        return WeightsSpec(source, path=Path(rest), text=value)
    if source == "torchvision" and _TORCHVISION_NAME.fullmatch(rest):
        return WeightsSpec(source, name=rest, text=value)
    if source == "keras" and rest in KERAS_ARCHS:
        return WeightsSpec(source, name=rest, text=value)
    if _path_like(rest):
        return WeightsSpec(source, path=Path(rest), text=value)
    if source == "timm" and _TIMM_NAME.fullmatch(rest):
        return WeightsSpec(source, name=rest, text=value)
    expected = {
        "torchvision": "a weights enum <Model>_Weights.<TAG> or a file path",
        "timm": "a timm model name with an optional .tag, or a file path",
        "keras": f"one of {', '.join(KERAS_ARCHS)} or a file path",
    }[source]
    _malformed(value, f"{rest!r} is not {expected}")


def _path_like(text: str) -> bool:
    return "/" in text or "\\" in text or text.lower().endswith(FILE_SUFFIXES)


def _malformed(text: str | None, why: str):
    raise WeightsError(f"malformed weights={text!r}: {why}. Valid forms: {'; '.join(FORMS)}")


def load_weights(spec: WeightsSpec, arch: str | None = None, download: bool = False) -> LoadedWeights:
    """The model ``spec`` names, eval mode, under the padding its weights were trained with.

    ``arch``: the architecture of a bare file (else read from its tensors); for any
    other form it must agree with the weights'. ``download``: fetch published weights
    missing from their hub's cache.
    """
    if spec.source == "checkpoint":
        loaded = _from_checkpoint(spec.path)
    elif spec.source == "torchvision" and spec.published:
        state_dict, native_arch, origin = torchvision_weights(spec.name, download)
        loaded = LoadedWeights(from_torchvision(state_dict, native_arch), origin)
    elif spec.source == "torchvision":
        state_dict = load_state_dict_file(spec.path)
        name = arch or infer_arch(state_dict, TORCHVISION_ARCHS, spec.path)
        loaded = LoadedWeights(from_torchvision(state_dict, name), OriginProtocol())
    elif spec.source == "timm" and spec.published:
        state_dict, origin = timm_weights(spec.name, download)
        loaded = LoadedWeights(from_timm(state_dict, spec.name), origin)
        loaded.model.meta.preprocessing = origin.preprocessing
    elif spec.source == "timm":
        state_dict = load_state_dict_file(spec.path)
        name = arch or infer_timm_arch(state_dict, spec.path)
        loaded = LoadedWeights(from_timm(state_dict, name), OriginProtocol())
    else:
        path = keras_file(spec.name, download) if spec.published else spec.path
        if not path.is_file():
            raise WeightsUnavailable(f"no Keras weights file at {path}")
        name = spec.name or arch or infer_keras_arch(path)
        loaded = LoadedWeights(from_keras(path, name), OriginProtocol())
    if arch is not None and loaded.model.meta.arch != canonical_name(arch):
        raise WeightsError(
            f"{spec.text} holds a {loaded.model.meta.arch}, but model={arch} was given; drop model= or make them agree"
        )
    return loaded


def _from_checkpoint(path: Path) -> LoadedWeights:
    if not path.is_file():
        raise WeightsUnavailable(f"no checkpoint at {path}; pass weights=/path/to/last.pt (a train.py run dir has one)")
    model = load_model(path)
    # train.py records its config: the size and resize ratio the run validated at.
    data = load_checkpoint(path).get("config", {}).get("data", {})
    origin = OriginProtocol(
        crop=data.get("image_size"), crop_pct=data.get("crop_pct"), interpolation=data.get("interpolation")
    )
    return LoadedWeights(model, origin)


def infer_arch(state_dict: dict[str, torch.Tensor], candidates: tuple[str, ...], where: object = "") -> str:
    """The first of ``candidates`` whose state dict has exactly these keys and shapes."""
    if "fc.weight" not in state_dict:
        raise WeightsError(f"{where} has no fc.weight; name the architecture with model=<arch>")
    got = {k: tuple(v.shape) for k, v in state_dict.items()}
    for name in candidates:
        with torch.device("meta"):  # shapes only: nothing is allocated or initialised
            model = build_model(name, state_dict["fc.weight"].shape[0])
        if {k: tuple(v.shape) for k, v in model.state_dict().items()} == got:
            return name
    raise WeightsError(f"{where} fits none of {', '.join(candidates)}; name the architecture with model=<arch>")


def infer_timm_arch(state_dict: dict[str, torch.Tensor], where: object = "") -> str:
    """timm's ResNetV2 layout (``stages.N.blocks.M``) by its depth, else as torchvision's."""
    blocks = {int(m[1]) for key in state_dict if (m := re.match(r"stages\.2\.blocks\.(\d+)\.", key))}
    if not blocks:
        return infer_arch(state_dict, TIMM_ARCHS, where)
    depth = {6: "resnetv2_50", 23: "resnetv2_101"}.get(max(blocks) + 1)
    if depth is None:
        raise WeightsError(f"{where} is a timm ResNetV2 of an unsupported depth; name it with model=<arch>")
    return depth


def infer_keras_arch(path: Path) -> str:
    """Which of our archs a Keras file holds, from its layer names."""
    from ..weights import _keras_arch_of, _read_keras_h5  # the importer's own reader, so both agree

    name = _keras_arch_of(_read_keras_h5(path))
    if name is None:
        raise WeightsError(f"{path} holds none of {', '.join(KERAS_ARCHS)}; name the architecture with model=<arch>")
    return name


def with_padding(model: ResNet, padding: Padding) -> ResNet:
    """The same weights under another padding: rebuilt from ``model.meta``, tensors shared.

    State-dict keys never depend on the padding (``resnet.blocks``), so this is a plain
    load; the new model's meta records the new padding and keeps everything else.
    """
    meta = model.meta
    with torch.device("meta"):
        rebuilt = build_model(
            meta.arch,
            meta.num_classes,
            padding,
            in_chans=model.conv1.in_channels,
            **{"bn_eps": meta.bn_eps, **meta.overrides},
        )
    rebuilt.load_state_dict(model.state_dict(), assign=True)
    rebuilt.meta = replace(meta, padding=padding.as_dict(), padding_name=padding.name)
    return rebuilt.eval()
