"""Crops for evaluation, taken on the device from images resized once (in the loader).

Single crop: the central ``crop`` x ``crop`` of the resized image.
10-crop (TensorNets' "10-5" column, torchvision's ``TenCrop``, Krizhevsky et al. 2012):
the four corner crops and the central crop, and the horizontal flip of each;
the softmax of the ten is averaged. The ten are cut out of the batch by one gather,
so the network sees one batch of ``10 x N`` crops in one forward.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .loader import EvalProtocol, resize_shorter

View = Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]  # (images, sizes or None) -> network input


def centre_offset(length: int | torch.Tensor, crop: int) -> int | torch.Tensor:
    """Top (or left) of the central crop: torchvision's ``center_crop`` rounding, so the
    10-crop centre is the single-crop input pixel for pixel."""
    if isinstance(length, torch.Tensor):
        return torch.round((length - crop) / 2).long()  # round half to even, as Python's round
    return int(round((length - crop) / 2.0))


def crop_boxes(sizes: torch.Tensor, crop: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Tops and lefts [N, 5] of the five crops (top left, top right, bottom left, bottom right, centre)
    of images of ``sizes`` [N, 2] (height, width). Every image must be at least ``crop`` on both sides."""
    heights, widths = sizes[:, 0:1].long(), sizes[:, 1:2].long()
    if bool((heights < crop).any() or (widths < crop).any()):
        raise ValueError(f"an image of size {sizes.min(0).values.tolist()} is smaller than the {crop} px crop")
    zero = torch.zeros_like(heights)
    tops = torch.cat([zero, zero, heights - crop, heights - crop, centre_offset(heights, crop)], dim=1)
    lefts = torch.cat([zero, widths - crop, zero, widths - crop, centre_offset(widths, crop)], dim=1)
    return tops, lefts


def ten_crop(images: torch.Tensor, crop: int, sizes: torch.Tensor | None = None) -> torch.Tensor:
    """[N, C, H, W] -> [N, 10, C, crop, crop]: the five crops of :func:`crop_boxes`, then
    the same five flipped horizontally.

    ``sizes`` [N, 2]: each image's true (height, width) when the batch is zero-padded
    to its largest image (:func:`resnet.evaluation.loader.collate_padded`); None when
    every image fills the batch. The result is laid out channels-last in memory.
    """
    n, _, height, width = images.shape
    if sizes is None:
        sizes = torch.tensor([[height, width]], device=images.device).expand(n, 2)
    tops, lefts = crop_boxes(sizes.to(images.device), crop)
    span = torch.arange(crop, device=images.device)
    rows = tops[:, :, None] + span  # [N, 5, crop]
    cols = lefts[:, :, None] + span
    rows = torch.cat([rows, rows], dim=1)  # [N, 10, crop]
    cols = torch.cat([cols, cols.flip(-1)], dim=1)  # a flip is the same columns read right to left
    batch = torch.arange(n, device=images.device)[:, None, None, None]
    # Gather from an NHWC view, so every index copies one pixel's channels at once.
    pixels = images.permute(0, 2, 3, 1)[batch, rows[:, :, :, None], cols[:, :, None, :]]  # [N, 10, crop, crop, C]
    return pixels.permute(0, 1, 4, 2, 3)


def centre_crop(images: torch.Tensor, crop: int) -> torch.Tensor:
    """The central ``crop`` x ``crop`` of a batch whose images fill it (a view)."""
    height, width = images.shape[-2:]
    if height < crop or width < crop:
        raise ValueError(f"images of {height}x{width} are smaller than the {crop} px crop")
    top, left = centre_offset(height, crop), centre_offset(width, crop)
    return images[..., top : top + crop, left : left + crop]


def average_crops(logits: torch.Tensor, crops: int) -> torch.Tensor:
    """[N * crops, K] logits, crops of one image adjacent -> [N, K] scores to rank.

    One crop: the logits themselves (the softmax would not change their order). More:
    the mean of the crops' softmax probabilities, as TensorNets and Caffe average.
    """
    if crops == 1:
        return logits
    return logits.float().softmax(dim=-1).view(-1, crops, logits.shape[-1]).mean(dim=1)


def flip_pair(images: torch.Tensor) -> torch.Tensor:
    """[N, C, H, W] -> [N * 2, C, H, W]: each image, then its horizontal flip (FFCV's test-time
    flip averaging, the ``crops=2`` protocol)."""
    return torch.stack([images, images.flip(-1)], dim=1).flatten(0, 1)


def protocol_view(protocol: EvalProtocol, resize: int | None = None) -> View:
    """The input transform of the evaluation loop for ``protocol``: a loader batch (and each
    image's true size, for zero-padded batches) -> [N * crops, C, crop, crop], the crops of an
    image adjacent. ``resize``: the shorter side to resize to first, for data the loader did
    not resize (in-memory datasets)."""

    def view(images: torch.Tensor, sizes: torch.Tensor | None) -> torch.Tensor:
        if resize is not None:
            images = resize_shorter(images, resize, protocol.interpolation)
        if protocol.crops == 1:
            return centre_crop(images, protocol.crop)  # a no-op where the loader already cropped
        if protocol.crops == 2:
            return flip_pair(centre_crop(images, protocol.crop))
        return ten_crop(images, protocol.crop, sizes).flatten(0, 1)

    return view
