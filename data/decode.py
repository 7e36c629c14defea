"""Encoded image bytes -> RGB uint8 tensor [3, H, W], optionally cropped and resized.

Full decodes go through ``torchvision.io.decode_image`` (libjpeg-turbo, libpng, ...), which reads
grayscale and CMYK JPEGs straight to RGB whatever the file is called (ImageNet has PNG data under
``.JPEG`` names); what it cannot read (BMP, TIFF, PPM) falls back to PIL. Every image mode comes
out as RGB uint8 (:func:`to_uint8`, :func:`pil_rgb`). Corrupt, truncated and empty files raise one
of :data:`DECODE_ERRORS`, and so does an image over :data:`MAX_PIXELS` pixels, refused from its
header (:func:`image_size`, which every decode path asks first).

Speed: each step below was measured cheaper than what it replaced (docs/benchmarks.md;
``python -m benchmarks.input_pipeline``, ``python -m benchmarks.decode_alternatives``).

* Only the crop's window of a JPEG is decoded (:mod:`data.roi`): the same pixels, less work.
* :func:`decode_resized_crop` copies the crop box out as [h, w, 3] rows before resizing.
  ATen's uint8 antialiased kernel reads and writes 3-channel pixels in place only in a
  channels-last-contiguous tensor whose batch stride is not ambiguous; a crop view of the
  decoded image is repacked to 4 channels on the way in and, its output allocated NCHW
  (pytorch#68430, which torchvision's ``resize_image`` works around too), on the way out.
  Same pixels. :func:`resize_rows` then calls ``F.interpolate`` itself, skipping ``TF.resize``'s Python.
* :func:`image_size` reads a JPEG's size from its frame header, not with PIL: tiny ops cost
  several times their isolated time right after a decode has filled the caches.
* :func:`decode_resized_crop` decodes a JPEG at 1/4 or 1/8 scale (libjpeg's DCT scaling,
  through PIL's ``Image.draft``) when the crop box still has at least the output resolution
  at that scale (within a few levels of the exact crop; tests/data/test_data.py). Never 1/2:
  PIL's 1/2 decode and resize is slower than the window decode and resize.
"""

from __future__ import annotations

import io
import platform
import struct
import warnings
import zlib

import numpy as np
import torch
import torch.nn.functional as F
import torchvision.transforms.v2.functional as TF
from PIL import Image
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms import InterpolationMode

from .roi import decode_region

# What a bad file can raise: PIL (OSError incl. UnidentifiedImageError, SyntaxError,
# struct/zlib errors, decompression bombs), torchvision (RuntimeError), numpy (ValueError).
# A bug in our code raises something else (TypeError, IndexError, ...) and is not hidden.
DECODE_ERRORS = (
    OSError,
    RuntimeError,
    ValueError,
    SyntaxError,
    EOFError,
    struct.error,
    zlib.error,
    Image.DecompressionBombError,
)

INTERPOLATIONS: dict[str, tuple[InterpolationMode, Image.Resampling]] = {
    "bilinear": (InterpolationMode.BILINEAR, Image.Resampling.BILINEAR),
    "bicubic": (InterpolationMode.BICUBIC, Image.Resampling.BICUBIC),
}

# The most pixels an image may have. A larger one is refused from its header, before a pixel is
# decoded: a decompression bomb (a 30000 x 30000 PNG of 875 kB decodes to 2.7 GB) is skipped and
# counted like any unreadable file, on every path: full and crop decodes, validation, eval.py,
# shards and the GPU's (data.gpu_decode). The number is PIL's own refusal (2 x Image.MAX_IMAGE_PIXELS,
# 13,377 x 13,377, 537 MB as RGB): what the training crop, which read headers with PIL, always
# refused. Lower it here to lower it everywhere; above it PIL refuses to open files of its own accord.
MAX_PIXELS = 178_956_970

DCT_REDUCTIONS = (4, 8)  # no 1/2: through PIL it saved too little to keep (docs/benchmarks.md, "Input pipeline")

# Where ATen's uint8 antialiased resize is vectorised, torchvision calls it on uint8 as is;
# elsewhere it resizes in float32 (torchvision.transforms.v2.functional._geometry,
# _do_native_uint8_resize_on_cpu). resize_rows follows the same rule, so the same pixels.
NATIVE_UINT8_RESIZE = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") or platform.machine() in (
    "aarch64",
    "arm64",
)


def check_interpolation(name: str) -> str:
    if name not in INTERPOLATIONS:
        raise ValueError(f"unknown interpolation {name!r}; choose one of {', '.join(INTERPOLATIONS)}")
    return name


def decode_rgb(data: bytes) -> torch.Tensor:
    """Decode any image file's bytes to RGB uint8 [3, H, W] (a channels-last view); an image over
    :data:`MAX_PIXELS` is refused from its header."""
    image_size(data)  # the header first: a bomb is refused before its pixels are
    try:
        image = decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)
    except RuntimeError:
        # Not a format torchvision reads, or corrupt: PIL either reads it or raises its own error.
        return pil_rgb(open_header(data))
    return to_uint8(image)  # a 16-bit PNG decodes to uint16


