"""Copy a list of images into shards (:mod:`data.shards.index`); ``python -m data.shards`` runs it.

Shard size. :data:`~data.shards.index.DEFAULT_SHARD_SIZE` is 1,024 images, ~112 MB of ImageNet's
JPEGs (~110 kB each): why this many, docs/cluster.md.

Order. The samples, sorted by key, are shuffled once with ``seed`` and cut into shards in
that order, so every shard holds a random mix of classes and a loader that shuffles shards
and the images within them draws well-mixed batches. The global shuffle reads the source
in random order: fine on SSDs and parallel file systems (reads are issued from
:data:`READ_THREADS` threads to hide their latency), seek-bound on a spinning disk.

Resume. The plan, which image goes into which shard, depends only on the samples, the shard
size and the seed, so re-running an interrupted conversion writes the same shards. Each
shard is written to ``<name>.tmp`` and renamed when complete; a re-run keeps each shard
whose headers list exactly its planned samples and whose bytes still match the checksums the
previous ``index.json`` recorded, if one was written, and writes the others (no fsync: a shard
cut short by a crash fails that check and is rewritten; one damaged since is rewritten too).
A kept shard is read once, for its checksums. Every member is written with the
same metadata (mtime 0, uid/gid 0, no user or group names, mode 0444), so a conversion
gives the same bytes every time.

Bytes are copied, never decoded or re-encoded: ImageNet's PNG and CMYK JPEGs under
``.JPEG`` names stay as they are, for the loader's decoder to handle (which also finds a file
cut short). So only a failed read can drop an image, or a file larger than ``max_file_bytes``
(``--max-file-mb``, 64 MiB: refused from its size, never read, so a stray 1 GB file is not
copied into the shards); those are counted, named in the summary and in ``index.json``'s
``"skipped"``, and retried by the next run, which rewrites their shards.
"""

from __future__ import annotations

import io
import os
import random
import re
import tarfile
from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePath

from ..files import MAX_FILE_BYTES, read_file
from ..progress import Progress
from .index import (
    DEFAULT_SHARD_SIZE,
    IMAGE_EXT,
    INDEX_NAME,
    LABEL_EXT,
    ShardError,
    ShardIndex,
    ShardInfo,
    read_index,
    records,
    sample_checksum,
    write_index,
)

READ_THREADS = 8  # concurrent source reads: enough to hide a network file system's latency
MAX_KEY = 100 - len(f".{IMAGE_EXT}")  # a ustar member name holds 100 characters
SPLIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True, slots=True)
class Sample:
    """One image to convert: where its encoded bytes are, and what to call and label it.

    ``path`` alone is a whole file; with ``size`` >= 0, the image is the ``size`` bytes at
    ``offset`` of ``path``, a member of an uncompressed tar, read without extracting it.
    """

    key: str  # the WebDataset key: no dots, no slashes
    label: int  # index into the class list
    path: str
    offset: int = 0
    size: int = -1


def read_bytes(sample: Sample, limit: int = MAX_FILE_BYTES) -> bytes:
    """The encoded image, exactly as stored; one of more than ``limit`` bytes (a file's size, a tar
    member's from its header) is refused before a byte is read."""
    data = read_file(sample.path, sample.offset, sample.size, limit)  # bounded: no FIFO or device read for ever
    if sample.size >= 0 and len(data) != sample.size:
        raise OSError(f"short read: {len(data)} of {sample.size} bytes at offset {sample.offset}")
    return data


def make_keys(names: Sequence[str]) -> list[str]:
    """WebDataset keys for files named by their paths relative to the split's root.

    A key is the file's stem with dots made underscores: ``n01440764/n01440764_10026.JPEG``
    -> ``n01440764_10026``. Where two files would share one (``a/0.jpg`` and ``b/0.jpg``
    in a generic folder), every key is the relative path instead: ``a_0``, ``b_0``.
    """
    keys = [PurePath(name).stem.replace(".", "_") for name in names]
    if len(set(keys)) < len(keys):
        keys = ["_".join(PurePath(name).with_suffix("").parts).replace(".", "_") for name in names]
    owners: dict[str, str] = {}
    for name, key in zip(names, keys):
        if key in owners:
            raise ValueError(f"{owners[key]} and {name} both make the shard key {key!r}; rename one of them")
        if len(key) > MAX_KEY:
            raise ValueError(f"{name}: shard key {key!r} is longer than {MAX_KEY} characters; rename the file")
        owners[key] = name
    return keys


