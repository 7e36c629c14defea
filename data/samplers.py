"""Samplers: exact-once evaluation shards, and per-sample seeds for reproducible augmentation.

``DistributedSampler`` pads the index list to a multiple of the world size, so a distributed
evaluation of ImageNet val sees 50,001-50,004 images (docs/padding.md). :class:`ShardSampler`
gives rank r the indices r, r + world_size, r + 2 * world_size, ...: nothing repeated, so summing
correct counts and image counts over ranks gives the exact accuracy. ``take=N`` (train.py's
``val_images``) shards N indices spread evenly over the set (:func:`spread`: a set stored class
by class keeps every class's share), the same N at every world size.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from itertools import islice

import torch
from torch.utils.data import DistributedSampler, Sampler


class ShardSampler(Sampler[int]):
    """Indices ``rank::world_size`` of ``range(size)``, in order; ``take``: of :func:`spread`'s
    ``take`` indices instead (None: all)."""

    def __init__(self, size: int, rank: int = 0, world_size: int = 1, take: int | None = None):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        self.indices = spread(size, take)[rank::world_size]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def spread(size: int, take: int | None = None) -> range | list[int]:
    """``take`` of the indices of ``range(size)``, spread evenly over it (``i * size // take``), in
    order; all of them where ``take`` is None or not below ``size``."""
    if take is None or take >= size:
        return range(size)
    return [i * size // take for i in range(take)]


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """The seed of one sample's augmentation in one epoch (a 63-bit mix of the three)."""
    return ((seed * 1_000_003 + epoch) * 2_654_435_761 + index) % (2**63 - 1)


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Draws inside come from ``seed`` alone; the CPU generator's state is put back after.
    Cheaper than torch.random.fork_rng + torch.manual_seed, which seed every device."""
    generator = torch.default_generator
    state = generator.get_state()
    generator.manual_seed(seed)
    try:
        yield
    finally:
        generator.set_state(state)


class EpochSampler(Sampler):
    """This rank's shuffled share of one epoch, from any position in it.

    ``set_epoch(epoch, start)`` reshuffles (``DistributedSampler``, seeded by (seed, epoch)) and
    skips the first ``start`` indices: a run resumed mid-epoch reads what the uninterrupted run read.
    With ``seeded=True`` it yields ``(index, seed)``, and the dataset seeds the sample's augmentation
    with it (:class:`data.imagefolder.ImageFolder`): it then depends on (seed, epoch, index) alone,
    not on the loader workers, how many epochs this process has run, or the world size.
    """

    def __init__(self, inner: DistributedSampler | Sampler, seed: int, seeded: bool = True, rank: int | None = None):
        self.inner = inner
        self.seed = seed
        self.seeded = seeded
        self.rank = rank  # set where ``inner`` repeats indices (timm's RepeatAugSampler): each copy its own seed
        self.epoch = 0
        self.start = 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        if not 0 <= start <= len(self.inner):
            raise ValueError(f"start must be in [0, {len(self.inner)}], got {start}")
        self.epoch, self.start = epoch, start
        self.inner.set_epoch(epoch)

    def __iter__(self) -> Iterator[int | tuple[int, int]]:
        if self.seeded and self.rank is not None:  # repeated indices: (rank, copy) tell copies apart
            seen: dict[int, int] = {}
            seeds = []
            for i in self.inner:
                copy = seen[i] = seen.get(i, -1) + 1
                seeds.append((i, sample_seed(sample_seed(self.seed, self.rank, copy), self.epoch, i)))
            return iter(seeds[self.start :])
        indices = islice(self.inner, self.start, None)
        if not self.seeded:
            return indices
        return ((i, sample_seed(self.seed, self.epoch, i)) for i in indices)

    def __len__(self) -> int:
        return len(self.inner) - self.start
