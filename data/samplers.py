"""Samplers: exact-once evaluation shards, and per-sample seeds for reproducible augmentation.

:class:`ShardSampler` (evaluation) shows every index to exactly one rank.

``DistributedSampler`` pads the index list to a multiple of the world size, so a
distributed evaluation of ImageNet val sees 50,001-50,004 images (docs/padding.md).
Here rank r gets r, r + world_size, r + 2 * world_size, ...: shards differ in length by at
most one and nothing is repeated, so summing correct counts and image counts over ranks
(an all-reduce) gives the exact accuracy.
"""

from __future__ import annotations

from collections.abc import Iterator

from torch.utils.data import DistributedSampler, Sampler


class ShardSampler(Sampler[int]):
    """Indices ``rank::world_size`` of ``range(size)``, in order."""

    def __init__(self, size: int, rank: int = 0, world_size: int = 1):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        self.indices = range(rank, size, world_size)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """The seed of one sample's augmentation in one epoch (a 63-bit mix of the three)."""
    return ((seed * 1_000_003 + epoch) * 2_654_435_761 + index) % (2**63 - 1)


class SeededSampler(Sampler[tuple[int, int]]):
    """Yields ``(index, seed)``: the dataset seeds each sample's augmentation with it.

    Augmentation then depends on (seed, epoch, index) alone: not on the number of loader
    workers, whether they persist across epochs, how many epochs this process has run, or
    the world size. A run resumed at an epoch boundary repeats the uninterrupted run exactly.
    """

    def __init__(self, inner: DistributedSampler, seed: int):
        self.inner = inner
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.inner.set_epoch(epoch)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return ((i, sample_seed(self.seed, self.epoch, i)) for i in self.inner)

    def __len__(self) -> int:
        return len(self.inner)
