"""Decode only the crop window of a JPEG: nvImageCodec's libjpeg-turbo CPU decoder with a region.

A training crop covers 8-100% of the image. libjpeg-turbo can stop at the crop's last row and
skip the inverse DCT, upsampling and colour conversion of the rows above it
(``jpeg_skip_scanlines``); only their entropy decoding remains. nvImageCodec
(``nvidia-nvimgcodec-cu12``, Linux x86-64 and aarch64) exposes that as a region of a code stream,
on the CPU with no GPU or CUDA present.

Exact: the region's pixels equal the same window of torchvision's full decode, bit for bit, for
4:2:0, 4:2:2, 4:4:4, progressive, greyscale and CMYK JPEGs (tests/data/test_roi_decode.py). Where the
library is missing (macOS, Windows) or fails on a file, :func:`decode_region` returns None and the
caller decodes the whole file, which raises the usual error for a broken one. Measured: data/decode.py.
"""

from __future__ import annotations

import os

import numpy as np
import torch

_STATE: dict = {}  # pid -> (module, decoder, params), or pid -> None where the library is missing


def _load():
    """The library, a one-thread CPU decoder and the decode parameters, made once per process: a
    decoder's thread pool does not survive fork, so each loader worker makes its own."""
    pid = os.getpid()
    if pid not in _STATE:
        _STATE.clear()
        _STATE[pid] = make_decoder()
    return _STATE[pid]


def make_decoder(options: str = ""):
    """(library, one-thread CPU decoder, decode parameters), or None where the library is missing.
    ``options``: nvImageCodec decoder options (``benchmarks.decode_alternatives`` tries libjpeg-turbo's
    fast ones); the default decodes exactly as torchvision does."""
    os.environ.setdefault("PYNVIMGCODEC_VERBOSITY", "0")  # a bad file is counted by the loader, not logged here
    try:
        module = _import_quietly()
    except ImportError:
        return None
    decoder = module.Decoder(
        device_id=module.NVIMGCODEC_DEVICE_CPU_ONLY,
        max_num_cpu_threads=1,  # one loader worker decodes one image at a time
        backends=[module.Backend(module.CPU_ONLY)],
        options=options,
    )
    params = module.DecodeParams(
        apply_exif_orientation=False,  # as torchvision's decode_image: pixels in stored order
        color_spec=module.ColorSpec.SRGB,
        sample_format=module.SampleFormat.I_RGB,  # greyscale and CMYK to RGB, as decode_image(mode=RGB)
    )
    return module, decoder, params


def _import_quietly():
    """Import nvImageCodec with stderr closed: on a machine without nvJPEG, nvJPEG2000 and nvTIFF its
    GPU extensions print a 'Failed to load' paragraph each while loading (raw writes that its
    verbosity setting does not reach). Only the CPU decoder is used here."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        from nvidia import nvimgcodec
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    return nvimgcodec


def available() -> bool:
    """Whether region decoding is available in this process."""
    return _load() is not None


def decode_region(data: bytes, box: tuple[int, int, int, int], decoder=None) -> torch.Tensor | None:
    """JPEG bytes -> the box (top, left, height, width) as RGB uint8 [height, width, 3], contiguous;
    None where the library is missing or could not decode the file. ``decoder``: a
    :func:`make_decoder` result (default: this process's exact one)."""
    loaded = decoder or _load()
    if loaded is None:
        return None
    module, decoder, params = loaded
    top, left, height, width = box
    try:
        stream = module.CodeStream(data).get_sub_code_stream(
            region=module.Region(top, left, top + height, left + width)
        )
        image = decoder.decode(stream, params=params)
    except Exception:  # noqa: BLE001 - any refusal means: decode the whole file the usual way
        return None
    if image is None:
        return None
    pixels = np.asarray(image.cpu())
    if pixels.shape != (height, width, 3):
        return None
    return torch.from_numpy(pixels)
