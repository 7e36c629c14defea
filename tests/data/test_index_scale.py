"""Image indexes at ImageNet's size, pinned at a small one.

* the index holds no Python object per image: pickling a dataset for a loader worker is the
  same handful of objects for 10 images as for 400, so a worker never copies it
  (pytorch/pytorch#13246; the 1.28 M-entry figures are benchmarks/scale.py's);
* listing a folder keeps os.walk's order and labels exactly;
* the listing is cached, reused, and rebuilt when any directory's mtime changes;
* a directory link loop is named in one line and skipped: no image is listed twice;
* the flat val is evaluated exactly once over 1, 2 and 3 ranks.
"""

from __future__ import annotations

import os
import pickle
import pickletools
import stat
import subprocess
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from data import build_loaders
from data import index_cache as cache
from data.file_index import FileIndex
from data.ilsvrc import val_samples
from data.imagefolder import IMAGE_EXTENSIONS, ImageFiles, ImageFolder, find_classes
from data.samplers import ShardSampler
from data.shards.read import ShardBatches
from resnet.config import data_config

HOUR_AGO = time.time() - 3600


def make_tree(root: Path, classes: dict[str, int], nested: bool = True) -> None:
    """``root/<class>/`` holding ``classes[name]`` files (and a sub-folder each when ``nested``), each of
    distinct bytes; every directory dated an hour back, so that a listing of it may be cached."""
    for name, count in classes.items():
        for i in range(count):
            folder = root / name / ("sub" if nested and i % 3 == 2 else "")
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{i:03d}.{'JPEG' if i % 2 else 'png'}").write_bytes(f"{name} {i}".encode())
        (root / name / "notes.txt").write_text("not an image")
    age(root)


def age(root: Path) -> None:
    for folder, _, _ in os.walk(root):
        os.utime(folder, (HOUR_AGO, HOUR_AGO))


def os_walk_listing(root: Path, classes: list[str]) -> list[tuple[str, int]]:
    """The listing as it was before data.folder_scan: os.walk(followlinks=True), names sorted."""
    samples = []
    for index, name in enumerate(classes):
        for folder, subfolders, files in os.walk(root / name, followlinks=True):
            subfolders.sort()
            samples += [(os.path.join(folder, f), index) for f in sorted(files) if f.lower().endswith(IMAGE_EXTENSIONS)]
    return samples


class Checksum:
    """A 'transform' that only identifies the file: the crc32 of its bytes."""

    def __call__(self, data: bytes) -> torch.Tensor:
        return torch.tensor(zlib.crc32(data))


def pickled_objects(obj: object) -> int:
    return sum(1 for _ in pickletools.genops(pickle.dumps(obj)))


# --- the index --------------------------------------------------------------------------


