"""A file too large to be an image is skipped and counted, never read (issue 55, item 6).

The read limit was 1 GiB: a 1,000 MiB file named like an image was read whole, in every loader
worker that met it (1.85 GB of peak RSS against 0.94), and the shard converter copied it into
the shards. The limit is now ``data.max_file_mb`` (64 MiB, four times ImageNet's largest JPEG),
checked against the file's size (``fstat``; a tar member's header) before a byte is read.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from data import ResizeCenterCrop, SkipLog, build_loaders
from data.batch import BadImage
from data.files import MAX_FILE_BYTES, read_file
from data.imagefolder import ImageFolder, find_classes, find_images
from data.shards import convert, file_samples
from data.shards.__main__ import main as shards_main
from data.shards.read import ShardBatches
from data.shards.write import Sample, read_bytes
from resnet.config import data_config
from resnet.schema import schema_problems
from tests.helpers.compose import compose_config
from tests.helpers.imagegen import jpeg_bytes, make_folder, smooth_image

BIG = 100 << 20  # over the default limit, under the old 1 GiB one; sparse: no disk, no time


def big_file(path: Path, size: int = BIG) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)  # a sparse file: its bytes read as zeros, none stored
    return path


@pytest.fixture
def opened(monkeypatch) -> list[int]:
    """The descriptors :func:`data.files.read_file` went on to read (it reads through ``os.fdopen``)."""
    reads: list[int] = []
    fdopen = os.fdopen

    def spy(fd, *args, **kwargs):
        reads.append(os.fstat(fd).st_size)
        return fdopen(fd, *args, **kwargs)

    monkeypatch.setattr(os, "fdopen", spy)
    return reads


def test_the_default_fits_images_far_below_the_old_limit():
    assert 16 * 10**6 < MAX_FILE_BYTES <= 256 << 20  # ImageNet train's largest JPEG: 15.7 MB
    assert data_config("imagefolder", workers=0).max_file_mb * 2**20 == MAX_FILE_BYTES


def test_a_file_over_the_limit_is_never_read(tmp_path, opened):
    path = big_file(tmp_path / "big.JPEG")
    with pytest.raises(OSError) as raised:
        read_file(path)
    assert raised.value.errno == errno.EFBIG and raised.value.filename == str(path)
    assert "104,857,600 bytes" in str(raised.value) and "64 MiB" in str(raised.value)
    assert "data.max_file_mb" in str(raised.value)
    assert opened == []  # refused from fstat: not a byte read
    small = tmp_path / "small.JPEG"
    small.write_bytes(b"x" * 1000)
    assert read_file(small, limit=1000) == b"x" * 1000  # the limit itself is allowed
    with pytest.raises(OSError, match="1,000 bytes"):
        read_file(small, limit=999)
    assert opened == [1000]


def test_the_loader_skips_and_counts_it_every_epoch(tmp_path, opened):
    make_folder(tmp_path / "train", {"a": 3, "b": 3})
    make_folder(tmp_path / "val", {"a": 1, "b": 1})
    big_file(tmp_path / "train" / "a" / "big.JPEG")
    dataset = ImageFolder(tmp_path / "train", ResizeCenterCrop(16))
    index = next(i for i in range(len(dataset)) if dataset.samples[i][0].endswith("big.JPEG"))
    sample = dataset[index]
    assert isinstance(sample, BadImage) and "over the 64 MiB" in sample.reason
    assert opened == []  # in this process; the workers below read through the same function
    with build_loaders(
        data_config("imagefolder", root=str(tmp_path), workers=2, image_size=16), batch_size=7
    ) as loaders:
        skips = SkipLog()
        for epoch in range(2):
            loaders.set_epoch(epoch)
            skips.reset()
            images = 0
            for batch in loaders.train:
                skips.add(batch)
                images += len(batch.labels)
            assert (skips.count, images) == (1, 6)
            assert "big.JPEG (OSError: [Errno 27] not read: 104,857,600 bytes, over the 64 MiB" in skips.first[0]


def test_the_limit_is_the_datasets_setting(tmp_path):
    make_folder(tmp_path / "train", {"a": 2}, size=(200, 150))
    size = max(p.stat().st_size for p in (tmp_path / "train" / "a").iterdir())
    tight = ImageFolder(tmp_path / "train", ResizeCenterCrop(16), max_file_bytes=size - 1)
    loose = ImageFolder(tmp_path / "train", ResizeCenterCrop(16), max_file_bytes=size)
    assert any(isinstance(tight[i], BadImage) for i in range(2))
    assert not any(isinstance(loose[i], BadImage) for i in range(2))
    assert data_config("imagefolder", max_file_mb=0.5, workers=0).max_file_bytes == 1 << 19


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_a_limit_that_cannot_work_is_one_line(value):
    cfg = compose_config("train", "data=imagefolder", "data.root=/x", "data.num_classes=2", f"data.max_file_mb={value}")
    (problem,) = schema_problems(cfg)
    assert problem.startswith(f"data.max_file_mb={value}: expected a number > 0")


def test_the_converter_skips_it_names_it_and_never_reads_it(tmp_path, opened, capsys):
    make_folder(tmp_path / "src", {"a": 2, "b": 2})
    big_file(tmp_path / "src" / "a" / "big.JPEG")
    classes = find_classes(tmp_path / "src")
    samples = file_samples(tmp_path / "src", find_images(tmp_path / "src", classes))
    index = convert(samples, classes, tmp_path / "out", "train", progress=True)
    assert index.count == 4 and BIG not in opened
    assert sum(shard.bytes for shard in index.shards) < 1 << 20  # not 100 MiB of zeros
    (skipped,) = index.skipped
    assert skipped.startswith("a_big: ") and "104,857,600 bytes, over the 64 MiB" in skipped
    assert "skipped 1 source image(s)" in capsys.readouterr().out
    # the converter's own setting: --max-file-mb
    shards_main(["folder", str(tmp_path / "src"), str(tmp_path / "out2"), "--split", "train", "--max-file-mb", "50"])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("train: 4 images") and "104,857,600 bytes, over the 50 MiB" in line


def test_a_tar_member_over_the_limit_is_refused_from_its_header(tmp_path, opened):
    import tarfile

    image = jpeg_bytes(smooth_image(200, 150), quality=90)
    (tmp_path / "n01.JPEG").write_bytes(image)
    with tarfile.open(tmp_path / "n01.tar", "w") as tar:
        tar.add(tmp_path / "n01.JPEG", "n01_1.JPEG")
    with tarfile.open(tmp_path / "n01.tar") as tar:
        member = tar.getmember("n01_1.JPEG")
    sample = Sample("n01_1", 0, str(tmp_path / "n01.tar"), member.offset_data, member.size)
    assert read_bytes(sample) == image
    with pytest.raises(OSError, match=f"{len(image):,} bytes, over the"):
        read_bytes(sample, limit=len(image) - 1)
    assert opened == [os.path.getsize(tmp_path / "n01.tar")]  # the first read only
    index = convert([sample], ["n01"], tmp_path / "out", "train", progress=False, max_file_bytes=len(image) - 1)
    assert index.count == 0
    assert len(index.skipped) == 1 and "bytes, over the" in index.skipped[0]


class CountingFile:
    """A file object that records the size of every read."""

    def __init__(self, f, reads: list[int]):
        self._f, self._reads = f, reads

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(size)
        self._reads.append(len(data))
        return data

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def test_the_shard_reader_skips_a_member_over_the_limit_unread(tmp_path, monkeypatch):
    """Shards written before the limit (or by another tool) may hold one: its header gives the size."""
    make_folder(tmp_path / "src", {"a": 3}, size=(48, 40))
    (tmp_path / "src" / "a" / "large.JPEG").write_bytes(jpeg_bytes(smooth_image(400, 300), quality=95))
    samples = file_samples(tmp_path / "src", find_images(tmp_path / "src", ["a"]))
    convert(samples, ["a"], tmp_path / "shards", "train", shard_size=8, progress=False)
    large = (tmp_path / "src" / "a" / "large.JPEG").stat().st_size
    reads: list[int] = []

    def counting_open(*args, **kwargs) -> CountingFile:
        return CountingFile(open(*args, **kwargs), reads)  # noqa: SIM115 - the reader closes it (with)

    monkeypatch.setattr("data.shards.read.open", counting_open, raising=False)
    shards = ShardBatches.open(tmp_path / "shards", ResizeCenterCrop(16), 4, train=False, max_file_bytes=large - 1)
    (batch,) = list(shards)
    assert len(batch.labels) == 3 and batch.skipped == 1
    assert batch.skipped_paths[0].startswith("train-000000.tar:large (OSError: [Errno 27]")
    assert f"{large:,} bytes, over the" in batch.skipped_paths[0]
    assert large not in reads and max(reads) < large


@pytest.mark.parametrize("layout", ["folders", "shards"])
def test_the_key_reaches_training_eval_detect_and_regrid(tmp_path, layout, capsys):
    """``data.max_file_mb=`` on the command line is the limit the loaders of train.py, eval.py,
    resnet-detect and resnet-regrid use."""
    from resnet.cli.detect import read_inputs
    from resnet.cli.regrid import run as regrid_run
    from resnet.engine.run import train
    from resnet.evaluation.run import evaluate_weights
    from tests.helpers.shards import to_shards

    folder = tmp_path / "folder"
    make_folder(folder / "train", {"a": 4, "b": 4}, size=(40, 36))
    make_folder(folder / "val", {"a": 2, "b": 2}, size=(40, 36))
    big = folder / "train" / "a" / "big.jpg"
    big.write_bytes(jpeg_bytes(smooth_image(900, 700, seed=5), quality=100))  # a real image, over 0.05 MiB
    (folder / "val" / "b" / "big.jpg").write_bytes(big.read_bytes())
    assert big.stat().st_size > 0.05 * (1 << 20)
    data = ["data=imagefolder", f"data.root={folder}"]
    if layout == "shards":
        to_shards(folder, tmp_path / "shards", shard_size=4)
        data = ["data=imagenet_shards", f"data.root={tmp_path / 'shards'}"]
    common = [*data, "data.num_classes=2", "data.workers=0", "data.max_file_mb=0.05"]
    results = train(compose_config("train", "model=resnet_tiny", *common, "data.image_size=32", "batch_size=3",
                                   "epochs=1", "max_unreadable=0.5", f"run_dir={tmp_path / 'run'}"))  # fmt: skip
    assert results["skipped_images"] == 1 and results["val_skipped_images"] == 1
    row = evaluate_weights(compose_config("eval", f"weights={tmp_path / 'run' / 'last.pt'}", *common,
                                          "max_unreadable=0.5", f"results_file={tmp_path / 'eval.jsonl'}"))  # fmt: skip
    assert (row["n_images"], row["skipped_images"]) == (4, 1)
    # resnet-detect reads the val split, resnet-regrid the training split: the same limit
    weights = f"weights={tmp_path / 'run' / 'last.pt'}"
    detected = read_inputs(compose_config("detect", weights, *common, "images=8", "batch_size=4", "device=cpu"))
    assert sum(len(labels) for _, labels in detected.batches) == 4  # of the 5 val images, the big one skipped
    assert "skipped 1 unreadable image(s)" in capsys.readouterr().out
    out = f"out={tmp_path / 'regridded.pt'}"
    regridded = regrid_run(compose_config("regrid", weights, *common, "+padding=asymmetric", "images=16",
                                          "batch_size=4", "device=cpu", out))  # fmt: skip
    assert regridded["skipped_images"] == 1
