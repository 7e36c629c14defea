"""Published reference numbers (docs/padding.md, "Published numbers") as data.

TensorNets (taehoonlee/tensornets, README and issue #25): ImageNet val, single
centre crop, errors in %, each model under its native padding. Keys are our
architecture names (:data:`resnet.archs.ALIASES` maps TensorNets' names to them).

>>> TENSORNETS["resnet50_v2"].top1_err
24.04
"""

from __future__ import annotations

from dataclasses import dataclass

from ..archs import ALIASES

_TENSORNETS_NAME = {arch: name for name, arch in ALIASES.items()}  # ours -> TensorNets'


@dataclass(frozen=True)
class ReferenceResult:
    """One published single-crop evaluation; errors in %."""

    arch: str  # our architecture name
    source_name: str  # the name the source uses, e.g. "ResNet50v2"
    padding_name: str  # the preset of resnet.padding.PRESETS the numbers correspond to
    input_size: int
    top1_err: float
    top5_err: float
    top5_err_10crop: float | None = None  # 10-crop top-5 error


def _tensornets(arch: str, padding_name: str, input_size: int, top1: float, top5: float, top5_10crop: float):
    return ReferenceResult(arch, _TENSORNETS_NAME[arch], padding_name, input_size, top1, top5, top5_10crop)


# Native padding = the preset resnet.archs gives these weights: Caffe MSRA v1 -> "caffe",
# TF-slim v2 -> "tf_slim", fb.resnet.torch / facebookresearch ResNeXt / WRN (Torch7) ->
# "symmetric". Input 224, the TF-slim v2 models 299; ResNet200v2 (fb.resnet.torch) is
# tested at 224 in TensorNets' own tests/test_nets.py.
TENSORNETS: dict[str, ReferenceResult] = {
    r.arch: r
    for r in (
        _tensornets("resnet50_v1", "caffe", 224, 25.126, 7.982, 6.842),
        _tensornets("resnet101_v1", "caffe", 224, 23.580, 7.214, 6.092),
        _tensornets("resnet152_v1", "caffe", 224, 23.396, 6.882, 5.908),
        _tensornets("resnet50_v2", "tf_slim", 299, 24.040, 6.966, 5.896),
        _tensornets("resnet101_v2", "tf_slim", 299, 22.766, 6.184, 5.158),
        _tensornets("resnet152_v2", "tf_slim", 299, 21.968, 5.838, 4.900),
        _tensornets("resnet200_v2", "symmetric", 224, 21.714, 5.848, 4.830),
        _tensornets("resnext50_32x4d", "symmetric", 224, 22.260, 6.190, 5.410),
        _tensornets("resnext101_32x4d", "symmetric", 224, 21.270, 5.706, 4.842),
        _tensornets("resnext101_64x4d", "symmetric", 224, 20.506, 5.408, 4.564),
        _tensornets("wide_resnet50_2", "symmetric", 224, 21.982, 6.066, 5.116),
    )
}

# The v2 models with pool1 padded symmetrically with zeros instead of their native
# asymmetric (0, 1). At 299 that is our "keras" preset: its 7x7/2 stem (3, 3) and 3x3/2
# block pads (1, 1) equal TF-slim's fixed pads, so only pool1 differs.
TENSORNETS_ZERO_POOL: dict[str, ReferenceResult] = {
    r.arch: r
    for r in (
        _tensornets("resnet50_v2", "keras", 299, 24.526, 7.252, 6.012),
        _tensornets("resnet101_v2", "keras", 299, 23.116, 6.488, 5.230),
        _tensornets("resnet152_v2", "keras", 299, 22.236, 6.080, 4.960),
    )
}


def tensornets_reference(arch: str, padding_name: str | None = None) -> ReferenceResult | None:
    """TensorNets' numbers for ``arch`` (ours), native padding unless ``padding_name`` is
    another published variant ("keras" for the v2 zero-padded pool1); None if unpublished."""
    native = TENSORNETS.get(arch)
    if padding_name is None or (native is not None and native.padding_name == padding_name):
        return native
    variant = TENSORNETS_ZERO_POOL.get(arch)
    return variant if variant is not None and variant.padding_name == padding_name else None
