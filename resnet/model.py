"""One ResNet class for the whole family; :func:`build_model` is the public entry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial

import torch
from torch import nn

from .archs import ARCHS, Arch, canonical_name
from .blocks import BLOCKS, BasicBlock, Block, Bottleneck
from .padding import Padding, freeze_padding, make_conv, make_max_pool, resolve_padding

PREPROCESSING = ("torch", "caffe", "tf")


@dataclass
class ModelMeta:
    """What a checkpoint must carry besides weights to mean the same thing again."""

    arch: str
    num_classes: int
    padding: dict[str, str]
    padding_name: str
    preprocessing: str
    input_size: int
    bn_eps: float
    source: str = "scratch"  # where the weights came from: scratch, torchvision, timm, keras, a path
    overrides: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Convs:
    """Conv factory for blocks: the ``block_conv`` scheme applies to stride-2 convs with
    kernel > 1; every other conv pads symmetrically, which is the same in every scheme."""

    block_scheme: str
    bias: str

    def __call__(
        self, in_ch: int, out_ch: int, kernel_size: int, stride: int = 1, groups: int = 1, normed: bool = True
    ) -> nn.Conv2d:
        scheme = self.block_scheme if stride > 1 and kernel_size > 1 else "symmetric"
        return make_conv(scheme, in_ch, out_ch, kernel_size, stride, groups, bias=self.has_bias(normed))

    def has_bias(self, normed: bool) -> bool:
        return self.bias == "all" or (self.bias == "unnormed" and not normed)


class ResNet(nn.Module):
    """Stem (conv, BN, ReLU, max pool), stages ``layer1..N``, optional final BN+ReLU, head.

    Names follow torchvision, so torchvision and timm ResNet state dicts load as they are.
    """

    def __init__(self, arch: Arch, num_classes: int = 1000, padding: Padding | None = None, in_chans: int = 3):
        super().__init__()
        padding = padding or Padding()
        if arch.block not in BLOCKS:
            raise ValueError(f"unknown block type {arch.block!r}; choose one of {', '.join(BLOCKS)}")
        block: type[Block] = BLOCKS[arch.block]
        conv = _Convs(padding.block_conv, arch.conv_bias)
        norm = partial(nn.BatchNorm2d, eps=arch.bn_eps)

        self.conv1 = make_conv(
            padding.stem_conv,
            in_chans,
            arch.stem_width,
            arch.stem_kernel,
            arch.stem_stride,
            bias=conv.has_bias(arch.stem_norm),
        )
        # Pre-activation stems (TF-slim, Keras V2, timm resnetv2) are conv + pool: no BN, no ReLU.
        self.bn1 = norm(arch.stem_width) if arch.stem_norm else nn.Identity()
        self.relu = nn.ReLU(inplace=True) if arch.stem_norm else nn.Identity()
        self.maxpool = (
            make_max_pool(padding.stem_pool, padding.stem_pool_value) if arch.stem_pool else nn.Identity()
        )

        in_ch = arch.stem_width
        for i, (depth, planes, stride) in enumerate(zip(arch.depths, arch.widths, arch.strides)):
            stage, in_ch = self._make_stage(arch, block, in_ch, planes, depth, stride, conv, norm)
            self.add_module(f"layer{i + 1}", stage)
        self.num_stages = len(arch.depths)
        self.num_features = in_ch
        self.final_bn = norm(in_ch) if arch.final_norm else nn.Identity()
        self.final_relu = nn.ReLU(inplace=True) if arch.final_norm else nn.Identity()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)
        self._init_weights()

    @staticmethod
    def _make_stage(arch, block, in_ch, planes, depth, stride, conv, norm) -> tuple[nn.Sequential, int]:
        out_ch = planes * block.expansion
        units = []
        for i in range(depth):
            strided_unit = 0 if arch.stride_unit == "first" else depth - 1
            s = stride if i == strided_unit else 1
            downsample: nn.Module | None = None
            if in_ch != out_ch or (s != 1 and arch.stride_unit == "first"):
                proj = [conv(in_ch, out_ch, 1, s, normed=arch.shortcut_norm)]
                downsample = nn.Sequential(*proj, norm(out_ch)) if arch.shortcut_norm else nn.Sequential(*proj)
            elif s != 1:  # TF-slim v2: a strided identity is a 1x1/s max pool (subsampling)
                downsample = nn.MaxPool2d(1, s)
            units.append(
                block(
                    in_ch,
                    planes,
                    s,
                    downsample,
                    conv=conv,
                    norm=norm,
                    groups=arch.groups,
                    base_width=arch.width_per_group,
                )
            )
            in_ch = out_ch
        return nn.Sequential(*units), out_ch

    def _init_weights(self) -> None:
        # As torchvision: He init for convs, BN at identity.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def zero_init_residual(self) -> None:
        """Zero the last BN of each post-activation residual branch (Goyal et al. 2017),
        so every block starts as the identity. Pre-activation branches end in a conv."""
        for m in self.modules():
            if isinstance(m, Bottleneck):
                nn.init.zeros_(m.bn3.weight)
            elif isinstance(m, BasicBlock):
                nn.init.zeros_(m.bn2.weight)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(1, self.num_stages + 1):
            x = getattr(self, f"layer{i}")(x)
        return self.final_relu(self.final_bn(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.forward_features(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build_model(
    arch: str,
    num_classes: int = 1000,
    padding: str | Mapping | Padding | None = None,
    *,
    input_size: int | tuple[int, int] | None = None,
    in_chans: int = 3,
    zero_init_residual: bool = False,
    **overrides,
) -> ResNet:
    """Build ``arch`` (a name of :func:`list_archs` or a TensorNets alias).

    ``padding``: a preset name of ``resnet.padding.PRESETS``, a per-site mapping
    (optionally with a base ``preset``), or None for the architecture's native preset.
    ``input_size``: fix the input size so every pad is precomputed (export, speed).
    ``overrides``: any field of :class:`resnet.archs.Arch` (``bn_eps``, ``widths``, ...).
    """
    name = canonical_name(arch)
    spec = ARCHS[name]
    # Sequences from configs (lists, Hydra ListConfig) become tuples of plain values.
    overrides = {k: v if isinstance(v, str) or not isinstance(v, Sequence) else tuple(v) for k, v in overrides.items()}
    unknown = sorted(set(overrides) - set(Arch.__dataclass_fields__))
    if unknown:
        raise ValueError(f"unknown override(s) {', '.join(unknown)}; valid: {', '.join(Arch.__dataclass_fields__)}")
    spec = replace(spec, **overrides)
    if spec.preprocessing not in PREPROCESSING:
        raise ValueError(f"unknown preprocessing {spec.preprocessing!r}; choose one of {', '.join(PREPROCESSING)}")
    pad = resolve_padding(padding, native=spec.native_padding)
    model = ResNet(spec, num_classes=num_classes, padding=pad, in_chans=in_chans)
    if zero_init_residual:
        model.zero_init_residual()
    if input_size is not None:
        freeze_padding(model, input_size)
    model.meta = ModelMeta(
        arch=name,
        num_classes=num_classes,
        padding=pad.as_dict(),
        padding_name=pad.name,
        preprocessing=spec.preprocessing,
        input_size=spec.input_size,
        bn_eps=spec.bn_eps,
        overrides=dict(overrides),
    )
    return model


def list_archs() -> list[str]:
    """Every architecture name :func:`build_model` accepts (aliases not included)."""
    return list(ARCHS)