def file_samples(root: Path, files: Sequence[tuple[str, int]]) -> list[Sample]:
    """Samples for ``(path, class index)`` pairs of files under ``root``
    (:func:`data.imagefolder.find_images`' output)."""
    keys = make_keys([os.path.relpath(path, root) for path, _ in files])
    return [Sample(key, label, path) for key, (path, label) in zip(keys, files)]


def plan_shards(samples: Sequence[Sample], shard_size: int, seed: int) -> list[list[Sample]]:
    """The samples of each shard: the key-sorted samples, shuffled with ``seed``, cut in order."""
    order = sorted(samples, key=lambda s: s.key)
    for before, after in zip(order, order[1:]):
        if before.key == after.key:
            raise ValueError(
                f"{before.path} and {after.path} have the same shard key {after.key!r}; keys must be unique"
            )
    bad = next((s for s in order if not s.key or "." in s.key or "/" in s.key or len(s.key) > MAX_KEY), None)
    if bad is not None:
        raise ValueError(f"{bad.path}: shard key {bad.key!r} must be 1 to {MAX_KEY} characters without dots or slashes")
    random.Random(seed).shuffle(order)
    return [order[start : start + shard_size] for start in range(0, len(order), shard_size)]


def kept_checksums(path: Path, planned: Sequence[Sample], recorded: list[str] | None) -> list[str] | None:
    """The checksums of a shard a previous run completed, read back from it, in tar order; None where it
    must be written again: missing, cut short, not exactly its ``planned`` samples, or its bytes no longer
    those ``recorded`` by the previous index (None: that run ended before writing one)."""
    found = []
    try:
        with open(path, "rb") as f:
            for r in records(f, str(path)):
                f.seek(r.offset)
                data = f.read(r.size)
                if len(data) != r.size:  # cut short since its headers were read
                    return None
                found.append((r.key, r.label, sample_checksum(data, r.label)))
    except (OSError, ShardError):
        return None
    if [(key, label) for key, label, _ in found] != [(s.key, s.label) for s in planned]:
        return None
    checksums = [checksum for *_, checksum in found]
    return checksums if recorded in (None, checksums) else None


