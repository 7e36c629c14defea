"""A list of ``(path, label)`` that loader workers share instead of copying: :class:`FileIndex`.

A forked loader worker that reads an entry of a Python list of ``(path, label)`` tuples writes its
reference counts, so the page holding it is copied into the worker: over an epoch each worker
ends up with a private copy of the whole list (pytorch/pytorch#13246; about 230 MiB per worker
for ImageNet's 1.28 M training images, docs/benchmarks.md). A :class:`FileIndex` is three numpy
arrays (the paths' bytes end to end, where each starts, the labels): reading an entry writes
nothing, and a spawned worker unpickles three buffers, whatever the number of images.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence

import numpy as np


def pack(names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 bytes of every name end to end, int64 start of each and the end of the last).
    Names are encoded as the OS does (``os.fsencode``), so any file name round-trips."""
    encoded = [os.fsencode(name) for name in names]
    starts = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=starts[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), starts


def unpack(data: np.ndarray, starts: np.ndarray) -> list[str]:
    """The names :func:`pack` packed, all at once (a Python list: for the main process, not workers)."""
    whole = data.tobytes()
    return [os.fsdecode(whole[a:b]) for a, b in zip(starts[:-1].tolist(), starts[1:].tolist())]


class FileIndex:
    """``(path, label)`` pairs, as a read-only sequence, held in three numpy arrays.

    ``prefix`` is the part every path shares (the folder they were found in, with its
    separator): it is stored once, and ``names`` holds the rest of each path.
    """

    def __init__(self, prefix: str, names: np.ndarray, starts: np.ndarray, labels: np.ndarray):
        if len(starts) != len(labels) + 1:
            raise ValueError(f"{len(starts)} path starts for {len(labels)} labels; expected one more")
        self.prefix = prefix
        self.names = names  # uint8
        self.starts = starts  # int64, len + 1
        self.labels = labels  # int32

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, int]], prefix: str = "") -> FileIndex:
        """The index of ``(path, label)`` pairs; every path must start with ``prefix``."""
        pairs = list(pairs)
        return cls.from_paths([path for path, _ in pairs], np.array([label for _, label in pairs], np.int32), prefix)

    @classmethod
    def from_paths(cls, paths: Sequence[str], labels: np.ndarray, prefix: str = "") -> FileIndex:
        """The index of ``paths[i]`` labelled ``labels[i]``; every path must start with ``prefix``."""
        stray = next((path for path in paths if not path.startswith(prefix)), None)
        if stray is not None:
            raise ValueError(f"{stray} is not under {prefix}")
        names, starts = pack([path[len(prefix) :] for path in paths])
        return cls(prefix, names, starts, np.asarray(labels, dtype=np.int32))

    def __len__(self) -> int:
        return len(self.labels)

    def path(self, i: int) -> str:
        return self.prefix + os.fsdecode(self.names[self.starts[i] : self.starts[i + 1]].tobytes())

    def label(self, i: int) -> int:
        return int(self.labels[i])

    def __getitem__(self, i: int) -> tuple[str, int]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"index {i} out of range for {len(self)} files")
        i = i % len(self)
        return self.path(i), self.label(i)

    def __iter__(self) -> Iterator[tuple[str, int]]:
        """Every pair in order (decoded in one pass: for listing, not for loader workers)."""
        for name, label in zip(unpack(self.names, self.starts), self.labels.tolist()):
            yield self.prefix + name, label

    def relabel(self, table: np.ndarray) -> FileIndex:
        """The same paths, label ``l`` becoming ``table[l]``."""
        return FileIndex(self.prefix, self.names, self.starts, np.asarray(table, dtype=np.int32)[self.labels])

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays."""
        return self.names.nbytes + self.starts.nbytes + self.labels.nbytes + len(self.prefix)

    def __repr__(self) -> str:
        return f"FileIndex({len(self):,} files under {self.prefix!r}, {self.nbytes / 2**20:.1f} MiB)"
