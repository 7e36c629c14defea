"""Residual blocks. All share one constructor; layers come from factories.

Module names follow torchvision (``conv1``, ``bn1``, ..., ``downsample``) so that
state-dict keys never depend on the padding scheme or on the block type.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .padding import blur_pool, make_conv


@dataclass
class ConvFactory:
    """Builds a block's convs: the ``block_conv`` scheme applies to stride-2 convs with
    kernel > 1; every other conv pads symmetrically, which is the same in every scheme.
    ``bias``: the architecture's ``conv_bias``.

    ``blur`` (``block_conv_blur``): each block's strided main-path conv (the 3x3, or v1's
    1x1) runs at stride 1, padded symmetrically, and the block applies :meth:`blur_pool`
    after its BN and ReLU; a ``shortcut`` projection stays strided, as in timm's
    anti-aliased ResNets (``resnetblur50``)."""

    block_scheme: str
    bias: str
    blur: bool = False

    def __call__(
        self,
        in_ch: int,
        out_ch: int,
        kernel_size: int,
        stride: int = 1,
        groups: int = 1,
        normed: bool = True,
        shortcut: bool = False,
    ) -> nn.Conv2d:
        if self.blur and not shortcut:
            stride = 1  # the block's BlurPool subsamples instead
        scheme = self.block_scheme if stride > 1 and kernel_size > 1 else "symmetric"
        return make_conv(scheme, in_ch, out_ch, kernel_size, stride, groups, bias=self.has_bias(normed))

    def blur_pool(self, channels: int, stride: int) -> nn.Module | None:
        """The BlurPool that subsamples by ``stride`` after the strided conv's activation, or None."""
        return blur_pool(channels, stride) if self.blur and stride > 1 else None

    def has_bias(self, normed: bool) -> bool:
        return self.bias == "all" or (self.bias == "unnormed" and not normed)


class Block(nn.Module):
    """What every block type shares. Each takes ``(in_ch, planes, stride, downsample, *, conv,
    norm, groups, base_width)``: ``planes`` is the stage's base width; the block outputs ``planes * expansion``
    channels. ``downsample`` maps the shortcut to the output shape (or is None).
    ``conv`` decides each conv's padding and bias; ``norm`` builds BatchNorm.

    ``strided_conv`` names the conv that carries the block's stride. Where the block is
    blurred (``block_conv_blur``), that conv runs at stride 1 and ``aa`` (timm's name), a
    BlurPool2d, subsamples right after its BN and ReLU; elsewhere ``aa`` is None. Its
    filter is no state-dict entry, so the keys stay torchvision's.
    """

    expansion = 1
    strided_conv = "conv1"

    def __init__(self, stride: int, downsample: nn.Module | None) -> None:
        super().__init__()
        self.downsample = downsample
        self.stride = stride
        self.relu = nn.ReLU(inplace=True)