def test_no_python_object_per_image(tmp_path):
    """Pickled for a worker, a folder dataset, a flat val and a shard reader are the same few
    objects at 10 images as at 400: the index is numpy arrays, not tuples."""
    sizes = {}
    for n in (10, 400):
        make_tree(tmp_path / f"f{n}", {"a": n // 2, "b": n - n // 2})
        dataset = ImageFolder(tmp_path / f"f{n}", Checksum())
        assert isinstance(dataset.samples, FileIndex) and len(dataset) == n
        assert all(
            isinstance(a, np.ndarray) for a in (dataset.samples.names, dataset.samples.starts, dataset.samples.labels)
        )
        sizes[n] = pickled_objects(dataset)
    assert sizes[10] == sizes[400]

    flat = {n: ImageFiles([(f"/val/{i:08d}.JPEG", i % 7) for i in range(n)], ["c"] * 7, Checksum()) for n in (10, 400)}
    assert pickled_objects(flat[10]) == pickled_objects(flat[400])
    assert flat[400].samples[399] == ("/val/00000399.JPEG", 399 % 7)

    from data.shards.index import ShardIndex, ShardInfo

    def shards(n: int) -> ShardBatches:
        index = ShardIndex(tmp_path, "train", ["a"], [ShardInfo(f"train-{i:06d}.tar", 4, 0) for i in range(n)], "")
        return ShardBatches(index, Checksum(), batch_size=2)

    assert isinstance(shards(3).counts, np.ndarray)
    reader = shards(300)
    reader.index = None  # the main process's table of ShardInfo objects; what a worker reads is in arrays
    small = shards(3)
    small.index = None
    assert pickled_objects(small) == pickled_objects(reader)


def test_the_listing_keeps_os_walks_order_and_labels(tmp_path):
    root = tmp_path / "train"
    make_tree(root, {"b": 5, "a": 7, "a b": 2, "é": 3})
    outside = tmp_path / "elsewhere"
    (outside / "deeper").mkdir(parents=True)
    (outside / "x.jpg").write_bytes(b"x")
    (outside / "deeper" / "y.JPG").write_bytes(b"y")
    (root / "a" / "link").symlink_to(outside)  # a link out of the root is followed, as before
    classes = find_classes(root)
    expected = os_walk_listing(root, classes)
    assert list(ImageFolder(root, Checksum()).samples) == expected
    relative = Path(os.path.relpath(root))
    assert list(ImageFolder(relative, Checksum()).samples) == os_walk_listing(relative, classes)
    # a subset of a larger class list keeps each folder's index in it
    subset = ImageFolder(root, Checksum(), classes=["0", *classes], subset=True)
    assert [label for _, label in subset.samples] == [label + 1 for _, label in expected]
    assert [subset.samples[i] for i in range(len(subset))] == [(p, label + 1) for p, label in expected]


# --- the cache --------------------------------------------------------------------------


def test_the_listing_is_cached_reused_and_rebuilt_when_a_directory_changes(tmp_path):
    root = tmp_path / "data" / "train"
    make_tree(root, {"a": 4, "b": 5})
    lines = []
    first = cache.load_scan(root, log=lines.append)
    assert "rebuilt" in lines[-1] and "saved to" in lines[-1]
    assert (tmp_path / "data" / ".train.index.npz").is_file()  # beside the folder, not in it
    again = cache.load_scan(root, log=lines.append)
    assert "reused" in lines[-1]
    assert list(again.samples) == list(first.samples) and again.classes == first.classes == ["a", "b"]
    # a relative spelling of the same folder reads the same cache and gives its own paths
    relative = Path(os.path.relpath(root))
    assert list(cache.load_scan(relative, log=lines.append).samples) == os_walk_listing(relative, ["a", "b"])
    assert "reused" in lines[-1]

    # a new image in a sub-folder changes that folder's mtime: rebuilt, and the image is listed
    (root / "b" / "sub" / "new.jpg").write_bytes(b"new")
    os.utime(root / "b" / "sub", (HOUR_AGO + 60, HOUR_AGO + 60))
    changed = cache.load_scan(root, log=lines.append)
    assert "rebuilt" in lines[-1] and f"{root / 'b' / 'sub'} changed since" in lines[-1]
    assert str(root / "b" / "sub" / "new.jpg") in {path for path, _ in changed.samples}
    assert "reused" in (cache.load_scan(root, log=lines.append), lines[-1])[1]

    # a directory modified just now could change again unseen within its mtime tick: not kept
    (root / "c").mkdir()
    (root / "c" / "0.png").write_bytes(b"c")
    cache.load_scan(root, log=lines.append)
    assert "not kept: a directory was modified less than 2 s before" in lines[-1]
    cache.load_scan(root, log=lines.append)
    assert "rebuilt" in lines[-1]


def test_the_cache_goes_to_the_cache_dir_where_the_data_is_not_writable(tmp_path):
    root = tmp_path / "data" / "train"
    make_tree(root, {"a": 2, "b": 2})
    (tmp_path / "data" / ".train.index.npz").mkdir()  # stands for a file that cannot be written there
    lines = []
    cache.load_scan(root, tmp_path / "run", log=lines.append)
    saved = cache.cache_paths(root, tmp_path / "run")[1]
    assert f"saved to {saved}" in lines[-1] and saved.parent == tmp_path / "run"
    cache.load_scan(root, tmp_path / "run", log=lines.append)
    assert f"reused {saved}" in lines[-1]


def test_the_loaders_cache_both_splits_and_say_so(tmp_path, capsys):
    make_tree(tmp_path / "train", {"a": 4, "b": 4}, nested=False)
    make_tree(tmp_path / "val", {"a": 2, "b": 1}, nested=False)
    config = data_config("imagefolder", root=str(tmp_path), image_size=16, workers=0)
    build_loaders(config, 2)
    assert capsys.readouterr().out.count("rebuilt") == 2
    loaders = build_loaders(config, 2)
    out = capsys.readouterr().out
    assert out.count("reused") == 2 and "rebuilt" not in out
    assert loaders.val_size == 3 and loaders.class_names == ["a", "b"]
    build_loaders(config, 2, rank=1, world_size=2)
    assert capsys.readouterr().out == ""  # one line per split, from rank 0 alone


@pytest.mark.parametrize("with_store", [True, False])
def test_under_ddp_rank_zero_lists_and_the_others_wait(monkeypatch, with_store):
    # The others wait on a key of the job's store, for as long as a first listing takes: a barrier
    # would time out after the run's dist_timeout. Without a store to ask: a barrier.
    events = []

    class Store:
        def set(self, key, value):
            events.append(f"set {key}")

        def wait(self, keys, timeout):
            assert timeout == cache.BUILD_WAIT
            events.append(f"wait {keys[0]}")

    monkeypatch.setattr(cache.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(cache.dist, "get_world_size", lambda: 3)
    monkeypatch.setattr(cache.dist, "barrier", lambda: events.append("barrier"))
    monkeypatch.setattr(cache, "_job_store", lambda: Store() if with_store else None)
    monkeypatch.setattr(cache, "_builds", iter(range(100)))
    for rank in (0, 1):
        monkeypatch.setattr(cache.dist, "get_rank", lambda rank=rank: rank)
        assert cache.rank_zero_first(lambda: events.append("build") or "built") == "built"
    if with_store:  # both ranks' first call: the same key (each process counts its calls alike)
        assert events == ["build", "set data/index_built/0", "wait data/index_built/1", "build"]
    else:
        assert events == ["build", "barrier", "barrier", "build"]

    def fails():
        raise FileNotFoundError("no such folder")

    monkeypatch.setattr(cache.dist, "get_rank", lambda: 0)
    with pytest.raises(FileNotFoundError):
        cache.rank_zero_first(fails)
    assert events[-1].startswith("set ") if with_store else events[-1] == "barrier"  # the others fail alike


def test_a_read_only_data_mount_trains_with_its_index_kept_in_the_run_dir(tmp_path, capsys):
    # The docs' `-v /data/imagenet:/data/imagenet:ro`: a real read-only bind mount, no index beside it yet.
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    from tests.helpers.imagegen import make_tiny_folder
    from tests.helpers.training import run_in_process

    source, mounted = make_tiny_folder(tmp_path / "source"), tmp_path / "ro"
    past = time.time() - 60  # not just written: a listing is kept only of folders that have settled
    for folder in (source, *(p for p in source.rglob("*") if p.is_dir())):
        os.utime(folder, (past, past))
    mounted.mkdir()
    subprocess.run(["mount", "--bind", str(source), str(mounted)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mounted)], check=True)
        run_in_process(mounted, tmp_path / "run", "epochs=1")
    finally:
        subprocess.run(["umount", str(mounted)], check=True)
    out = capsys.readouterr().out
    for split in ("train", "val"):
        kept = cache.cache_paths(mounted / split, tmp_path / "run")[1]
        assert f"saved to {kept}" in out and kept.exists(), out
    assert not list(source.glob(".*.npz"))


# --- symlink loops ----------------------------------------------------------------------


def test_a_directory_link_loop_is_named_and_skipped(tmp_path, capsys):
    root = tmp_path / "train"
    make_tree(root, {"a": 4, "b": 5})
    before = list(ImageFolder(root, Checksum()).samples)
    (root / "a" / "up").symlink_to("..")  # ln -s .. train/a/up: train/ again, from inside class a
    (root / "b" / "sub" / "to_a").symlink_to("../../a")  # a second path to class a's images
    capsys.readouterr()
    dataset = ImageFolder(root, Checksum())
    assert list(dataset.samples) == before  # nothing multiplied, nothing relabelled
    (line,) = capsys.readouterr().out.splitlines()
    assert "skipped 2 directory link(s)" in line
    assert f"{root / 'a' / 'up'} -> .." in line and f"{root / 'b' / 'sub' / 'to_a'} -> ../../a" in line

    lines = []
    cache.load_scan(root, log=lines.append)
    assert len(lines) == 2 and "skipped 2 directory link(s)" in lines[1]


# --- exactly-once evaluation of the flat val --------------------------------------------


@pytest.mark.parametrize(("world_size", "workers"), [(1, 0), (2, 2), (3, 0)])
def test_the_flat_val_is_evaluated_exactly_once(tmp_path, world_size, workers):
    val = tmp_path / "val"
    val.mkdir()
    rows = ["ImageId,PredictionString"]
    for i in range(1, 26):
        (val / f"ILSVRC2012_val_{i:08d}.JPEG").write_bytes(f"image {i}".encode())
        rows.append(f"ILSVRC2012_val_{i:08d},n0{i % 3} 1 2 3 4")
    (tmp_path / "LOC_val_solution.csv").write_text("\n".join(rows) + "\n")
    classes, index = val_samples(val, tmp_path / "LOC_val_solution.csv")
    assert isinstance(index, FileIndex) and classes == ["n00", "n01", "n02"]
    dataset = ImageFiles(index, classes, Checksum())
    seen = []
    for rank in range(world_size):
        loader = DataLoader(
            dataset, batch_size=4, sampler=ShardSampler(len(dataset), rank, world_size), num_workers=workers
        )
        seen += [(int(c), int(label)) for crc, labels in loader for c, label in zip(crc, labels)]
    expected = [(zlib.crc32(f"image {i}".encode()), classes.index(f"n0{i % 3}")) for i in range(1, 26)]
    assert sorted(seen) == sorted(expected)


def _raised(read, argument, said: list[bool]) -> None:
    """Append to ``said`` whether ``read(argument)`` raised an OSError."""
    try:
        read(argument)
    except OSError:
        said.append(True)
        return
    said.append(False)


def test_fifos_devices_sockets_and_dangling_links_are_skipped_counted_and_never_read(tmp_path, capsys):
    # `tar -x` of a hostile class tar, as root, makes these; an open() of the FIFO would block for
    # ever (SIGTERM could not end it), a read of the device would never end.
    import socket

    from data.files import read_file
    from data.shards.write import Sample, read_bytes

    root = tmp_path / "data" / "train"
    make_tree(root, {"a": 2, "b": 2})
    a = root / "a"
    (a / "linked.JPEG").symlink_to(next(p for p in sorted(a.rglob("*")) if p.is_file()))  # a link to a file: an image
    os.mkfifo(a / "fifo.JPEG")
    (a / "dangling.JPEG").symlink_to(tmp_path / "nowhere.JPEG")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(a / "socket.JPEG"))
    expected = {"fifo.JPEG (a FIFO)", "dangling.JPEG (a dangling link)", "socket.JPEG (a socket)"}
    if os.geteuid() == 0:
        os.mknod(a / "zero.JPEG", 0o666 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero
        expected.add("zero.JPEG (a character device)")
    try:
        scan = cache.load_scan(root, tmp_path / "run")
        names = {Path(p).name for p, _ in scan.samples}
        assert "linked.JPEG" in names and not {e.split()[0] for e in expected} & names
        assert {Path(s).name for s in scan.special} == expected
        line = capsys.readouterr().out.splitlines()[-1]
        assert line.startswith(f"{root}: skipped {len(expected)} image-named entries that are not regular files: ")
        assert cache.load_scan(root, tmp_path / "run").special == scan.special  # kept in the cached index too
        for name in ("fifo.JPEG", "socket.JPEG", *(["zero.JPEG"] if os.geteuid() == 0 else [])):
            path = a / name
            for read, argument in ((read_file, path), (read_bytes, Sample("key", 0, str(path)))):
                raised: list[bool] = []  # the loader's read, the shard converter's: in a thread, so that a
                reader = threading.Thread(target=_raised, args=(read, argument, raised), daemon=True)
                reader.start()  # blocked open() fails this test instead of hanging it
                reader.join(5)
                assert not reader.is_alive() and raised == [True], name
    finally:
        listener.close()
