"""``data.decode=gpu``: loader workers send encoded JPEGs and their crop boxes; the GPU decodes them.

``torchvision.io.decode_jpeg(device="cuda")`` rather than DALI's mixed decoder: nvJPEG's batched
decode behind a call the project already makes on the CPU, with no second pipeline framework, no
large wheel and no change to how batches, samplers, resumes and skipped images work. The workers
read the file and its header and draw the crop box and flip exactly as on the CPU path
(:class:`EncodedRandomResizedCropFlip`), so a run's boxes do not depend on where it decodes; the
main process decodes the batch with one nvJPEG call and crops, resizes (antialiased) and flips
on the GPU (:func:`crop_resize_flip`).

What nvJPEG's batched decode does not read (:func:`nvjpeg_reads`) the worker decodes on the CPU,
and it travels as pixels beside the encoded ones. Validation stays on the CPU path: exact, the
publisher's preprocessing. What can go wrong on the GPU and what guards it: docs/gpu.md. Pixels
differ from the CPU path's by a few levels (the GPU's IDCT and upsampling, a float32 resize where
the CPU uses ATen's uint8 kernel); augmentation statistics do not.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import accumulate
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.utils.data import default_collate, get_worker_info

from .batch import BadImage, Batch, split_bad
from .decode import check_pixels, jpeg_frame
from .transforms import RandomResizedCropFlip

DECODES = ("cpu", "gpu")


class EncodedCrop(NamedTuple):
    """One training image as a worker sends it: the file's bytes and where to crop it."""

    data: torch.Tensor  # uint8 [n_bytes]
    box: tuple[int, int, int, int]  # top, left, height, width, in full-resolution pixels
    flip: bool
    size: int  # output side
    interpolation: str  # bilinear | bicubic: the resize the CPU path would use (data.interpolation)


@dataclass(eq=False)
class EncodedBatch:
    """A training batch before decoding, as one worker sends it: every encoded JPEG of the batch in
    one uint8 tensor, and the images a worker had to decode itself stacked in a second one.

    Two tensors (three with the labels) cross from the worker per batch, each non-empty one a file
    descriptor in torch's default sharing strategy: one tensor per image, times workers x prefetch
    batches in flight, runs out of descriptors ("received 0 items of ancdata", "Too many open
    files"). ``len()`` and ``shape[0]`` are the image count (what the training loop checks before a
    step); :meth:`decode` turns it into uint8 [N, 3, size, size] on a device, in the batch's order.
    """

    data: torch.Tensor  # uint8 [n_bytes]: the encoded JPEGs, one after the other
    offsets: list[int]  # where each starts in ``data``, and where the last ends (len = encoded + 1)
    boxes: list[tuple[int, int, int, int]]  # top, left, height, width of each encoded one, full resolution
    flips: list[bool]
    pixels: torch.Tensor  # uint8 [P, 3, size, size]: images a worker decoded on the CPU, already cropped and flipped
    decoded: list[int]  # where each of ``pixels`` goes in the batch (sorted)
    size: int  # output side
    interpolation: str = "bilinear"  # bilinear | bicubic: the resize the CPU path would use

    @classmethod
    def collate(cls, items: list[EncodedCrop | torch.Tensor]) -> EncodedBatch:
        """The worker's side: join the encoded files into one tensor (in shared memory inside a
        worker process, as :func:`torch.utils.data.default_collate` stacks, one copy less) and
        stack the decoded images."""
        crops = [item for item in items if isinstance(item, EncodedCrop)]
        decoded = [i for i, item in enumerate(items) if not isinstance(item, EncodedCrop)]
        sizes = {crop.size for crop in crops} | {items[i].shape[-1] for i in decoded}
        if len(sizes) > 1:
            raise ValueError(f"one batch holds crops of sizes {sorted(sizes)}; its images must have one size")
        size = sizes.pop() if sizes else 0
        interpolation = crops[0].interpolation if crops else "bilinear"
        offsets = [0, *accumulate(crop.data.numel() for crop in crops)]
        data = _shared_uint8(offsets[-1])
        if crops:
            torch.cat([crop.data for crop in crops], out=data)
        pixels = (default_collate([items[i] for i in decoded]) if decoded
                  else torch.empty(0, 3, size, size, dtype=torch.uint8))  # fmt: skip
        boxes, flips = [crop.box for crop in crops], [crop.flip for crop in crops]
        return cls(data, offsets, boxes, flips, pixels, decoded, size, interpolation)

    def __len__(self) -> int:
        return len(self.boxes) + len(self.decoded)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (len(self), 3, self.size, self.size)

    def pin_memory(self) -> EncodedBatch:
        """The same batch in page-locked memory (the DataLoader's pin-memory thread calls this)."""
        return replace(self, data=self.data.pin_memory(), pixels=self.pixels.pin_memory())

    def decode(self, device: torch.device | str) -> torch.Tensor:
        device = torch.device(device)
        if not self.boxes:
            return self.pixels.to(device, non_blocking=True)
        resized = crop_resize_flip(self.decode_whole(device), self.boxes, self.flips, self.size, self.interpolation)
        if not self.decoded:
            return resized  # every image was encoded: the stacked tensor is the batch
        # Mixed: put the worker-decoded images in their places with one cat of slices. Indexing
        # ``out[list] = ...`` instead builds the index on the host and copies it to the device
        # with a blocking copy, once per batch.
        pixels = self.pixels.to(resized.device, non_blocking=True)
        pieces, encoded = [], 0
        for taken, position in enumerate(self.decoded):
            pieces += [resized[encoded : position - taken], pixels[taken : taken + 1]]  # the encoded ones before it
            encoded = position - taken
        return torch.cat([*pieces, resized[encoded:]])

    def decode_whole(self, device: torch.device | str) -> list[torch.Tensor]:
        """The encoded images decoded whole, uncropped, each uint8 [3, H, W] on ``device`` (nvJPEG on
        CUDA): what :meth:`decode` crops, resizes and flips."""
        views = [self.data[a:b] for a, b in zip(self.offsets, self.offsets[1:])]  # no copies
        return _decode_jpegs(views, torch.device(device))


