"""Image folders as tar shards (data.shards' converter, in this process), and a tiny run's overrides on them."""

from __future__ import annotations

from pathlib import Path

from data.imagefolder import find_classes, find_images
from data.shards import convert, file_samples


def to_shards(folder: Path, out: Path, shard_size: int) -> None:
    classes = None
    for split in ("train", "val"):
        found = find_classes(folder / split)
        assert classes in (None, found)
        classes = found
        samples = file_samples(folder / split, find_images(folder / split, found))
        convert(samples, found, out / split, split, shard_size=shard_size, progress=False)


def shard_overrides(root: Path, run_dir: Path, *extra: str) -> list[str]:
    return [
        "model=resnet_tiny", "data=imagenet_shards", f"data.root={root}", "data.num_classes=3",
        "data.image_size=32", "data.workers=0", "batch_size=4", "epochs=2", "log_every=2", "seed=4",
        f"run_dir={run_dir}", *extra,
    ]  # fmt: skip
