"""Read shards as batches: split over ranks and loader workers, resumable mid-epoch, exact-once for evaluation.

The index gives every shard's count, so an epoch is a *plan* computed from (seed, epoch, rank, worker)
alone before a byte is read (why not webdataset, streaming or litdata: docs/cluster.md), and a step is
a fixed set of sample positions in it:

* **train**: the shard order is shuffled per epoch, and each shard's samples within it; the
  concatenation is the epoch's sequence. Rank r takes the r-th of ``world_size`` equal
  contiguous ranges (the ``count mod world_size`` samples left over change with the shard order),
  cut into ``len(self)`` full batches. Each loader worker reads a contiguous block of those
  batches, so it reads whole shards, sequentially, one at a time (its memory: one shard). Every
  rank has the same number of steps, so DDP never waits for a rank that ran out.
* **resume mid-epoch**: ``set_epoch(epoch, start_step)``; each worker skips, unread, the batches the
  DataLoader had already delivered from it (:meth:`ShardBatches.worker_batches`).
* **evaluation**: no shuffle, every sample in exactly one contiguous range, none dropped, none
  repeated, whatever the world size.
* augmentation is seeded per sample from (seed, epoch, position), as for image folders.

Every sample's image and label are checked against the CRC-32 the conversion recorded, as they
are read (as TFRecord's reader checks each record): a sample whose bytes or label changed is
skipped and counted like an image that does not decode (about 2 % of a loader's time: docs/benchmarks.md).
A record that does not decode, or is larger than ``max_file_bytes`` (``data.max_file_mb``: refused
from its tar header, unread), is skipped and counted as for image folders
(:class:`data.batch.BadImage`); a shard that cannot be read mid-run counts all of its
samples in the range as skipped, with the reason. Whole-file problems (a truncated or
missing shard) are found by :func:`data.shards.check_shards` before training starts.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from ..batch import BadImage, collate
from ..decode import DECODE_ERRORS
from ..file_index import pack
from ..files import MAX_FILE_BYTES, check_size
from ..samplers import sample_seed, seeded
from .index import ShardError, ShardIndex, check_shards, read_index, records, sample_checksum


def _permutation(n: int, *seed: int) -> list[int]:
    """A permutation of range(n) that depends on the integers ``seed`` alone."""
    mixed = 0
    for part in seed:
        mixed = (mixed * 1_000_003 + part) % (2**63 - 1)
    return torch.randperm(n, generator=torch.Generator().manual_seed(mixed)).tolist()


class ShardBatches(IterableDataset):
    """Batches of ``(image, label)`` from the shards of one split, for process ``rank``.

    ``transform`` maps an image's bytes to a tensor (the presets of :mod:`data.transforms`);
    ``collate_fn`` stacks a batch's samples and drops unreadable ones (:func:`data.collate`).
    Use with ``DataLoader(dataset, batch_size=None, collate_fn=data.batch.pass_batch)``.
    """

    def __init__(
        self,
        index: ShardIndex,
        transform: Callable[[bytes], torch.Tensor],
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        train: bool = True,
        collate_fn: Callable[[list], tuple] = collate,
        limit: int | None = None,
        verify: bool = True,
        max_file_bytes: int = MAX_FILE_BYTES,
    ):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        self.index = index
        self.transform = transform
        self.batch_size = batch_size
        self.rank, self.world_size = rank, world_size
        self.seed = seed
        self.train = train
        self.collate_fn = collate_fn
        self.limit = limit  # evaluation: the first this many samples only (None: all)
        self.verify = verify  # each sample's bytes and label against the conversion's CRC-32, as read
        self.max_file_bytes = max_file_bytes  # a larger image is skipped unread, as an image file would be
        # Per shard, in numpy arrays: workers read them without copying (data.file_index says why).
        self.counts = np.array([shard.count for shard in index.shards], dtype=np.int64)
        self._names = pack([shard.name for shard in index.shards])
        # (epoch, start step), in shared memory: persistent workers see set_epoch's values.
        self._position = torch.zeros(2, dtype=torch.int64).share_memory_()

    @classmethod
    def open(cls, root: str | Path, *args, **kwargs) -> ShardBatches:
        """The shards of ``root`` (a folder with index.json), each checked to be whole."""
        index = read_index(root)
        check_shards(index)  # sizes
        for shard in index.shards:  # and a tar header first (one 512-byte read each)
            with open(index.path(shard), "rb") as f:
                try:
                    tarfile.TarInfo.frombuf(f.read(tarfile.BLOCKSIZE), tarfile.ENCODING, "surrogateescape")
                except tarfile.HeaderError:
                    raise ShardError(f"{index.path(shard)} is not a tar file; re-run the conversion") from None
        return cls(index, *args, **kwargs)

    @property
    def classes(self) -> list[str]:
        return self.index.classes

    def set_epoch(self, epoch: int, start_step: int = 0) -> None:
        if not 0 <= start_step <= self.steps:
            raise ValueError(f"start_step must be in [0, {self.steps}], got {start_step}")
        self._position[0], self._position[1] = epoch, start_step

    # -- the plan ------------------------------------------------------------------------

    @property
    def total(self) -> int:
        """The samples of an epoch: all of the split's, or its first ``limit``."""
        count = int(self.counts.sum())
        return count if self.limit is None else min(count, self.limit)

    def _range(self) -> tuple[int, int]:
        """This rank's [first, last) positions in the epoch's sequence."""
        if self.train:
            share = self.total // self.world_size
            return self.rank * share, self.rank * share + share
        return self.total * self.rank // self.world_size, self.total * (self.rank + 1) // self.world_size

    @property
    def steps(self) -> int:
        """Batches of this rank per epoch: full ones in training, the last may be partial in evaluation."""
        first, last = self._range()
        return (last - first) // self.batch_size if self.train else -(-(last - first) // self.batch_size)

    def __len__(self) -> int:
        return self.steps - int(self._position[1]) if self.train else self.steps

    def worker_batches(self, worker: int, workers: int, start_step: int = 0) -> range:
        """The batch numbers (of this rank's epoch) that loader worker ``worker`` produces.

        Logical worker w reads a contiguous block (the first ``steps % workers`` blocks one
        longer), and the DataLoader's round-robin, which starts every epoch at worker 0,
        delivers the blocks interleaved in an order fixed by ``workers``. After ``start_step``
        delivered batches the delivery went on at logical worker ``start_step % workers``: so
        DataLoader worker i plays logical worker ``(i + start_step) % workers``, and each skips
        the batches it had delivered, without reading them."""
        steps = self.steps
        logical = (worker + start_step) % workers
        sizes = [steps // workers + (w < steps % workers) for w in range(workers)]
        begin = sum(sizes[:logical])
        delivered = -(-(start_step - logical) // workers) if start_step > logical else 0
        return range(begin + min(delivered, sizes[logical]), begin + sizes[logical])

    # -- reading -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[tuple]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        epoch, start_step = int(self._position[0]), int(self._position[1]) if self.train else 0
        batches = self.worker_batches(worker, workers, start_step)
        if not batches:
            return
        first, last = self._range()
        lo = first + batches.start * self.batch_size
        hi = min(first + batches.stop * self.batch_size, last)
        samples: list = []
        for position, sample in self._samples(epoch, lo, hi):
            samples.append(sample)
            if len(samples) == self.batch_size or position == hi - 1:
                yield self.collate_fn(samples)
                samples = []

    def _samples(self, epoch: int, lo: int, hi: int) -> Iterator[tuple[int, tuple | BadImage]]:
        """(position, sample) for the positions [lo, hi) of the epoch's sequence (shuffled in training)."""
        n = len(self.counts)
        shard_order = _permutation(n, self.seed, epoch) if self.train else list(range(n))
        start = 0  # position of the current shard's first sample
        for shard in shard_order:
            count = int(self.counts[shard])
            if start + count <= lo:
                start += count
                continue
            if start >= hi:
                return
            order = _permutation(count, self.seed, epoch, shard) if self.train else list(range(count))
            first = max(lo, start)
            take = order[first - start : min(hi - start, count)]
            yield from zip(range(first, first + len(take)), self._read(shard, take, epoch, first))
            start += count

    def _read(self, shard: int, members: list[int], epoch: int, first: int) -> Iterator[tuple | BadImage]:
        """The ``members`` of one shard, decoded: one open, the headers listed, then each image's
        bytes read where the listing says (no copy of the whole shard in memory). A shard that
        cannot be read counts its remaining members as bad images."""
        names, starts = self._names
        name = os.fsdecode(names[starts[shard] : starts[shard + 1]].tobytes())
        count = int(self.counts[shard])
        done = 0
        try:
            with open(self.index.root / name, "rb") as f:
                listed = records(f, name)
                if len(listed) != count:
                    raise ShardError(f"{name} holds {len(listed)} samples, index.json says {count}")
                recorded = self.index.shards[shard].crc32 if self.verify else None
                for offset, i in enumerate(members):
                    record = listed[i]
                    try:  # the header's size, before a byte is read (shards converted before the limit)
                        check_size(record.size, f"{name}:{record.key}.jpg", self.max_file_bytes)
                    except OSError as err:
                        done += 1
                        yield BadImage(f"{name}:{record.key}", f"{type(err).__name__}: {err}")
                        continue
                    f.seek(record.offset)
                    data = f.read(record.size)
                    if len(data) != record.size:
                        raise ShardError(f"{name} ends inside {record.key}.jpg")
                    done += 1
                    if recorded is not None and sample_checksum(data, record.label) != recorded[8 * i : 8 * i + 8]:
                        yield BadImage(
                            f"{name}:{record.key}",
                            "its image or label changed since the conversion "
                            "(checksum mismatch); re-run the conversion to rewrite the shard",
                        )
                        continue
                    yield self._decode(data, record.label, f"{name}:{record.key}", first + offset, epoch)
        except (OSError, ShardError) as err:
            for i in members[done:]:
                yield BadImage(f"{name}#{i}", f"unreadable shard: {err}")

    def _decode(self, data: bytes, label: int, name: str, position: int, epoch: int) -> tuple | BadImage:
        # In training the sample's augmentation depends on (seed, epoch, position) alone.
        with seeded(sample_seed(self.seed, epoch, position)) if self.train else nullcontext():
            try:
                return self.transform(data), label
            except DECODE_ERRORS as err:
                return BadImage(name, f"{type(err).__name__}: {err}")


__all__ = ["ShardBatches"]