def to_uint8(values: torch.Tensor) -> torch.Tensor:
    """Samples of any type -> uint8, their type's range scaled onto 0-255 as torchvision's
    ``to_dtype(scale=True)`` does: 16-bit 0-65535 (the top 8 bits), 32-bit 0-2^31-1 (negative: 0),
    float 0-1 (outside, and NaN: clamped). PIL's ``convert`` clips instead: every 16-bit grey
    above 255 becomes white."""
    if values.dtype == torch.uint8:
        return values
    if values.is_floating_point():
        values = values.nan_to_num(0.0).clamp(0.0, 1.0)
    elif values.dtype.is_signed:
        values = values.clamp_min(0)
    return TF.to_dtype(values, torch.uint8, scale=True)


def pil_rgb(image: Image.Image) -> torch.Tensor:
    """Any PIL image -> RGB uint8 [3, H, W] (a channels-last view, as ``decode_image`` returns).
    Grey samples deeper than 8 bits (modes I;16*, I, F) are scaled by :func:`to_uint8`, every other
    mode is PIL's ``convert``; alpha is dropped, as ``decode_image(mode=RGB)`` drops it. A mode PIL
    cannot convert raises ``ValueError``: the file is skipped and counted."""
    if image.mode.startswith("I;16") or image.mode in ("I", "F"):
        samples = np.asarray(image)
        grey = to_uint8(torch.from_numpy(samples.astype(samples.dtype.newbyteorder("="))))  # I;16B is big-endian
        return grey.unsqueeze(-1).expand(-1, -1, 3).contiguous().permute(2, 0, 1)
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")  # straight to RGB, PIL warns about the transparency it drops
    return pil_to_tensor(image if image.mode == "RGB" else image.convert("RGB"))


def pil_to_tensor(image: Image.Image) -> torch.Tensor:
    """RGB PIL image -> uint8 [3, H, W] (a channels-last view, as ``decode_image`` returns)."""
    return torch.from_numpy(np.array(image, dtype=np.uint8)).permute(2, 0, 1)


def open_header(data: bytes) -> Image.Image:
    """A lazily decoded PIL image: size and format are known, no pixels are decoded yet."""
    if not data:
        raise OSError("empty file")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # MAX_PIXELS decides, not PIL's warning
        try:
            return Image.open(io.BytesIO(data))
        except Image.UnidentifiedImageError:  # PIL's message names the BytesIO object, <_io.BytesIO at 0x...>
            raise Image.UnidentifiedImageError("not an image file that PIL or torchvision can read") from None


def check_pixels(width: int, height: int) -> None:
    """Refuse an image of more than :data:`MAX_PIXELS` pixels (a ``DecompressionBombError``, one of
    :data:`DECODE_ERRORS`: the file is skipped and counted)."""
    if width * height > MAX_PIXELS:
        raise Image.DecompressionBombError(
            f"{width}x{height} is {width * height:,} pixels, over the limit of {MAX_PIXELS:,} "
            "(data.decode.MAX_PIXELS): a decompression bomb, or an image too large to decode"
        )


# Start-of-frame markers (ITU T.81 table B.1): every SOFn except DHT (C4), JPG (C8) and DAC (CC).
SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
STANDALONE_MARKERS = frozenset(range(0xD0, 0xD9)) | {0x01}  # RSTn, SOI, TEM: no length field
START_OF_SCAN = 0xDA
JPEG_END = b"\xff\xd9"  # EOI: inside a scan an FF byte is followed by 00 or an RSTn, never by D9
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_END = b"IEND\xaeB`\x82"  # the IEND chunk's type and CRC: it holds no data, so both are fixed


def jpeg_frame(data: bytes) -> tuple[int, int, int, int] | None:
    """A JPEG's start-of-frame segment: (marker, width, height, components), read in a few
    microseconds without decoding; None for anything else (or a JPEG with its height in a DNL
    segment, a broken header, or a JPEG cut short: :func:`check_end` says why)."""
    if data[:2] != b"\xff\xd8":
        return None
    frame, scan = _jpeg_header(data)
    return frame if frame is not None and data.rfind(JPEG_END, scan) >= 0 else None


def _jpeg_header(data: bytes) -> tuple[tuple[int, int, int, int] | None, int]:
    """(the start-of-frame segment as :func:`jpeg_frame` gives it, or None; where the header
    ends: the first scan, or where the walk over the segments stopped)."""
    frame = None
    pos, end = 2, len(data) - 10
    while pos < end and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
        elif marker in STANDALONE_MARKERS:
            pos += 2
        elif marker == START_OF_SCAN:
            break
        else:
            if marker in SOF_MARKERS and frame is None:
                height, width = struct.unpack_from(">HH", data, pos + 5)
                frame = (marker, width, height, data[pos + 9]) if height and width else ()  # (): in a DNL
            pos += 2 + struct.unpack_from(">H", data, pos + 2)[0]
    return frame or None, pos


