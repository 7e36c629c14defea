"""Image files cut short are found whatever the training crop, and silently (issue 55, item 7).

Decoding only the crop's window (data/roi.py) never reached the damage of a JPEG missing its
last bytes when the crop ended above it: such a file passed or failed by chance, per epoch, and
nvImageCodec's libjpeg-turbo wrote "Input file read error" to stderr when it failed. The end of
the file is checked before any decode instead (its end-of-image marker; a PNG's IEND chunk).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from data import RandomResizedCropFlip, ResizeCenterCrop, SkipLog, build_loaders
from data.decode import DECODE_ERRORS, decode_rgb, image_size
from resnet.config import data_config
from tests.helpers.imagegen import jpeg_bytes, make_folder, smooth_image
from tests.helpers.shards import to_shards

KINDS = {
    "baseline": lambda im: jpeg_bytes(im, quality=90),
    "progressive": lambda im: jpeg_bytes(im, quality=90, progressive=True),
    "grey": lambda im: jpeg_bytes(im.convert("L"), quality=90),
    "cmyk": lambda im: jpeg_bytes(im.convert("CMYK"), quality=90),
    "png": lambda im: jpeg_bytes(im, format="PNG"),
    "grey_png": lambda im: jpeg_bytes(im.convert("L"), format="PNG"),
}
SEEDS = 40  # training crops drawn per file: the window misses a cut at the bottom in most of them


def outcomes(data: bytes) -> set[str]:
    """What the training crop (over :data:`SEEDS` draws) and the validation transform make of ``data``."""
    found = set()
    for seed in range(SEEDS):
        torch.manual_seed(seed)
        try:
            RandomResizedCropFlip(64)(data)
            found.add("decoded")
        except DECODE_ERRORS as err:
            found.add(f"{type(err).__name__}: {err}")
    try:
        ResizeCenterCrop(64)(data)
        found.add("decoded")
    except DECODE_ERRORS as err:
        found.add(f"{type(err).__name__}: {err}")
    return found


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("cut", [1, 2, 3, 200, "half"])
def test_a_file_cut_short_is_refused_by_every_crop_and_says_so(kind, cut, capfd):
    whole = KINDS[kind](smooth_image(320, 240, seed=3))
    data = whole[: len(whole) // 2] if cut == "half" else whole[:-cut]
    found = outcomes(data)
    assert len(found) == 1 and "decoded" not in found, found  # the same refusal for every crop
    if cut != "half":  # cut at its end: the reason says so (a file cut in half may fail in its header)
        assert "cut short" in found.pop()
    assert capfd.readouterr().err == ""  # no decoder's line on fd 2


@pytest.mark.parametrize("kind", list(KINDS))
def test_whole_files_and_trailing_bytes_still_decode(kind):
    whole = KINDS[kind](smooth_image(320, 240, seed=3))
    assert outcomes(whole) == {"decoded"}
    # bytes after the end (a camera's trailer, zero padding, a second image): decoders ignore them
    for trailer in (b"\0" * 3, b"\0" * 100_000, bytes(range(256)) * 40, jpeg_bytes(smooth_image(16, 16))):
        assert outcomes(whole + trailer) == {"decoded"}


def test_an_end_marker_in_the_header_does_not_pass_a_file_cut_short():
    """FF D9 before the scan (an EXIF thumbnail's own end marker) is not the image's end."""
    whole = jpeg_bytes(smooth_image(320, 240), quality=90)
    thumbnail = jpeg_bytes(smooth_image(16, 16), quality=50)
    app1 = b"\xff\xe1" + (len(thumbnail) + 2).to_bytes(2, "big") + thumbnail  # an APP1 segment holding a JPEG
    with_thumbnail = whole[:2] + app1 + whole[2:]
    assert outcomes(with_thumbnail) == {"decoded"}
    assert image_size(with_thumbnail) == (320, 240)
    found = outcomes(with_thumbnail[:-2])
    assert len(found) == 1 and "cut short" in found.pop()


def test_decode_gpu_leaves_a_file_cut_short_to_the_cpu_path_which_refuses_it():
    """nvJPEG is never handed a JPEG cut short: no frame for it, so the worker's CPU path takes it."""
    from data.gpu_decode import EncodedRandomResizedCropFlip, nvjpeg_reads

    whole = KINDS["baseline"](smooth_image(320, 240))
    assert nvjpeg_reads(whole) and not nvjpeg_reads(whole[:-2])
    with pytest.raises(DECODE_ERRORS, match="cut short"):
        EncodedRandomResizedCropFlip(64)(whole[:-2])


def test_empty_and_one_byte_files_are_refused():
    for data in (b"", b"\xff", b"\xff\xd8", b"\x89PNG\r\n\x1a\n"):
        with pytest.raises(DECODE_ERRORS):
            decode_rgb(data)


def _cut_folder(root, names):
    """Eight good files and six cut short by 2 bytes (progressive ones among them), in 2 classes."""
    make_folder(root / "train", {"a": 4, "b": 4}, size=(160, 120))
    make_folder(root / "val", {"a": 1, "b": 1}, size=(160, 120))
    for i, name in enumerate(names):
        image = smooth_image(320, 240, seed=100 + i)
        kind = ("baseline", "progressive", "grey")[i % 3]
        (root / "train" / "ab"[i % 2] / name).write_bytes(KINDS[kind](image)[:-2])


CUT = [f"cut{i}.JPEG" for i in range(6)]


def _epoch_counts(loaders, epochs: int = 3) -> list[tuple[int, list[str]]]:
    """Per epoch: the images skipped, and their file names (a shard sample's key)."""
    counts = []
    skips = SkipLog(keep=20)
    for epoch in range(epochs):
        loaders.set_epoch(epoch)
        skips.reset()
        for batch in loaders.train:
            skips.add(batch)
        where = [entry.split(" (")[0] for entry in skips.first]  # "path (reason)", "shard.tar:key (reason)"
        counts.append((skips.count, sorted(Path(w).name.rsplit(":", 1)[-1] for w in where)))
    return counts


def test_every_file_cut_short_is_counted_once_every_epoch_and_nothing_reaches_stderr(tmp_path, capfd):
    _cut_folder(tmp_path, CUT)
    config = data_config("imagefolder", root=str(tmp_path), workers=2, image_size=32)
    with build_loaders(config, batch_size=2) as loaders:  # 14 files: 7 full batches, none dropped
        counts = _epoch_counts(loaders)
    assert counts == [(6, sorted(CUT))] * 3
    assert capfd.readouterr().err == ""  # the workers' fd 2 too: they write to the same descriptor


def test_shards_count_every_file_cut_short_once_every_epoch(tmp_path, capfd):
    _cut_folder(tmp_path / "folder", CUT)
    to_shards(tmp_path / "folder", tmp_path / "shards", shard_size=4)  # copied as they are: the loader finds them
    config = data_config("imagenet_shards", root=str(tmp_path / "shards"), workers=2, image_size=32)
    with build_loaders(config, batch_size=2) as loaders:
        counts = _epoch_counts(loaders)
    keys = sorted(f"{'ab'[i % 2]}_cut{i}" for i in range(len(CUT)))  # both classes hold 0.JPEG: keys name the class
    assert counts == [(6, keys)] * 3
    assert capfd.readouterr().err == ""
