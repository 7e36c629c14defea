"""``data.decode=gpu``: loader workers send encoded JPEGs and their crop boxes; the GPU decodes them.

Why ``torchvision.io.decode_jpeg(device="cuda")`` and not DALI's mixed decoder: it is nvJPEG's
batched decode behind a call the project already makes on the CPU, with no second pipeline
framework, no extra wheel (DALI is ~500 MB) and no change to how batches, samplers, resumes and
skipped images work. The workers keep everything cheap: reading the file, its header, the crop
box and flip drawn exactly as on the CPU path (:class:`EncodedRandomResizedCropFlip`), so a
run's boxes do not depend on where it decodes. The main process then decodes the batch with
one nvJPEG call and crops, resizes (antialiased) and flips on the GPU
(:func:`crop_resize_flip`).

Files nvJPEG does not read (CMYK JPEGs, PNG data under a .JPEG name, anything not a JPEG), and
progressive JPEGs, which it reads only one by one with its Huffman decoding on the main
process's CPU (:func:`nvjpeg_reads`), are decoded by the worker on the CPU as before and travel
as pixels beside the encoded ones. Validation stays on the CPU path: exact, the publisher's
preprocessing. What can go wrong on the GPU and what guards it: docs/gpu.md.

Pixels: the GPU's IDCT and upsampling are not libjpeg-turbo's, and the resize runs in float32
(rounded to uint8) where the CPU path uses ATen's uint8 kernel, so images differ from the CPU
path by a few levels; augmentation statistics do not.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.utils.data import default_collate

from .batch import BadImage, Batch, split_bad
from .decode import jpeg_frame
from .transforms import RandomResizedCropFlip

DECODES = ("cpu", "gpu")


class EncodedCrop(NamedTuple):
    """One training image as a worker sends it: the file's bytes and where to crop it."""

    data: torch.Tensor  # uint8 [n_bytes]
    box: tuple[int, int, int, int]  # top, left, height, width, in full-resolution pixels
    flip: bool
    size: int  # output side
    interpolation: str  # bilinear | bicubic: the resize the CPU path would use (data.interpolation)


class EncodedBatch:
    """A training batch before decoding: encoded JPEGs, and images a worker had to decode itself.

    ``len()`` and ``shape[0]`` are the image count (what the training loop checks before a step);
    :meth:`decode` turns it into uint8 [N, 3, size, size] on a device.
    """

    def __init__(self, items: list[EncodedCrop | torch.Tensor], size: int):
        self.items = items
        self.size = size

    def __len__(self) -> int:
        return len(self.items)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (len(self.items), 3, self.size, self.size)

    def decode(self, device: torch.device) -> torch.Tensor:
        from torchvision.io import ImageReadMode, decode_jpeg

        encoded = [i for i, item in enumerate(self.items) if isinstance(item, EncodedCrop)]
        out = torch.empty(self.shape, dtype=torch.uint8, device=device)
        if encoded:
            datas = [self.items[i].data for i in encoded]
            # one batched nvJPEG call on CUDA; the same call decodes on the CPU (the tests' path)
            images = decode_jpeg(datas, mode=ImageReadMode.RGB, device=device)
            crops = [self.items[i] for i in encoded]
            out[encoded] = crop_resize_flip(images, crops)
        for i, item in enumerate(self.items):
            if not isinstance(item, EncodedCrop):
                out[i] = item.to(device, non_blocking=True)
        return out


def crop_resize_flip(images: list[torch.Tensor], crops: list[EncodedCrop]) -> torch.Tensor:
    """Decoded images [3, H, W] (any device) -> uint8 [N, 3, size, size]: each one's box, resized
    with its interpolation, antialiased, in float32, rounded, flipped where asked."""
    out = []
    for image, crop in zip(images, crops):
        top, left, height, width = crop.box
        window = image[:, top : top + height, left : left + width].unsqueeze(0).float()
        resized = F.interpolate(window, size=(crop.size, crop.size), mode=crop.interpolation, antialias=True,
                                align_corners=False)  # fmt: skip
        resized = resized.round_().clamp_(0, 255).to(torch.uint8)[0]
        out.append(resized.flip(-1) if crop.flip else resized)
    return torch.stack(out)


def nvjpeg_reads(data: bytes) -> bool:
    """Whether ``data`` is a JPEG that the GPU decodes here: baseline or extended sequential
    Huffman (SOF0, SOF1), one (grey) or three components. Progressive JPEGs (SOF2) nvJPEG reads,
    but not in its batched decode: torchvision decodes them one by one, their Huffman decoding on
    the main process's CPU, while the workers have idle cores for exactly that; they go to the
    workers. CMYK/YCCK JPEGs (four components), lossless and arithmetic-coded ones and anything
    else are decoded on the CPU too."""
    return _nvjpeg_frame(data) is not None


def _nvjpeg_frame(data: bytes) -> tuple[int, int, int, int] | None:
    frame = jpeg_frame(data)
    return frame if frame is not None and frame[0] in (0xC0, 0xC1) and frame[3] in (1, 3) else None


class EncodedRandomResizedCropFlip(RandomResizedCropFlip):
    """:class:`RandomResizedCropFlip` that leaves the decode to the GPU: the same header read and
    the same random draws (the same boxes for the same seeds), then the bytes instead of pixels."""

    def __call__(self, data: bytes) -> EncodedCrop | torch.Tensor:
        frame = _nvjpeg_frame(data)  # the frame header, read once: whether nvJPEG reads it, and its size
        if frame is None:
            return super().__call__(data)  # decoded here, on the CPU, as without data.decode=gpu
        _, width, height, _ = frame
        box, flip = self.sample(height, width)
        return EncodedCrop(torch.frombuffer(bytearray(data), dtype=torch.uint8), box, flip, self.size,
                           self.interpolation)

    def __repr__(self) -> str:
        return super().__repr__().replace("RandomResizedCropFlip(", "EncodedRandomResizedCropFlip(decode=gpu, ", 1)


def collate_encoded(samples: list[tuple[EncodedCrop | torch.Tensor, int] | BadImage]) -> Batch:
    """:func:`data.batch.collate` for :class:`EncodedRandomResizedCropFlip`: the images stay a list
    (an :class:`EncodedBatch`); unreadable files are dropped and counted the same way."""
    good, bad = split_bad(samples)
    labels = default_collate([label for _, label in good]) if good else torch.empty(0, dtype=torch.int64)
    items = [image for image, _ in good]
    size = items[0].size if items and isinstance(items[0], EncodedCrop) else (items[0].shape[-1] if items else 0)
    return Batch(EncodedBatch(items, size), labels, len(bad), bad)


def check_decode(decode: str, device: torch.device | str | None = None) -> str:
    """``data.decode``: a known value, and for ``gpu`` a CUDA ``device`` to decode on (None: only
    the value is checked; the loaders do not care where batches are decoded); else one line."""
    if decode not in DECODES:
        raise ValueError(f"data.decode={decode} is not one of {', '.join(DECODES)}: pass data.decode=cpu or gpu")
    if decode == "gpu" and device is not None and torch.device(device).type != "cuda":
        raise ValueError(f"data.decode=gpu decodes JPEGs with nvJPEG on a CUDA device and this run's device is "
                         f"{torch.device(device).type}: pass data.decode=cpu")
    return decode
