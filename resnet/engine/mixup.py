"""timm's Mixup / CutMix for batches of any size.

Skipping unreadable images leaves batches of any size, odd ones too, and timm's ``Mixup``
asserts an even batch. In its per-batch mode (the one used here) a batch mixes with its own
reverse, so an odd batch's middle image would pair with itself; :class:`AnyBatchMixup` does
what that pairing amounts to without the assert: it mixes the first ``n - 1`` images as timm
does and keeps the last one as it is, with its own label (smoothed like every other).
"""

from __future__ import annotations

import torch
from timm.data import Mixup
from timm.data.mixup import mixup_target


class AnyBatchMixup(Mixup):
    """``timm.data.Mixup`` (``mode="batch"``) that accepts any batch size, 1 included."""

    def __call__(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if len(x) % 2 == 0:
            return super().__call__(x, target)
        _, mixed = super().__call__(x[:-1], target[:-1])  # in place: x[:-1] is a view of x
        last = mixup_target(target[-1:], self.num_classes, 1.0, self.label_smoothing)
        return x, torch.cat([mixed, last.to(mixed.dtype)])