def convert(
    samples: Sequence[Sample],
    classes: list[str],
    out_dir: str | Path,
    split: str,
    shard_size: int = DEFAULT_SHARD_SIZE,
    seed: int = 0,
    source: str = "",
    progress: bool = True,
    not_images: Sequence[str] = (),
    max_file_bytes: int = MAX_FILE_BYTES,
) -> ShardIndex:
    """Write ``samples`` as ``<out_dir>/<split>-NNNNNN.tar`` shards and their ``index.json``,
    keeping the shards a previous run completed (module docstring). ``progress``: show progress over the
    images (:mod:`data.progress`) and print a summary line. ``not_images``: "<where> (<what>)" of the
    source's entries skipped as not regular files, listed with the unreadable ones in the index and the summary.
    ``max_file_bytes``: a larger image is not read, and listed with them (``--max-file-mb``)."""
    if shard_size < 1:
        raise ValueError(f"shard size must be at least 1 image, not {shard_size}")
    if not SPLIT_NAME.fullmatch(split):
        raise ValueError(f"split name {split!r}: use letters, digits, '.', '-' and '_' (it names the shard files)")
    if not samples:
        raise ValueError(f"no images to convert into {out_dir}")
    out_dir = Path(out_dir)
    try:  # the index a previous conversion wrote, if a readable one
        previous = read_index(out_dir)
    except ShardError:
        previous = None
    if previous is not None and previous.split != split:
        raise ValueError(
            f"{out_dir} holds the split {previous.split!r}; give each split its own folder, "
            f"e.g. {out_dir.parent / split}"
        )
    recorded = {shard.name: shard.checksums() for shard in previous.shards} if previous is not None else {}
    out_dir.mkdir(parents=True, exist_ok=True)
    # Until this conversion finishes the folder is not a valid split: no stale index may describe it.
    (out_dir / INDEX_NAME).unlink(missing_ok=True)
    plan = plan_shards(samples, shard_size, seed)
    names = [f"{split}-{i:06d}.tar" for i in range(len(plan))]

    failed: dict[str, str] = {}  # key -> "path (reason)"
    checksums: dict[str, list[str]] = {}  # shard name -> each sample's, in tar order
    resumed = 0
    every = max(len(samples) // 100, 1)  # in a log, a line every 1%
    bar = Progress(len(samples), f"{split} shards", unit="img", every=every, enabled=progress, leave=True)
    with bar, ThreadPoolExecutor(READ_THREADS) as pool:
        for name, planned in zip(names, plan):
            kept = kept_checksums(out_dir / name, planned, recorded.get(name))
            if kept is not None:
                resumed += 1
                checksums[name] = kept
                bar.update(len(planned))
            else:
                unread, checksums[name] = write_shard(out_dir / name, planned, pool, bar, max_file_bytes)
                failed |= unread

    shards = []
    for name, planned in zip(names, plan):
        expected = [(s.key, s.label) for s in planned if s.key not in failed]
        try:
            with open(out_dir / name, "rb") as f:
                found = [(r.key, r.label) for r in records(f, str(out_dir / name))]
        except (OSError, ShardError):
            found = None  # no whole shard
        if found != expected:
            raise ShardError(
                f"{out_dir / name} does not hold the samples just written to it; "
                f"is another conversion writing to {out_dir}?"
            )
        shards.append(ShardInfo(name, len(expected), (out_dir / name).stat().st_size, "".join(checksums[name])))
    skipped = (*(f"{key}: {where}" for key, where in failed.items()), *not_images)
    index = ShardIndex(out_dir, split, list(classes), shards, source, shard_size, seed, skipped)
    write_index(index)
    if progress:
        print(summary(index, resumed))
    return index


def write_shard(
    path: Path, samples: Sequence[Sample], pool: Executor, bar: Progress, max_file_bytes: int = MAX_FILE_BYTES
) -> tuple[dict[str, str], list[str]]:
    """Write one shard through ``<path>.tmp``; returns ``{key: "path (reason)"}`` of the images
    that could not be read (or were larger than ``max_file_bytes``), and the checksum of each
    sample written, in tar order."""
    failed, checksums = {}, []
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f, tarfile.open(fileobj=f, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for sample, data in zip(samples, pool.map(partial(read_or_error, limit=max_file_bytes), samples)):
            if isinstance(data, OSError):
                failed[sample.key] = f"{sample.path} ({type(data).__name__}: {data})"
            else:
                add_member(tar, f"{sample.key}.{IMAGE_EXT}", data)
                add_member(tar, f"{sample.key}.{LABEL_EXT}", str(sample.label).encode())
                checksums.append(sample_checksum(data, sample.label))
            bar.update()
    os.replace(tmp, path)
    return failed, checksums


def read_or_error(sample: Sample, limit: int = MAX_FILE_BYTES) -> bytes | OSError:
    try:
        return read_bytes(sample, limit)
    except OSError as err:  # a vanished or unreadable file: reported, not fatal
        return err


def add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    """Add a file with the fixed metadata of every member (module docstring): TarInfo's defaults, mode 0444."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o444
    tar.addfile(info, io.BytesIO(data))  # BytesIO shares the bytes until written to


def summary(index: ShardIndex, resumed: int) -> str:
    """One line: images, shards, bytes, shards kept from a previous run, unreadable images."""
    total = sum(shard.bytes for shard in index.shards)
    size = f"{total / 1e9:,.2f} GB" if total >= 1e9 else f"{total / 1e6:,.1f} MB"
    line = (
        f"{index.split}: {index.count:,} images in {len(index.shards):,} shards, {size} -> {index.root} "
        f"({resumed:,} of {len(index.shards):,} shards resumed)"
    )
    if index.skipped:
        shown = "; ".join(index.skipped[:3]) + (f" and {len(index.skipped) - 3} more" if len(index.skipped) > 3 else "")
        line += (
            f"; skipped {len(index.skipped):,} source image(s), unreadable or not regular files, listed in "
            f"{INDEX_NAME} (a re-run retries the unreadable): {shown}"
        )
    return line