def check_end(data: bytes) -> None:
    """Refuse a JPEG or PNG cut short: an ``OSError`` when its last marker (a JPEG's end of image,
    FF D9; a PNG's IEND chunk) is not after its header (an EXIF thumbnail's own end does not count).

    A decoder need not reach the end of a file to give pixels (a crop's window stops at its last
    row, :mod:`data.roi`), so a file missing its last bytes would pass or fail with the crop an
    epoch drew. Looked for from the end, past any bytes after it (a camera's trailer, padding), the
    marker is found in under a microsecond (docs/benchmarks.md)."""
    if data[:2] == b"\xff\xd8":
        start, end, what = _jpeg_header(data)[1], JPEG_END, "JPEG without its end-of-image marker (FF D9)"
    elif data[:8] == PNG_SIGNATURE:
        start, end, what = len(PNG_SIGNATURE), PNG_END, "PNG without its IEND chunk"
    else:
        return
    if data.rfind(end, start) < 0:
        raise OSError(f"{what}: the file is cut short")


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) of an image file without decoding it; an image of more than :data:`MAX_PIXELS`
    pixels raises (:func:`check_pixels`), and so does a JPEG or PNG cut short (:func:`check_end`).
    A JPEG's is read from its start-of-frame segment (:func:`jpeg_frame`, a few microseconds against
    ~20 for ``Image.open``); anything else goes to PIL, which raises for a file it cannot identify.
    """
    frame = jpeg_frame(data)  # a whole JPEG: None for one cut short
    if frame is None:
        check_end(data)
    width, height = frame[1:3] if frame is not None else open_header(data).size
    check_pixels(width, height)
    return width, height


def resize_rows(rows: torch.Tensor, size: int, interpolation: str = "bilinear") -> torch.Tensor:
    """Contiguous RGB uint8 [h, w, 3] -> [3, size, size] (a channels-last view), antialiased:
    ``TF.resize``, pixel for pixel, faster (the module docstring)."""
    crop = rows.unsqueeze(0).permute(0, 3, 1, 2)
    if not NATIVE_UINT8_RESIZE:  # torchvision resizes through float32 here; so do we, to give its pixels
        return TF.resize(crop, [size, size], interpolation=INTERPOLATIONS[interpolation][0], antialias=True)[0]
    # F.interpolate directly: TF.resize's checks and reshapes are per-call overhead the pipeline need not pay.
    return F.interpolate(crop, size=(size, size), mode=interpolation, antialias=True, align_corners=False)[0]


def decode_resized_crop(
    data: bytes,
    header: Image.Image | None,
    box: tuple[int, int, int, int],
    size: int,
    interpolation: str = "bilinear",
    flip: bool = False,
    roi: bool = True,
) -> torch.Tensor:
    """Crop ``box`` = (top, left, height, width), in full-resolution pixels and within the size
    :func:`image_size` gave, resize it to ``size`` x ``size`` and flip it horizontally if ``flip``.
    ``header``: :func:`open_header` of ``data``, or None to open it here only when the box allows a
    reduced JPEG decode. ``roi``: decode only the box's window of a JPEG (:mod:`data.roi`, exact).
    """
    top, left, height, width = box
    reduction = max((r for r in DCT_REDUCTIONS if min(height, width) >= r * size), default=1)
    if reduction > 1 and header is None:
        header = open_header(data)
    if reduction > 1 and header.format == "JPEG":
        full_width, full_height = header.size
        # draft() picks the largest of 1/2, 1/4, 1/8 that keeps the image >= the requested size.
        header.draft("RGB", (full_width // reduction, full_height // reduction))
        sx, sy = header.size[0] / full_width, header.size[1] / full_height
        # PIL resizes a fractional box: the crop maps exactly onto the reduced grid.
        region = (left * sx, top * sy, (left + width) * sx, (top + height) * sy)
        reduced = header if header.mode == "RGB" else header.convert("RGB")  # draft() makes most JPEGs RGB
        image = pil_to_tensor(reduced.resize((size, size), INTERPOLATIONS[interpolation][1], box=region))
    elif roi and data[:2] == b"\xff\xd8" and (rows := decode_region(data, box)) is not None:
        image = resize_rows(rows, size, interpolation)  # the same pixels as the full decode's window
    else:
        image = decode_rgb(data)
        if top + height > image.shape[1] or left + width > image.shape[2]:  # a header that lies: a broken file
            raise ValueError(f"crop box {box} exceeds the decoded image {tuple(image.shape[1:])}")
        rows = image.permute(1, 2, 0)[top : top + height, left : left + width].contiguous()  # module docstring
        image = resize_rows(rows, size, interpolation)
    return image.flip(-1) if flip else image


def decode_resize_center_crop(data: bytes, resize: int, size: int, interpolation: str = "bilinear") -> torch.Tensor:
    """Resize the shorter side to ``resize`` (antialiased; within 1/255 of PIL's resize),
    then take the central ``size`` x ``size``: the evaluation protocol, always a full decode
    so that it is the same protocol on every image."""
    image = decode_rgb(data)
    image = TF.resize(image, [resize], interpolation=INTERPOLATIONS[interpolation][0], antialias=True)
    return TF.center_crop(image, [size, size])
