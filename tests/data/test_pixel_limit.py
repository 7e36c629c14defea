"""One pixel limit (``data.decode.MAX_PIXELS``) for every decode path, read from the header before
anything is decoded: the full decode, the training crop (CPU, and the GPU path's worker side),
validation, eval.py's one and ten crops, and shards; a bomb is skipped and counted on each."""

from __future__ import annotations

import resource
import struct
import time
import zlib
from pathlib import Path

import pytest
from PIL import Image

from data import build_loaders
from data import decode as decode_module
from data.decode import decode_rgb
from data.gpu_decode import EncodedRandomResizedCropFlip
from data.transforms import RandomResizedCropFlip, ResizeCenterCrop
from resnet.config import data_config
from resnet.evaluation.loader import EvalProtocol, ResizeCrop, ResizeShorter, build_eval_loader
from tests.helpers.imagegen import jpeg_bytes, smooth_image
from tests.helpers.shards import to_shards

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def png_bomb(side: int = 30000) -> bytes:
    """A black 1-bit ``side`` x ``side`` PNG: 0.5 MB on disk, 2.7 GB decoded to RGB (an 8-bit
    one is 875 kB). Written in a third of a second: its rows are compressed, never held."""
    row = b"\0" * (1 + (side + 7) // 8)  # filter byte, then the packed bits
    deflate = zlib.compressobj(1)
    block = row * 1000
    idat = b"".join([deflate.compress(block) for _ in range(side // 1000)] + [deflate.flush()])

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


PATHS = {
    "full decode": decode_rgb,
    "training crop": RandomResizedCropFlip(16),
    "training crop, gpu path (worker side)": EncodedRandomResizedCropFlip(16),
    "validation": ResizeCenterCrop(16),
    "eval.py, one crop": ResizeCrop(18, 16),
    "eval.py, ten crops": ResizeShorter(18),
}


def test_a_30000_pixel_square_png_is_refused_from_its_header_on_every_path():
    bomb = png_bomb()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    for name, transform in PATHS.items():
        start = time.perf_counter()
        with pytest.raises(Image.DecompressionBombError):
            transform(bomb)
        assert time.perf_counter() - start < 1.0, name  # a header read, not a decode
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 500_000  # KiB: nothing decoded


# --- the limit patched down: each path skips and counts an image just over it ------------------

LIMIT = 32 * 32  # the 24 x 24 images pass, the 40 x 36 ones are over


@pytest.fixture
def small_limit(monkeypatch):
    monkeypatch.setattr(decode_module, "MAX_PIXELS", LIMIT, raising=False)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """train/ and val/, each: two JPEGs and a PNG under the limit, a JPEG and a PNG over it."""
    root = tmp_path_factory.mktemp("limit")
    small, large = smooth_image(24, 24), smooth_image(40, 36)
    files = {"a/ok.jpg": jpeg_bytes(small, quality=90), "a/huge.jpg": jpeg_bytes(large, quality=90),
             "a/big.png": jpeg_bytes(large, format="PNG"), "b/ok.png": jpeg_bytes(small, format="PNG"),
             "b/fine.jpg": jpeg_bytes(small, quality=80)}  # fmt: skip
    for split in ("train", "val"):
        for name, data in files.items():
            (root / split / name).parent.mkdir(parents=True, exist_ok=True)
            (root / split / name).write_bytes(data)
    return root


def assert_two_skipped(batches: list) -> None:
    """The JPEG and the PNG over the limit (a file's path, or a shard's ``name:key``) skipped, for the limit."""
    reasons = [reason for b in batches for reason in b.skipped_paths]
    assert sum(b.skipped for b in batches) == 2 and sum(len(b.labels) for b in batches) == 3, reasons
    assert sorted("huge" in reason for reason in reasons) == [False, True]  # the JPEG, and the other
    assert all("big" in reason or "huge" in reason for reason in reasons)
    assert all("over the limit of 1,024 (data.decode.MAX_PIXELS)" in reason for reason in reasons), reasons


@pytest.mark.parametrize("decode", ["cpu", "gpu"])
def test_training_and_validation_skip_and_count_an_image_over_the_limit(folder, small_limit, decode):
    data = data_config("imagefolder", root=str(folder), workers=0, image_size=16, decode=decode)
    with build_loaders(data, batch_size=5) as loaders:
        loaders.set_epoch(0)
        assert_two_skipped(list(loaders.train))
        assert_two_skipped(list(loaders.val))


@pytest.mark.parametrize("crops", [1, 10])
def test_eval_skips_and_counts_an_image_over_the_limit(folder, small_limit, crops):
    protocol = EvalProtocol(crops=crops, crop=16, resize=18, interpolation="bilinear", preprocessing="torch")
    found = build_eval_loader("imagefolder", str(folder), protocol, batch_size=5, workers=0)
    assert_two_skipped(list(found.loader))


def test_shards_skip_and_count_an_image_over_the_limit(folder, small_limit, tmp_path):
    to_shards(folder, tmp_path, shard_size=2)
    with build_loaders(
        data_config("imagenet_shards", root=str(tmp_path), workers=0, image_size=16), batch_size=5
    ) as loaders:
        loaders.set_epoch(0)
        assert_two_skipped(list(loaders.train))
        assert_two_skipped(list(loaders.val))
