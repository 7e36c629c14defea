"""Input normalisation on the device: uint8 batches in, float batches out.

The loaders hand out uint8 pixels (4x less to copy to the GPU than float32); the
scheme that turns them into network input is part of what a checkpoint means
(docs/padding.md, "Other things that silently change accuracy"), so it is a named option:

* ``torch``: x/255, minus mean (0.485, 0.456, 0.406), over std (0.229, 0.224, 0.225), RGB
  (torchvision's ImageNet weights);
* ``caffe``: RGB -> BGR, minus (103.939, 116.779, 123.68) on the 0-255 scale
  (MSRA Caffe weights, ``keras.applications.imagenet_utils`` mode ``caffe``);
* ``tf``: x/127.5 - 1 (TF-slim, Keras ``ResNet*V2``).

Every scheme is one affine map per channel, ``x * scale + shift`` (plus a channel flip for
``caffe``), so it is one fused elementwise op that keeps a ``channels_last`` layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Preprocessing:
    """``out = (x - mean) / std`` per channel, for pixel values x on the 0-255 scale."""

    mean: tuple[float, float, float]  # 0-255 scale, in the network's channel order
    std: tuple[float, float, float]  # 0-255 scale
    bgr: bool = False  # flip RGB input to BGR before subtracting


PREPROCESSING: dict[str, Preprocessing] = {
    "torch": Preprocessing(mean=(0.485 * 255, 0.456 * 255, 0.406 * 255), std=(0.229 * 255, 0.224 * 255, 0.225 * 255)),
    "caffe": Preprocessing(mean=(103.939, 116.779, 123.68), std=(1.0, 1.0, 1.0), bgr=True),
    "tf": Preprocessing(mean=(127.5, 127.5, 127.5), std=(127.5, 127.5, 127.5)),
}


class Normalize(nn.Module):
    """Map a batch of pixels (uint8, or float on the 0-255 scale) to float32 network input, on any
    device, in the input's memory format. A 1-channel batch (Fashion-MNIST) uses the mean of the
    three channels' constants, what a grey image replicated to RGB would get on average.
    """

    def __init__(self, preprocessing: str = "torch"):
        super().__init__()
        if preprocessing not in PREPROCESSING:
            raise ValueError(f"unknown preprocessing {preprocessing!r}; choose one of {', '.join(PREPROCESSING)}")
        spec = PREPROCESSING[preprocessing]
        self.preprocessing = preprocessing
        self.bgr = spec.bgr
        mean = torch.tensor(spec.mean, dtype=torch.float64)
        std = torch.tensor(spec.std, dtype=torch.float64)
        # Not persistent: derived from the name, which is what a checkpoint records.
        self.register_buffer("scale", (1 / std).float().view(1, 3, 1, 1), persistent=False)
        self.register_buffer("shift", (-mean / std).float().view(1, 3, 1, 1), persistent=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dim() != 4 or images.shape[1] not in (1, 3):
            raise ValueError(f"expected a batch [N, 1 or 3, H, W], got shape {tuple(images.shape)}")
        scale, shift = self.scale, self.shift
        if images.shape[1] == 1:
            scale, shift = scale.mean(1, keepdim=True), shift.mean(1, keepdim=True)
        elif self.bgr:
            images = images.flip(1)
        return torch.addcmul(shift, images.float(), scale)

    def extra_repr(self) -> str:
        return repr(self.preprocessing)