class BasicBlock(Block):
    """Two 3x3 convs (ResNet-18/34)."""

    def __init__(self, in_ch, planes, stride=1, downsample=None, *, conv, norm, groups=1, base_width=64) -> None:
        super().__init__(stride, downsample)
        if groups != 1 or base_width != 64:
            raise ValueError("BasicBlock supports only groups=1 and width_per_group=64")
        self.conv1 = conv(in_ch, planes, 3, stride)
        self.bn1 = norm(planes)
        self.aa = conv.blur_pool(planes, stride)
        self.conv2 = conv(planes, planes, 3)
        self.bn2 = norm(planes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        if self.aa is not None:
            out = self.aa(out)
        out = self.bn2(self.conv2(out))
        out += identity  # in place, as torchvision: one allocation less per block
        return self.relu(out)


class Bottleneck(Block):
    """1x1 -> 3x3 (grouped for ResNeXt) -> 1x1, post-activation.

    torchvision's "v1.5" puts the stride on the 3x3; the original ResNet (Caffe MSRA,
    Keras ``ResNet50``) puts it on the first 1x1, where no padding is involved.
    """

    expansion = 4
    stride_on_3x3 = True
    strided_conv = "conv2"

    def __init__(self, in_ch, planes, stride=1, downsample=None, *, conv, norm, groups=1, base_width=64) -> None:
        super().__init__(stride, downsample)
        width = int(planes * (base_width / 64.0)) * groups
        s1, s3 = (1, stride) if self.stride_on_3x3 else (stride, 1)
        self.conv1 = conv(in_ch, width, 1, s1)
        self.bn1 = norm(width)
        self.conv2 = conv(width, width, 3, s3, groups)
        self.bn2 = norm(width)
        self.aa = conv.blur_pool(width, stride)  # after bn2 (v1.5) or bn1 (v1): where the stride sits
        self.conv3 = conv(width, planes * self.expansion, 1)
        self.bn3 = norm(planes * self.expansion)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        if self.aa is not None and not self.stride_on_3x3:
            out = self.aa(out)
        out = self.relu(self.bn2(self.conv2(out)))
        if self.aa is not None and self.stride_on_3x3:
            out = self.aa(out)
        out = self.bn3(self.conv3(out))
        out += identity  # in place, as torchvision: one allocation less per block
        return self.relu(out)


class BottleneckV1(Bottleneck):
    """Stride on the first 1x1 (He et al. 2015, Caffe MSRA and Keras ``ResNet50``)."""

    stride_on_3x3 = False
    strided_conv = "conv1"


class PreActBottleneck(Block):
    """Pre-activation bottleneck (He et al. 2016, "Identity Mappings").

    ``bn1`` + ReLU open the residual branch. Where the projection shortcut reads
    from is what tells the pre-activation families apart: TF-slim, Keras
    ``ResNet50V2`` and timm ``resnetv2_*`` feed it the pre-activated input
    (``shortcut_from_preact``); fb.resnet.torch (TensorNets ``ResNet200v2``) feeds
    it the block's raw input.
    """

    expansion = 4
    shortcut_from_preact = True
    strided_conv = "conv2"

    def __init__(self, in_ch, planes, stride=1, downsample=None, *, conv, norm, groups=1, base_width=64) -> None:
        super().__init__(stride, downsample)
        width = int(planes * (base_width / 64.0)) * groups
        self.bn1 = norm(in_ch)
        self.conv1 = conv(in_ch, width, 1)
        self.bn2 = norm(width)
        self.conv2 = conv(width, width, 3, stride, groups)
        self.bn3 = norm(width)
        self.aa = conv.blur_pool(width, stride)  # after conv2, bn3 and ReLU (pre-activation numbering)
        self.conv3 = conv(width, planes * self.expansion, 1, normed=False)
        # A strided identity shortcut (TF-slim's last unit) is a 1x1/s max pool: it
        # reads the raw input, like the identity it replaces.
        self.shortcut_reads_preact = self.shortcut_from_preact and not isinstance(downsample, nn.MaxPool2d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        preact = self.relu(self.bn1(x))
        shortcut = x if self.downsample is None else self.downsample(preact if self.shortcut_reads_preact else x)
        out = self.conv1(preact)
        out = self.relu(self.bn3(self.conv2(self.relu(self.bn2(out)))))
        if self.aa is not None:
            out = self.aa(out)
        out = self.conv3(out)
        out += shortcut
        return out


class PreActBottleneckRawShortcut(PreActBottleneck):
    """fb.resnet.torch pre-activation: the conv+BN projection reads the raw input."""

    shortcut_from_preact = False


BLOCKS: dict[str, type[Block]] = {
    "basic": BasicBlock,
    "bottleneck": Bottleneck,
    "bottleneck_v1": BottleneckV1,
    "preact": PreActBottleneck,
    "preact_raw_shortcut": PreActBottleneckRawShortcut,
}
