"""Shard checksums: the conversion records one per sample in index.json, ``python -m data.shards
check`` verifies them (and ``--deep`` decodes every image), a sample changed at an unchanged size is
named by shard and key, a re-run rewrites such a shard, and an index without checksums still reads."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

from data import build_loaders
from data import decode as decode_module
from data.imagefolder import find_classes, find_images
from data.shards import convert, file_samples, read_index, records
from data.shards.__main__ import main
from resnet.config import data_config
from tests.helpers.imagegen import make_folder

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def convert_split(src: Path, out: Path, split: str = "train"):
    classes = find_classes(src)
    samples = file_samples(src, find_images(src, classes))
    return convert(samples, classes, out, split, shard_size=3, progress=False)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("checksums")
    make_folder(root / "train", {"a": 4, "b": 3}, size=(24, 20))
    make_folder(root / "val", {"a": 2, "b": 2}, size=(24, 20))
    return root


def check(capsys, out: Path, *options: str) -> tuple[int, str]:
    """(exit status, stdout or the error line) of ``python -m data.shards check out``."""
    try:
        main(["check", str(out), *options])
        status = 0
    except SystemExit as ended:
        status = ended.code
    captured = capsys.readouterr()
    return status, captured.out if status == 0 else captured.err.strip()


def sample_at(index, shard: int, n: int):
    """(record, image bytes) of the n-th sample of a shard."""
    with open(index.path(index.shards[shard]), "rb") as f:
        record = records(f, index.shards[shard].name)[n]
        f.seek(record.offset)
        return record, f.read(record.size)


def test_each_sample_has_a_checksum_of_its_bytes_and_label(folder, tmp_path):
    index = convert_split(folder / "train", tmp_path)
    meta = json.loads((tmp_path / "index.json").read_text())
    assert [len(shard["crc32"]) for shard in meta["shards"]] == [8 * shard["count"] for shard in meta["shards"]]
    files = find_images(folder / "train", ["a", "b"])
    sources = {f"{Path(path).parent.name}_{Path(path).stem}": Path(path).read_bytes() for path, _ in files}
    for n_shard, shard in enumerate(index.shards):
        for n, checksum in enumerate(shard.checksums()):
            record, data = sample_at(index, n_shard, n)
            assert data == sources[record.key]  # keys: a_0, b_0, ... (make_folder repeats file names)
            assert checksum == f"{zlib.crc32(str(record.label).encode(), zlib.crc32(data)):08x}"


@pytest.mark.parametrize("member", ["image", "label"])
def test_a_sample_changed_at_the_same_size_is_named_by_shard_and_key(folder, tmp_path, capsys, member):
    index = convert_split(folder / "train", tmp_path)
    assert check(capsys, tmp_path)[0] == 0
    record, data = sample_at(index, 1, 2)
    path = index.path(index.shards[1])
    shard = bytearray(path.read_bytes())
    if member == "image":
        shard[record.offset + len(data) // 2] ^= 0x10  # one bit, mid-image
    else:  # the .cls member's data: the block after the image's data, after its own header
        label_at = record.offset + -(-record.size // 512) * 512 + 512
        shard[label_at] = ord("1") if shard[label_at] == ord("0") else ord("0")  # another class, same size
    path.write_bytes(bytes(shard))
    status, line = check(capsys, tmp_path)
    assert status == 1
    assert f"1 sample(s) in {tmp_path} no longer match their checksums in index.json" in line
    assert f"{index.shards[1].name}: {record.key};" in line and "re-run the conversion" in line


@pytest.mark.parametrize("member", ["image", "label"])
def test_training_and_evaluation_skip_and_count_a_changed_sample_as_they_read_it(folder, tmp_path, member):
    # A flipped byte in a .jpg, or a .cls that names another class: caught on every read, not only by `check`.
    for split in ("train", "val"):
        convert_split(folder / split, tmp_path / split, split)
    index = read_index(tmp_path / "train")
    record, data = sample_at(index, 1, 2)
    path = index.path(index.shards[1])
    shard = bytearray(path.read_bytes())
    if member == "image":
        shard[record.offset + len(data) // 2] ^= 0x10
    else:
        label_at = record.offset + -(-record.size // 512) * 512 + 512
        shard[label_at] = ord("1") if shard[label_at] == ord("0") else ord("0")
    path.write_bytes(bytes(shard))
    with build_loaders(
        data_config("imagenet_shards", root=str(tmp_path), image_size=16, workers=0), batch_size=7
    ) as loaders:
        loaders.set_epoch(0)
        [batch] = list(loaders.train)
    assert len(batch.labels) == 6 and batch.skipped == 1
    [why] = batch.skipped_paths
    assert why.startswith(f"{index.shards[1].name}:{record.key} (") and "checksum mismatch" in why


def test_an_index_changed_after_the_conversion_is_refused_when_opened(folder, tmp_path):
    from data.shards import ShardError

    convert_split(folder / "train", tmp_path)
    meta = json.loads((tmp_path / "index.json").read_text())
    meta["classes"][1] = "c"  # a class renamed: check's sample checksums cannot see it
    (tmp_path / "index.json").write_text(json.dumps(meta))
    with pytest.raises(ShardError, match=r"index.json was changed since the conversion wrote it"):
        read_index(tmp_path)


def test_a_rerun_rewrites_a_changed_shard_and_keeps_the_others(folder, tmp_path, capsys):
    index = convert_split(folder / "train", tmp_path)
    record, data = sample_at(index, 0, 0)
    path = index.path(index.shards[0])
    original = path.read_bytes()
    shard = bytearray(original)
    shard[record.offset + 10] ^= 0xFF
    path.write_bytes(bytes(shard))
    others = [index.path(s).stat().st_mtime_ns for s in index.shards[1:]]
    convert_split(folder / "train", tmp_path)
    assert path.read_bytes() == original  # rewritten, though its headers list the planned samples
    assert [index.path(s).stat().st_mtime_ns for s in index.shards[1:]] == others  # kept
    assert check(capsys, tmp_path)[0] == 0


def test_an_index_without_checksums_still_reads_and_check_says_they_are_absent(folder, tmp_path, capsys):
    for split in ("train", "val"):
        convert_split(folder / split, tmp_path / split, split)
        meta = json.loads((tmp_path / split / "index.json").read_text())
        for shard in meta["shards"]:
            del shard["crc32"]  # as written before checksums
        del meta["checksum"]  # ... and before the index's own
        (tmp_path / split / "index.json").write_text(json.dumps(meta))
    assert all(shard.crc32 is None for shard in read_index(tmp_path / "train").shards)
    status, report = check(capsys, tmp_path / "train")
    assert status == 0 and "checksums  absent: index.json predates them" in report
    with build_loaders(
        data_config("imagenet_shards", root=str(tmp_path), image_size=16, workers=0), batch_size=3
    ) as loaders:
        loaders.set_epoch(0)
        assert sum(len(batch.labels) for batch in loaders.train) == 6


def test_deep_decodes_every_image_and_names_those_that_do_not(folder, tmp_path, capsys, monkeypatch):
    src = tmp_path / "src"
    make_folder(src, {"a": 3, "b": 3}, size=(24, 20))
    broken = src / "b" / "1.JPEG"
    broken.write_bytes(broken.read_bytes()[:200])  # cut short: copied as it is, fails to decode
    convert_split(src, tmp_path / "out")
    status, report = check(capsys, tmp_path / "out")
    assert status == 0 and "6 verified" in report and "not tried (--deep decodes every image)" in report
    status, line = check(capsys, tmp_path / "out", "--deep")
    assert status == 1 and "1 image(s) in" in line and ": b_1 (" in line
    # an image over the pixel limit (data.decode.MAX_PIXELS) is named too
    monkeypatch.setattr(decode_module, "MAX_PIXELS", 24 * 20 - 1)
    status, line = check(capsys, tmp_path / "out", "--deep")
    assert status == 1 and "6 image(s) in" in line and "data.decode.MAX_PIXELS" in line and "and 1 more" in line
    broken.unlink()
    convert_split(src, tmp_path / "whole")
    monkeypatch.undo()
    status, report = check(capsys, tmp_path / "whole", "--deep")
    assert status == 0 and "decoded    5 images" in report, report
