"""Weights from anywhere, as :func:`resnet.build_model` models under their native padding.

One module per source (:data:`SOURCES`) locates its files, converts its layout and names its
architecture; this module parses ``weights=`` values and hands each to its source.

The forms (:data:`FORMS`)::

    /path/to/last.pt  or  checkpoint:/path/to/last.pt   our checkpoints (train.py, resnet.checkpoint)
    torchvision:ResNet50_Weights.IMAGENET1K_V1          torchvision's published weights (DEFAULT works)
    torchvision:/path/to/state_dict.pth                 a torchvision state dict on disk
    timm:resnet50.a1_in1k                               timm's published weights (Hugging Face hub)
    timm:/path/to/model.safetensors                     a timm state dict on disk (.safetensors, .pth, .bin)
    keras:/path/to/resnet50v2.h5                        a keras.applications weights file (.h5, .keras)
    keras:ResNet50V2                                    keras.applications' published file (Keras's cache)
    fbtorch:/path/to/resnet200.pth                      fb.resnet.torch's resnet-200.t7 converted to PyTorch
    tensornets:/path/to/resnext_50_32x4d.npz            a TensorNets weights file (ResNet200v2, ResNeXt, WRN, v2)

To run imported weights under another padding: ``resnet.with_padding(model, "asymmetric")``.

>>> model = from_torchvision(torchvision.models.resnet50(weights="DEFAULT").state_dict(), "resnet50")
>>> loaded = load_weights(parse_weights("keras:ResNet50V2"))
"""

from __future__ import annotations

from pathlib import Path

from ..archs import canonical_name
from ..checkpoint import CheckpointError
from . import checkpoint, fbtorch, keras, tensornets, timm, torchvision
from .common import LoadedWeights, OriginProtocol, WeightsError, WeightsSpec, WeightsUnavailable
from .fbtorch import from_fbtorch
from .keras import from_keras
from .tensornets import from_tensornets
from .timm import from_timm
from .torchvision import from_torchvision

SOURCES = {  # the weights= prefix users type -> its module
    "checkpoint": checkpoint,
    "torchvision": torchvision,
    "timm": timm,
    "keras": keras,
    "fbtorch": fbtorch,
    "tensornets": tensornets,
}
FORMS = tuple(form for source in SOURCES.values() for form in source.FORMS)
FILE_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".h5", ".keras", ".npz", ".t7")

__all__ = [
    "FORMS",
    "SOURCES",
    "LoadedWeights",
    "OriginProtocol",
    "WeightsError",
    "WeightsSpec",
    "WeightsUnavailable",
    "check_has_ema",
    "from_fbtorch",
    "from_keras",
    "from_tensornets",
    "from_timm",
    "from_torchvision",
    "load_weights",
    "parse_weights",
]


def parse_weights(text: str | None) -> WeightsSpec:
    """Parse a ``weights=`` value; a malformed one fails listing the valid forms."""
    value = (text or "").strip()
    if not value:
        _malformed(text, "it is empty")
    prefix, sep, rest = value.partition(":")
    if not sep or len(prefix) == 1 or "/" in prefix or "\\" in prefix:  # no prefix (a colon in a path, a drive)
        if _path_like(value):
            return WeightsSpec("checkpoint", path=Path(value), text=value)
        _malformed(value, "it has no source prefix and is not a file path")
    if prefix not in SOURCES:
        _malformed(value, f"unknown source {prefix!r}")
    if not rest:
        _malformed(value, f"nothing follows {prefix}:")
    source = SOURCES[prefix]
    if prefix == "checkpoint" or _path_like(rest):  # a path first: timm:model.safetensors is a file
        return WeightsSpec(prefix, path=Path(rest), text=value)
    if hasattr(source, "is_published_name") and source.is_published_name(rest):  # else files only
        return WeightsSpec(prefix, name=rest, text=value)
    _malformed(value, f"{rest!r} is not {source.EXPECTED}")


def load_weights(
    spec: WeightsSpec, arch: str | None = None, download: bool = False, ema: bool = False
) -> LoadedWeights:
    """The model ``spec`` names, eval mode, under the padding its weights were trained with.

    ``arch``: the architecture of a bare file (else told from its tensors or layer names);
    for any other form it must agree with the weights'. ``download``: fetch published
    weights missing from their hub's cache. ``ema``: a train.py checkpoint's EMA weights.
    """
    if ema:
        check_has_ema(spec)
    try:
        source = SOURCES[spec.source]
        loaded = source.load(spec, arch, download, ema=True) if ema else source.load(spec, arch, download)
    except WeightsError:
        raise
    except CheckpointError as err:  # a file cut short, pickled code, another arch's weights: the line names it
        raise WeightsError(str(err)) from None
    except ValueError as err:  # an arch the source cannot import, ...
        raise WeightsError(f"weights={spec.text}: {str(err).splitlines()[0]}") from None
    if arch is not None and loaded.model.meta.arch != canonical_name(arch):
        raise WeightsError(
            f"{spec.text} holds a {loaded.model.meta.arch}, but model={arch} was given; drop model= or make them agree"
        )
    return loaded


def check_has_ema(spec: WeightsSpec) -> None:
    """``ema=true`` reads the EMA weights train.py keeps in its checkpoints; other sources have none."""
    if spec.source != "checkpoint":
        raise WeightsError(
            f"ema=true reads the EMA weights a train.py checkpoint keeps; {spec.text} is "
            f"{spec.source} weights, which have none: drop ema=true"
        )


def _path_like(text: str) -> bool:
    return "/" in text or "\\" in text or text.lower().endswith(FILE_SUFFIXES)


def _malformed(text: str | None, why: str):
    raise WeightsError(f"malformed weights={text!r}: {why}. Valid forms: {'; '.join(FORMS)}")
