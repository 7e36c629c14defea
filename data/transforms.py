"""Augmentation: ImageNet presets on file bytes, and a batched one for small in-memory data.

The presets take an image file's bytes and return RGB uint8 [3, size, size]; they decode
themselves so that the training crop is known before decoding (see :mod:`data.decode`).
Normalisation is not here: it runs on the device, :class:`data.normalize.Normalize`.
Randomness comes from torch's global RNG, which the DataLoader seeds in each worker.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .decode import check_interpolation, decode_resize_center_crop, decode_resized_crop, image_size


class RandomResizedCropFlip:
    """Training preset: the Inception crop (Szegedy et al. 2015, torchvision
    ``RandomResizedCrop``: area fraction in ``scale``, aspect ratio in ``ratio``, log-uniform),
    resized to ``size``, then a horizontal flip with probability ``hflip``."""

    ATTEMPTS = 10  # torchvision's: boxes drawn before falling back to a central crop

    def __init__(
        self,
        size: int = 224,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        interpolation: str = "bilinear",
        hflip: float = 0.5,
        roi: bool = True,
    ):
        self._size: int | torch.Tensor = size
        self.roi = roi  # decode only the crop window of a JPEG (data.roi; exact); False: benchmarks' baseline
        self.scale = scale
        self.ratio = ratio
        self.log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
        self.interpolation = check_interpolation(interpolation)
        self.hflip = hflip

    @property
    def size(self) -> int:
        return int(self._size)

    def set_size(self, size: int) -> None:
        """A new output side from the next image on; seen by loader workers already running once
        :meth:`share_size` was called before they started (progressive resizing)."""
        if isinstance(self._size, torch.Tensor):
            self._size.fill_(size)
        else:
            self._size = size

    def share_size(self) -> None:
        """Keep the output side in shared memory, so that :meth:`set_size` reaches every worker."""
        self._size = torch.tensor(self.size, dtype=torch.int64).share_memory_()

    def sample(self, height: int, width: int) -> tuple[tuple[int, int, int, int], bool]:
        """A crop box (top, left, height, width) and whether to flip: torchvision's
        ``RandomResizedCrop.get_params`` step for step, each image's random numbers drawn by one call to
        torch's RNG, not ~10 tiny tensor ops (costlier right after a decode: docs/benchmarks.md).
        """
        area = height * width
        (s0, s1), (r0, r1) = self.scale, self.log_ratio
        draws = torch.rand(self.ATTEMPTS * 4 + 1).tolist()
        flip = draws[-1] < self.hflip
        for k in range(0, self.ATTEMPTS * 4, 4):
            target_area = area * (s0 + (s1 - s0) * draws[k])
            aspect_ratio = math.exp(r0 + (r1 - r0) * draws[k + 1])
            w = int(round(math.sqrt(target_area * aspect_ratio)))
            h = int(round(math.sqrt(target_area / aspect_ratio)))
            if 0 < w <= width and 0 < h <= height:
                top = int(draws[k + 2] * (height - h + 1))  # uniform in [0, height - h], as torch.randint
                left = int(draws[k + 3] * (width - w + 1))
                return (top, left, h, w), flip
        # Fallback: the central crop with the aspect ratio clamped into ``ratio``.
        in_ratio = width / height
        if in_ratio < min(self.ratio):
            w, h = width, int(round(width / min(self.ratio)))
        elif in_ratio > max(self.ratio):
            w, h = int(round(height * max(self.ratio))), height
        else:
            w, h = width, height
        return ((height - h) // 2, (width - w) // 2, h, w), flip

    def __call__(self, data: bytes) -> torch.Tensor:
        width, height = image_size(data)  # from the file's header: the crop is known before decoding
        box, flip = self.sample(height, width)
        return decode_resized_crop(data, None, box, self.size, self.interpolation, flip, self.roi)

    def __repr__(self) -> str:
        return (
            f"RandomResizedCropFlip(size={self.size}, scale={self.scale}, ratio=({self.ratio[0]:.4g}, "
            f"{self.ratio[1]:.4g}), interpolation={self.interpolation!r}, hflip={self.hflip})"
        )


class ResizeCenterCrop:
    """Evaluation preset: shorter side to ``floor(size / crop_pct)`` (0.875: 256 -> 224,
    341 -> 299; 224/232: the 232 -> 224 of torchvision's V2 weights), then the central crop."""

    def __init__(self, size: int = 224, crop_pct: float = 0.875, interpolation: str = "bilinear"):
        if not 0 < crop_pct <= 1:
            raise ValueError(f"crop_pct must be in (0, 1], got {crop_pct}")
        self.size = size
        self.crop_pct = crop_pct
        self.resize = math.floor(size / crop_pct)  # timm's rule
        self.interpolation = check_interpolation(interpolation)

    def __call__(self, data: bytes) -> torch.Tensor:
        return decode_resize_center_crop(data, self.resize, self.size, self.interpolation)

    def __repr__(self) -> str:
        return f"ResizeCenterCrop(resize={self.resize}, size={self.size}, interpolation={self.interpolation!r})"


def random_crop_flip(images: torch.Tensor, padding: int = 4, generator: torch.Generator | None = None) -> torch.Tensor:
    """Per image of a uint8 batch [N, C, H, W]: zero-pad by ``padding``, take a random H x W
    window, flip it horizontally with probability 1/2 (the CIFAR recipe of He et al. 2016). Two
    gathers for the whole batch (faster on CPU than one 2-D index), on ``images``' device, where
    ``generator`` must live too (None: the global RNG).
    """
    n, c, height, width = images.shape
    device = images.device
    padded = F.pad(images, (padding, padding, padding, padding))
    top = torch.randint(0, 2 * padding + 1, (n, 1, 1, 1), device=device, generator=generator)
    left = torch.randint(0, 2 * padding + 1, (n, 1, 1, 1), device=device, generator=generator)
    flip = torch.rand((n, 1, 1, 1), device=device, generator=generator) < 0.5
    rows = top + torch.arange(height, device=device).view(1, 1, height, 1)
    cols = torch.arange(width, device=device).view(1, 1, 1, width)
    cols = left + torch.where(flip, width - 1 - cols, cols)
    window_rows = padded.gather(2, rows.expand(n, c, height, padded.shape[3]))
    return window_rows.gather(3, cols.expand(n, c, height, width))
