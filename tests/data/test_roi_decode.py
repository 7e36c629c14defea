"""Region decode (data/roi.py): the crop window's pixels, bit for bit those of the full decode; a
file it cannot read falls back to the full decode and its error; the crop boxes keep
torchvision's RandomResizedCrop distribution."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch
from torchvision.transforms import v2 as T

from data import roi
from data.dataloader import DataLoader
from data.decode import DECODE_ERRORS, decode_resized_crop, decode_rgb, resize_rows
from data.transforms import RandomResizedCropFlip
from tests.helpers.imagegen import jpeg_bytes, smooth_image

# The region decoder itself; the crop boxes, a truncated file and the library-missing fallback are
# tested everywhere.
needs_roi = pytest.mark.skipif(not roi.available(), reason="nvidia-nvimgcodec-cu12 has no wheel for this platform")

KINDS = {
    "4:2:0": dict(quality=90),
    "4:2:2": dict(quality=90, subsampling=1),
    "4:4:4": dict(quality=95, subsampling=0),
    "progressive": dict(quality=90, progressive=True),
    "restart markers": dict(quality=90, restart_marker_rows=1),
}


def jpeg(kind: str, width: int, height: int, seed: int = 0) -> bytes:
    image = smooth_image(width, height, seed)
    if kind == "grey":
        return jpeg_bytes(image.convert("L"), quality=90)
    if kind == "cmyk":
        return jpeg_bytes(image.convert("CMYK"), quality=90)
    return jpeg_bytes(image, **KINDS[kind])


def boxes(width: int, height: int, count: int, seed: int) -> list[tuple[int, int, int, int]]:
    """Training crops of the image, plus the edge cases: the whole image, single pixels in two
    corners, a one-pixel row and column, windows that start on odd rows and columns."""
    sampler = RandomResizedCropFlip(32)
    torch.manual_seed(seed)
    drawn = [sampler.sample(height, width)[0] for _ in range(count)]
    edges = [(0, 0, height, width), (0, 0, 1, 1), (height - 1, width - 1, 1, 1), (height // 2, 0, 1, width),
             (0, width // 2, height, 1), (3, 5, height - 6, width - 7)]  # fmt: skip
    return drawn + edges


@needs_roi
@pytest.mark.parametrize("kind", [*KINDS, "grey", "cmyk"])
@pytest.mark.parametrize("size", [(500, 375), (333, 251)])
def test_region_equals_the_window_of_the_full_decode(kind, size):
    data = jpeg(kind, *size, seed=len(kind))
    full = decode_rgb(data).permute(1, 2, 0)  # torchvision's decode, [H, W, 3]
    for top, left, height, width in boxes(*size, count=40, seed=len(kind)):
        region = roi.decode_region(data, (top, left, height, width))
        assert region is not None and region.is_contiguous()
        assert torch.equal(region, full[top : top + height, left : left + width]), (kind, top, left, height, width)


@needs_roi
def test_the_training_transform_gives_the_same_crops_either_way():
    data = jpeg("4:2:0", 500, 375, seed=7)
    for (top, left, height, width), size, flip in zip(boxes(500, 375, 30, seed=1), [224, 64, 17] * 12, [0, 1] * 18):
        box = (top, left, height, width)
        with_roi = decode_resized_crop(data, None, box, size, flip=bool(flip))
        without = decode_resized_crop(data, None, box, size, flip=bool(flip), roi=False)
        assert torch.equal(with_roi, without), box


@needs_roi
@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda d: d[: len(d) // 2], id="truncated"),
        pytest.param(lambda d: d[:2] + bytes(range(256)) * 4, id="garbage after the SOI marker"),
        pytest.param(lambda d: d[:600] + bytes(200) + d[800:], id="zeroed scan data"),
    ],
)
def test_a_file_it_cannot_read_falls_back_to_the_full_decode(damage):
    data = damage(jpeg("4:2:0", 200, 150))
    box = (10, 20, 100, 120)
    assert roi.decode_region(data, box) is None  # refused: no partial picture comes back
    try:
        expected = decode_resized_crop(data, None, box, 32, roi=False)
    except DECODE_ERRORS as err:  # the full decode's error is what the loader counts and reports
        with pytest.raises(type(err)):
            decode_resized_crop(data, None, box, 32)
    else:
        assert torch.equal(decode_resized_crop(data, None, box, 32), expected)


def test_a_truncated_file_is_an_error_not_a_grey_image():
    data = jpeg("4:2:0", 200, 150)[:1500]
    assert roi.decode_region(data, (0, 0, 150, 200)) is None  # no half-grey picture comes back
    with pytest.raises(DECODE_ERRORS):
        decode_resized_crop(data, None, (0, 0, 150, 200), 32)


def test_without_the_library_every_crop_is_cut_from_the_full_decode(monkeypatch):
    # Where nvImageCodec has no wheel (macOS, Windows) or fails to load: no region decode is tried.
    monkeypatch.setattr(roi, "_STATE", {os.getpid(): None})
    data = jpeg("4:2:0", 200, 150)
    assert not roi.available() and roi.decode_region(data, (10, 20, 100, 120)) is None
    box = (10, 20, 100, 120)
    full = decode_rgb(data)[:, 10:110, 20:140].permute(1, 2, 0).contiguous()
    assert torch.equal(decode_resized_crop(data, None, box, 32), resize_rows(full, 32))


class DecodeAndReport(torch.utils.data.Dataset):
    """Decodes a region, then reports the process and the processes its decoder state belongs to."""

    def __init__(self, data: bytes):
        self.data = data

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int):
        assert roi.decode_region(self.data, (0, 0, 48, 64)) is not None
        return os.getpid(), sorted(roi._STATE)


@needs_roi
def test_each_loader_worker_makes_its_own_decoder():
    """A decoder made in the parent must not be used by forked workers (its threads stay behind)."""
    data = jpeg("4:2:0", 64, 48)
    assert roi.decode_region(data, (0, 0, 48, 64)) is not None  # the parent's decoder exists before the fork
    loader = DataLoader(DecodeAndReport(data), batch_size=None, num_workers=2, timeout=60)
    reports = list(loader)
    assert {pid for pid, _ in reports} - {os.getpid()}  # decoded in the workers
    assert all(owners == [pid] for pid, owners in reports)  # each with a decoder of its own, the parent's gone
    assert sorted(roi._STATE) == [os.getpid()]


def test_crop_boxes_follow_torchvisions_random_resized_crop():
    """Two-sample Kolmogorov-Smirnov tests, 4,000 boxes each, on a landscape and a portrait image:
    area fraction, log aspect ratio, and the relative position of the box. The fallback (the
    central crop after 10 misses) is part of both."""
    from scipy.stats import ks_2samp

    for height, width in [(375, 500), (500, 333)]:
        ours = RandomResizedCropFlip(224)
        torch.manual_seed(0)
        a = np.array([ours.sample(height, width)[0] for _ in range(4000)], dtype=float)
        torch.manual_seed(1)
        image = torch.empty(3, height, width)
        b = np.array([T.RandomResizedCrop.get_params(image, [0.08, 1.0], [3 / 4, 4 / 3]) for _ in range(4000)], float)
        stats = {
            "area": lambda x, h, w: x[:, 2] * x[:, 3] / (h * w),
            "log aspect": lambda x, h, w: np.log(x[:, 3] / x[:, 2]),
            "top": lambda x, h, w: x[:, 0] / np.maximum(h - x[:, 2], 1),
            "left": lambda x, h, w: x[:, 1] / np.maximum(w - x[:, 3], 1),
        }
        for name, stat in stats.items():
            result = ks_2samp(stat(a, height, width), stat(b, height, width))
            assert result.pvalue > 1e-3, (height, width, name, result)
        # and the test can tell: a crop of a narrower scale range fails it
        narrow = RandomResizedCropFlip(224, scale=(0.2, 1.0))
        c = np.array([narrow.sample(height, width)[0] for _ in range(4000)], dtype=float)
        area = lambda x: x[:, 2] * x[:, 3]  # noqa: E731
        assert ks_2samp(area(c), area(b)).pvalue < 1e-6
        assert math.isclose(a[:, 2].mean(), b[:, 2].mean(), rel_tol=0.03)
