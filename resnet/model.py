"""One ResNet class for the whole family; :func:`build_model` is the public entry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from .archs import ARCHS, Arch, arch_spec
from .blocks import BLOCKS, BasicBlock, Block, Bottleneck, ConvFactory
from .padding import Padding, blur_pool, freeze_padding, init_blur_filters, make_conv, make_max_pool, resolve_padding

PREPROCESSING = ("torch", "caffe", "tf")


@dataclass(frozen=True)
class ModelMeta:
    """What a checkpoint must carry besides weights to mean the same thing again.

    Set once, by :func:`build_model` (which every loader and importer goes through), and
    never changed: the same weights under other settings are a new model with a new meta
    (:func:`with_padding`).
    """

    arch: str
    num_classes: int
    padding: Padding
    preprocessing: str  # torch | caffe | tf (data.normalize)
    eval_size: int  # the crop evaluation feeds these weights by default (px)
    bn_eps: float
    in_chans: int = 3
    source: str = "scratch"  # where the weights came from: scratch, torchvision, timm, keras, fbtorch, tensornets
    overrides: tuple[tuple[str, object], ...] = ()  # Arch fields that differ from the table row

    @property
    def padding_name(self) -> str:
        return self.padding.name

    def build_kwargs(self) -> dict:
        """The keyword arguments of :func:`build_model` that rebuild this model (with its
        ``arch``, ``num_classes`` and ``padding``)."""
        return {"in_chans": self.in_chans, "source": self.source, **dict(self.overrides)}

    def as_dict(self) -> dict:
        """Plain data, as checkpoints and ONNX metadata store it."""
        return {
            "arch": self.arch,
            "num_classes": self.num_classes,
            "padding": self.padding.as_dict(),
            "padding_name": self.padding_name,
            "preprocessing": self.preprocessing,
            "eval_size": self.eval_size,
            "bn_eps": self.bn_eps,
            "in_chans": self.in_chans,
            "source": self.source,
            "overrides": dict(self.overrides),
        }


class ResNet(nn.Module):
    """Stem (conv, BN, ReLU, max pool), stages ``layer1..N``, optional final BN+ReLU, head.

    Names follow torchvision, so torchvision and timm ResNet state dicts load as they are.
    ``meta`` (number of classes, input channels, padding per site, ...) is read-only.
    Blurred sites (``Padding.*_blur``) add BlurPools (``stem_aa``, ``maxpool.blur``, each
    block's ``aa``) whose filters are no state-dict entries: the keys stay the same.
    """

    def __init__(self, arch: Arch, meta: ModelMeta):
        super().__init__()
        self._meta = meta
        padding, in_chans = meta.padding, meta.in_chans
        if arch.block not in BLOCKS:
            raise ValueError(f"unknown block type {arch.block!r}; choose one of {', '.join(BLOCKS)}")
        block: type[Block] = BLOCKS[arch.block]
        conv = ConvFactory(padding.block_conv, arch.conv_bias, padding.block_conv_blur)
        norm = partial(nn.BatchNorm2d, eps=arch.bn_eps)

        # stem_conv_blur: the conv at stride 1 (padded symmetrically), and stem_aa subsamples after its ReLU
        stem_blur = padding.stem_conv_blur and arch.stem_stride > 1
        stem_scheme, stem_stride = ("symmetric", 1) if stem_blur else (padding.stem_conv, arch.stem_stride)
        stem_bias = conv.has_bias(arch.stem_norm)
        self.conv1 = make_conv(stem_scheme, in_chans, arch.stem_width, arch.stem_kernel, stem_stride, bias=stem_bias)
        # Pre-activation stems (TF-slim, Keras V2, timm resnetv2) are conv + pool: no BN, no ReLU.
        self.bn1 = norm(arch.stem_width) if arch.stem_norm else nn.Identity()
        self.relu = nn.ReLU(inplace=True) if arch.stem_norm else nn.Identity()
        self.stem_aa = blur_pool(arch.stem_width, arch.stem_stride) if stem_blur else None
        pool = partial(make_max_pool, padding.stem_pool, padding.stem_pool_value, blur=padding.stem_pool_blur)
        self.maxpool = pool(channels=arch.stem_width) if arch.stem_pool else nn.Identity()

        in_ch = arch.stem_width
        factories = dict(conv=conv, norm=norm, groups=arch.groups, base_width=arch.width_per_group)
        for i, (depth, planes, stride) in enumerate(zip(arch.depths, arch.widths, arch.strides)):
            out_ch = planes * block.expansion
            strided_unit = 0 if arch.stride_unit == "first" else depth - 1
            units = []
            for u in range(depth):
                s = stride if u == strided_unit else 1
                downsample: nn.Module | None = None
                if in_ch != out_ch or (s != 1 and arch.stride_unit == "first"):
                    proj = [conv(in_ch, out_ch, 1, s, normed=arch.shortcut_norm, shortcut=True)]
                    downsample = nn.Sequential(*proj, norm(out_ch)) if arch.shortcut_norm else nn.Sequential(*proj)
                elif s != 1:  # TF-slim v2: a strided identity is a 1x1/s max pool (subsampling)
                    downsample = nn.MaxPool2d(1, s)
                units.append(block(in_ch, planes, s, downsample, **factories))
                in_ch = out_ch
            self.add_module(f"layer{i + 1}", nn.Sequential(*units))
        self.num_stages = len(arch.depths)
        self.num_features = in_ch
        self.final_bn = norm(in_ch) if arch.final_norm else nn.Identity()
        self.final_relu = nn.ReLU(inplace=True) if arch.final_norm else nn.Identity()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, meta.num_classes)
        # As torchvision: He init for convs, BN at identity. Not on the meta device (importers build
        # there, then assign every tensor): it holds no values, and its init pulls in torch._dynamo.
        if not any(p.is_meta for p in self.parameters()):
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)

    @property
    def meta(self) -> ModelMeta:
        return self._meta

    def zero_init_residual(self) -> None:
        """Zero the last BN of each post-activation residual branch (Goyal et al. 2017),
        so every block starts as the identity. Pre-activation branches end in a conv."""
        for m in self.modules():
            if isinstance(m, Bottleneck):
                nn.init.zeros_(m.bn3.weight)
            elif isinstance(m, BasicBlock):
                nn.init.zeros_(m.bn2.weight)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        if self.stem_aa is not None:
            x = self.stem_aa(x)
        x = self.maxpool(x)
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
    source: str = "scratch",
    **overrides,
) -> ResNet:
    """Build ``arch`` (a name of :func:`list_archs` or a TensorNets alias).

    ``padding``: a preset name of ``resnet.padding.PRESETS``, a per-site mapping
    (optionally with a base ``preset``), or None for the architecture's native preset.
    ``input_size``: fix the input size so every pad is precomputed (export, speed).
    ``source``: where the weights will come from (recorded in ``meta``).
    ``overrides``: any field of :class:`resnet.archs.Arch` (``bn_eps``, ``preprocessing``,
    ``eval_size``, ``widths``, ...); they are recorded in ``meta`` so the model rebuilds.
    """
    name, spec, overrides = arch_spec(arch, overrides)
    overrides = {key: value for key, value in overrides.items() if value != getattr(ARCHS[name], key)}  # what differs
    if spec.preprocessing not in PREPROCESSING:
        raise ValueError(f"unknown preprocessing {spec.preprocessing!r}; choose one of {', '.join(PREPROCESSING)}")
    meta = ModelMeta(
        arch=name,
        num_classes=num_classes,
        padding=resolve_padding(padding, native=spec.native_padding),
        preprocessing=spec.preprocessing,
        eval_size=spec.eval_size,
        bn_eps=spec.bn_eps,
        in_chans=in_chans,
        source=source,
        overrides=tuple(sorted(overrides.items())),
    )
    model = ResNet(spec, meta)
    if zero_init_residual:
        model.zero_init_residual()
    if input_size is not None:
        freeze_padding(model, input_size)
    return model


def with_padding(model: ResNet, padding: str | Mapping | Padding) -> ResNet:
    """The same weights under another padding scheme: the one way to re-grid a model.

    ``padding``: a preset name, a :class:`Padding`, or a per-site mapping whose sites
    left out keep ``model``'s own scheme. A new model is built from ``model.meta``
    (architecture, classes, overrides) and shares ``model``'s tensors (state-dict keys
    never depend on the padding); its ``meta`` records the new scheme. The train/eval
    mode is kept; pads are left dynamic (freeze with :func:`resnet.padding.freeze_padding`).
    A BlurPool's filter (blurred sites) is no state-dict entry: it is made anew, beside the weights.
    """
    meta = model.meta
    new = resolve_padding(padding, native=meta.padding)
    with torch.device("meta"):  # nothing allocated: the tensors are assigned below
        rebuilt = build_model(meta.arch, meta.num_classes, new, **meta.build_kwargs())
    rebuilt.load_state_dict(model.state_dict(), assign=True)
    init_blur_filters(rebuilt)
    return rebuilt.train(model.training)


def list_archs() -> list[str]:
    """Every architecture name :func:`build_model` accepts (aliases not included)."""
    return list(ARCHS)
