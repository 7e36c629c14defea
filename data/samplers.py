"""Evaluation sampler that shows every index to exactly one rank.

``DistributedSampler`` pads the index list to a multiple of the world size, so a
distributed evaluation of ImageNet val sees 50,001-50,004 images (``shared/PADDING.md``).
Here rank r gets r, r + world_size, r + 2 * world_size, ...: shards differ in length by at
most one and nothing is repeated, so summing correct counts and image counts over ranks
(an all-reduce) gives the exact accuracy.
"""

from __future__ import annotations

from collections.abc import Iterator

from torch.utils.data import Sampler


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
