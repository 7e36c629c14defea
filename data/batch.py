"""What a loader yields, and how unreadable images travel from worker processes to the trainer.

A dataset returns :class:`BadImage` instead of a sample it cannot decode; :func:`collate` drops
those, and the :class:`Batch` carries their count (``batch.skipped``: sum it over an epoch and
all-reduce it) and paths across worker processes; :class:`SkipLog` keeps the count and the first
few paths. A batch can therefore be smaller than the batch size, even empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch.utils.data import default_collate, get_worker_info


class Batch(NamedTuple):
    images: torch.Tensor  # uint8 [N, C, H, W], RGB (or 1 grey channel), 0-255
    labels: torch.Tensor  # int64 [N]
    skipped: int = 0  # images dropped from this batch because they could not be read
    skipped_paths: Sequence[str] = ()  # one "path (reason)" per dropped image


class BadImage(NamedTuple):
    """Marker returned by a dataset for a sample it could not read."""

    path: str
    reason: str


def split_bad(samples: list) -> tuple[list, list[str]]:
    """(the good samples, "path (reason)" of each :class:`BadImage`)."""
    good = [s for s in samples if not isinstance(s, BadImage)]
    return good, [f"{s.path} ({s.reason})" for s in samples if isinstance(s, BadImage)]


def collate(samples: list[tuple[torch.Tensor, int] | BadImage]) -> Batch:
    """Stack the good ``(image, label)`` samples; count and list the bad ones."""
    good, bad = split_bad(samples)
    if not good:
        return Batch(torch.empty(0, 3, 0, 0, dtype=torch.uint8), torch.empty(0, dtype=torch.int64), len(bad), bad)
    # default_collate stacks straight into shared memory inside a worker process (one copy less).
    images, labels = default_collate(good)
    return Batch(images, labels, len(bad), bad)


def pass_batch(batch: Batch) -> Batch:
    """``collate_fn`` for datasets whose ``__getitems__`` already returns a :class:`Batch`. In a
    worker process its tensors move to shared memory here, as ``default_collate`` stacks into it,
    so that a full /dev/shm fails in the worker, reported, not in its queue's feeder thread."""
    if get_worker_info() is not None:
        for tensor in (batch.images, batch.labels):
            if isinstance(tensor, torch.Tensor):
                tensor.share_memory_()
    return batch


@dataclass
class SkipLog:
    """Per-epoch tally of skipped images: ``add`` every batch, read, ``reset`` each epoch."""

    keep: int = 5  # how many paths to remember
    count: int = 0
    first: list[str] = field(default_factory=list)

    def add(self, batch: Batch) -> None:
        self.count += batch.skipped
        self.first.extend(batch.skipped_paths[: self.keep - len(self.first)])

    def reset(self) -> None:
        self.count = 0
        self.first = []

    def __str__(self) -> str:
        more = f" and {self.count - len(self.first)} more" if self.count > len(self.first) else ""
        return f"skipped {self.count} unreadable image(s): {'; '.join(self.first)}{more}"
