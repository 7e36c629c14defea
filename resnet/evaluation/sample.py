"""A sample of labelled images of a split, read once and kept: detection scores every preset on
it, re-gridding re-estimates and fine-tunes on it (:func:`read_images`)."""

from __future__ import annotations

import torch
from torch.utils.data import IterableDataset

from data.dataloader import DataLoader
from data.progress import image_pass

from .loader import EvalData, EvalProtocol
from .tencrop import protocol_view


def read_images(
    data: EvalData, protocol: EvalProtocol, images: int, batch_size: int
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], int]:
    """At most ``images`` labelled images of ``data`` as (uint8 [N, C, crop, crop], labels)
    batches, and how many unreadable files were skipped.

    The images are spread evenly over the split (every k-th), so that a split stored class by
    class gives every class its share; tar shards are read from their start.
    """
    loader, wanted = data.loader, min(images, data.size)
    if wanted < data.size and not isinstance(loader.dataset, IterableDataset):
        step = data.size / wanted
        loader = DataLoader(
            loader.dataset,
            batch_size=batch_size,
            sampler=[int(i * step) for i in range(wanted)],
            num_workers=loader.num_workers,
            collate_fn=loader.collate_fn,
        )
    view = protocol_view(protocol, data.device_resize)  # crop (and resize in-memory data) as the eval loop does
    batches, skipped, taken = [], 0, 0
    with image_pass(wanted, "read images") as bar:
        for batch in loader:
            skipped += int(batch[2]) if len(batch) > 2 else 0
            labels = batch[1][: wanted - taken]
            if len(labels):
                batches.append((view(batch[0][: len(labels)], None), labels))
            taken += len(labels)
            bar.update(len(labels), images=len(labels))
            if taken >= wanted:
                break
        if skipped:
            bar.log({"unreadable": f"{skipped:,} skipped"})
    return batches, skipped