def _shared_uint8(numel: int) -> torch.Tensor:
    """An uninitialised uint8 [numel]: in shared memory inside a DataLoader worker (what the
    tensor would be moved to anyway when sent), ordinary memory elsewhere."""
    if numel == 0 or get_worker_info() is None:
        return torch.empty(numel, dtype=torch.uint8)
    storage = torch.UntypedStorage._new_shared(numel)
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, (numel,), (1,))


_SIDE_STREAMS: dict[torch.device, torch.cuda.Stream] = {}


def _decode_jpegs(views: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Decode the JPEG bytes with one batched ``decode_jpeg`` call on ``device``: nvJPEG on CUDA,
    libjpeg-turbo on the CPU (the tests' path).

    On CUDA the call runs on a side stream of its own. torchvision 0.29's ``decode_jpegs_cuda``
    allocates its outputs with the caller's current stream and writes them from a private stream
    that waits on nothing (torchvision #9606; nvJPEG's hardware engine does not order its writes
    after the stream it is given either, torchcodec #1634): with the training stream current, the
    allocator may hand it a block freed a moment ago by the step, whose queued backward kernels
    still read it, and the decode overwrites it (wrong gradients or NaNs, now and then). Here:

    * the outputs come from the side stream's own pool, where no kernel runs; a block goes back to
      it only through :meth:`torch.Tensor.record_stream` below, once the training stream has
      *finished* (an event the allocator polls) everything queued before the images were freed.
      So the decoder only writes memory no queued work touches, whether or not it honours streams;
    * the side stream waits for the training stream (a decoder that submits its work on the current
      stream is then ordered after the step), and the training stream for the side stream before
      it crops, resizes and trains on the images.

    The crop/resize runs on the training stream, not the side stream: images freed on the stream
    that allocated them are reusable at once there, and the next batch's decode, which waits for
    nothing, could be given a block a queued resize still reads."""
    from torchvision.io import ImageReadMode, decode_jpeg

    if device.type != "cuda":
        return decode_jpeg(views, mode=ImageReadMode.RGB, device=device)
    current = torch.cuda.current_stream(device)
    side = _SIDE_STREAMS.get(device)
    if side is None:
        side = _SIDE_STREAMS[device] = torch.cuda.Stream(device=device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        images = decode_jpeg(views, mode=ImageReadMode.RGB, device=device)
    current.wait_stream(side)
    for image in images:
        image.record_stream(current)  # its block is not reused before the training stream is past it
    return images


def crop_resize_flip(images: list[torch.Tensor], boxes: list[tuple[int, int, int, int]], flips: list[bool],
                     size: int, interpolation: str = "bilinear") -> torch.Tensor:  # fmt: skip
    """Decoded images [3, H, W] (any device) -> uint8 [N, 3, size, size]: each one's box, resized
    with ``interpolation``, antialiased, in float32, rounded, flipped where asked.

    Two kernels an image, kept one by one: one ``F.interpolate`` call resizes from one input size
    only, and padding boxes to a common size or writing each resize as two matrix products changes
    pixels. Rounding, clamping and flipping act pixel by pixel, so they run once on the batch (the
    same pixels, bit for bit: the tests), ~2N+6 kernels instead of ~5.5N; the price is the batch in
    float32 until rounded (154 MB for 256 x 224^2, twice that for a moment)."""
    resized = []
    for image, (top, left, height, width) in zip(images, boxes):
        window = image[:, top : top + height, left : left + width].unsqueeze(0).float()
        resized.append(F.interpolate(window, size=(size, size), mode=interpolation, antialias=True,
                                     align_corners=False))  # fmt: skip
    batch = torch.cat(resized).round_().clamp_(0, 255).to(torch.uint8)
    if any(flips):
        mask = torch.tensor(flips, dtype=torch.bool).to(batch.device, non_blocking=True).view(-1, 1, 1, 1)
        batch = torch.where(mask, batch.flip(-1), batch)
    return batch


def nvjpeg_reads(data: bytes) -> bool:
    """Whether ``data`` is a JPEG that the GPU decodes here: baseline or extended sequential
    Huffman (SOF0, SOF1), one (grey) or three components. Progressive JPEGs nvJPEG reads only one by
    one, their Huffman decoding on the main process's CPU: they go to the workers' idle cores, with
    CMYK/YCCK, lossless and arithmetic-coded JPEGs and anything else."""
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
        check_pixels(width, height)  # nvJPEG would allocate the whole image: data.decode.MAX_PIXELS, as on the CPU
        box, flip = self.sample(height, width)
        return EncodedCrop(
            torch.frombuffer(bytearray(data), dtype=torch.uint8), box, flip, self.size, self.interpolation
        )

    def __repr__(self) -> str:
        return super().__repr__().replace("RandomResizedCropFlip(", "EncodedRandomResizedCropFlip(decode=gpu, ", 1)


def collate_encoded(samples: list[tuple[EncodedCrop | torch.Tensor, int] | BadImage]) -> Batch:
    """:func:`data.batch.collate` for :class:`EncodedRandomResizedCropFlip`: the images become an
    :class:`EncodedBatch` (two tensors, whatever the batch size); unreadable files are dropped and
    counted the same way."""
    good, bad = split_bad(samples)
    labels = default_collate([label for _, label in good]) if good else torch.empty(0, dtype=torch.int64)
    return Batch(EncodedBatch.collate([image for image, _ in good]), labels, len(bad), bad)


def check_decode(decode: str, device: torch.device | str | None = None) -> str:
    """``data.decode``: a known value, and for ``gpu`` a CUDA ``device`` to decode on (None: only
    the value is checked; the loaders do not care where batches are decoded); else one line."""
    if decode not in DECODES:
        raise ValueError(f"data.decode={decode} is not one of {', '.join(DECODES)}: pass data.decode=cpu or gpu")
    if decode == "gpu" and device is not None and torch.device(device).type != "cuda":
        raise ValueError(
            f"data.decode=gpu decodes JPEGs with nvJPEG on a CUDA device and this run's device is "
            f"{torch.device(device).type}: pass data.decode=cpu"
        )
    return decode
