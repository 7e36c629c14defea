"""Every architecture as data: one row each, consumed by :class:`resnet.model.ResNet`.

Where a family puts its stride (docs/padding.md, "Where the stride sits") decides which
layers the padding scheme touches; it is the ``block`` and ``stride_unit`` columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class Arch:
    block: str  # a key of resnet.blocks.BLOCKS
    depths: tuple[int, ...]  # blocks per stage
    widths: tuple[int, ...] = (64, 128, 256, 512)  # base width ("planes") per stage
    strides: tuple[int, ...] = (1, 2, 2, 2)  # stride of each stage
    stride_unit: str = "first"  # which unit of a stage strides: "first" or "last" (TF-slim v2)
    groups: int = 1  # ResNeXt cardinality
    width_per_group: int = 64  # ResNeXt / Wide ResNet bottleneck width
    stem_width: int = 64
    stem_kernel: int = 7
    stem_stride: int = 2
    stem_pool: bool = True  # 3x3/2 max pool after the stem conv
    stem_norm: bool = True  # BN + ReLU after the stem conv (False in pre-activation stems)
    shortcut_norm: bool = True  # BN after the 1x1 projection shortcut
    final_norm: bool = False  # BN + ReLU before global pooling (pre-activation)
    conv_bias: str = "none"  # "none", "all" (Keras v1) or "unnormed" (convs not followed by BN)
    bn_eps: float = 1e-5
    native_padding: str = "symmetric"  # the preset the model's reference weights were trained with
    preprocessing: str = "torch"  # "torch" mean/std, "caffe" BGR minus mean, "tf" [-1, 1]
    eval_size: int = 224  # default evaluation crop (px)


_TV = Arch(block="bottleneck", depths=(3, 4, 6, 3))  # torchvision v1.5: stride on the 3x3
# Caffe MSRA / Keras ResNet50: stride on the first 1x1, every conv has a bias (Keras).
_V1 = replace(_TV, block="bottleneck_v1", conv_bias="all", native_padding="caffe", preprocessing="caffe")
# TF-slim resnet_v2 / Keras ResNet50V2: stride in the last unit of stages 1-3, stem conv
# without BN, projection shortcut without BN, biases where no BN follows, final BN+ReLU.
_V2 = replace(
    _TV,
    block="preact",
    strides=(2, 2, 2, 1),
    stride_unit="last",
    stem_norm=False,
    shortcut_norm=False,
    final_norm=True,
    conv_bias="unnormed",
    native_padding="tf_slim",
    preprocessing="tf",
    eval_size=299,
)
# timm resnetv2_50/101: pre-activation, stride in the first unit, no biases.
_TIMM_V2 = replace(_TV, block="preact", stem_norm=False, shortcut_norm=False, final_norm=True)
# fb.resnet.torch pre-activation (TensorNets ResNet200v2): conv-BN-ReLU stem, conv+BN
# projection on the raw input, BN+ReLU opening every residual branch.
_FB_V2 = replace(_TV, block="preact_raw_shortcut", final_norm=True)
# Small models for 28-64 px inputs: a stride-2 3x3 stem conv and stride-2 block convs,
# so that padding still matters on even sizes, and CPU training takes minutes.
_TINY = Arch(
    block="basic",
    depths=(1, 1, 1),
    widths=(16, 32, 64),
    strides=(1, 2, 2),
    stem_width=16,
    stem_kernel=3,
    stem_pool=False,
    eval_size=28,
)

ARCHS: dict[str, Arch] = {
    # torchvision family (v1.5)
    "resnet18": replace(_TV, block="basic", depths=(2, 2, 2, 2)),
    "resnet34": replace(_TV, block="basic", depths=(3, 4, 6, 3)),
    "resnet50": _TV,
    "resnet101": replace(_TV, depths=(3, 4, 23, 3)),
    "resnet152": replace(_TV, depths=(3, 8, 36, 3)),
    "resnext50_32x4d": replace(_TV, groups=32, width_per_group=4),
    "resnext101_32x4d": replace(_TV, depths=(3, 4, 23, 3), groups=32, width_per_group=4),
    "resnext101_32x8d": replace(_TV, depths=(3, 4, 23, 3), groups=32, width_per_group=8),
    "resnext101_64x4d": replace(_TV, depths=(3, 4, 23, 3), groups=64, width_per_group=4),
    "wide_resnet50_2": replace(_TV, width_per_group=128),
    "wide_resnet101_2": replace(_TV, depths=(3, 4, 23, 3), width_per_group=128),
    # Caffe / Keras v1
    "resnet50_v1": _V1,
    "resnet101_v1": replace(_V1, depths=(3, 4, 23, 3)),
    "resnet152_v1": replace(_V1, depths=(3, 8, 36, 3)),
    # TF-slim / Keras v2
    "resnet50_v2": _V2,
    "resnet101_v2": replace(_V2, depths=(3, 4, 23, 3)),
    "resnet152_v2": replace(_V2, depths=(3, 8, 36, 3)),
    # pre-activation, stride in the first unit
    "resnet200_v2": replace(_FB_V2, depths=(3, 24, 36, 3)),
    "resnetv2_50": _TIMM_V2,
    "resnetv2_101": replace(_TIMM_V2, depths=(3, 4, 23, 3)),
    # small, for the built-in demo (28-64 px)
    "resnet_tiny": _TINY,
    "resnet_small": replace(_TINY, widths=(32, 64, 128), stem_width=32),  # the built-in demo's model
    "resnet_medium": replace(_TINY, depths=(2, 2, 2), widths=(32, 64, 128), stem_width=32),
    "resnet_tiny_v2": replace(_TINY, block="preact", stem_norm=False, shortcut_norm=False, final_norm=True),
}

# TensorNets' names (taehoonlee/tensornets) for the models of its padding comparison.
ALIASES: dict[str, str] = {
    "ResNet50": "resnet50_v1",
    "ResNet101": "resnet101_v1",
    "ResNet152": "resnet152_v1",
    "ResNet50v2": "resnet50_v2",
    "ResNet101v2": "resnet101_v2",
    "ResNet152v2": "resnet152_v2",
    "ResNet200v2": "resnet200_v2",
    "ResNeXt50c32": "resnext50_32x4d",
    "ResNeXt101c32": "resnext101_32x4d",
    "ResNeXt101c64": "resnext101_64x4d",
    "WideResNet50": "wide_resnet50_2",
}


def canonical_name(name: str) -> str:
    """Resolve an alias; fail with the list of valid names."""
    name = ALIASES.get(name, name)
    if name not in ARCHS:
        raise ValueError(
            f"unknown architecture {name!r}; choose one of {', '.join(ARCHS)} "
            f"(or a TensorNets alias: {', '.join(ALIASES)})"
        )
    return name


def arch_spec(name: str, overrides: Mapping[str, object] | None = None) -> tuple[str, Arch, dict[str, object]]:
    """(canonical name, its table row with ``overrides`` applied, the overrides as plain values).

    Overrides are :class:`Arch` fields; sequences (lists from a config or a checkpoint)
    become tuples, so that equal overrides compare equal however they arrived.
    """
    canonical = canonical_name(name)
    overrides = overrides or {}
    plain = {k: v if isinstance(v, str) or not isinstance(v, Sequence) else tuple(v) for k, v in overrides.items()}
    valid = [f.name for f in fields(Arch)]
    unknown = sorted(set(plain) - set(valid))
    if unknown:
        raise ValueError(f"unknown override(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
    spec = replace(ARCHS[canonical], **plain)
    stages = {len(spec.depths), len(spec.widths), len(spec.strides)}
    if len(stages) > 1 or min(spec.depths, default=0) < 1:
        raise ValueError(
            f"depths={list(spec.depths)}, widths={list(spec.widths)}, strides={list(spec.strides)}: one entry per "
            "stage in each, and at least one block per stage (leave a stage out of all three instead)"
        )
    return canonical, spec, plain
