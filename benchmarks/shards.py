"""Shards vs image folders: the training loader's images/s per worker on the same JPEGs.

    python -m benchmarks.shards              # 512 ImageNet-sized JPEGs (~110 kB), 1 worker, 7 repeats
    python -m benchmarks.shards --quick      # smoke run

Both loaders are ``data.build_loaders`` with the same training transform (random-resized crop
to 224 and flip) and the same worker count; one is ``imagefolder`` over ``train/<class>/*.JPEG``,
the other ``imagenet_shards`` over the same files converted by ``python -m data.shards folder``.
A pass is one epoch; the passes alternate between the two and the ratio is the median of the
paired ratios. "read only" passes time the bytes alone (the transform returns the byte count),
which is where shards differ: one open and one sequential read per ~1,000 images instead of
one per image. "shards unverified" trains on the shards without checking each sample's CRC-32 as
it is read: verified / unverified is what that check costs (goal: at most 2 % of the loader's
rate). "shards feeder-shared" hands each batch to the queue as the dataset built it, so that the
queue's feeder thread copies it into shared memory, as before a full /dev/shm had to be caught in
the worker (``data.batch.pass_batch`` now copies it there in the worker itself): worker-shared /
feeder-shared is what moving that copy costs (goal: at most 1 %). Files are in the page cache
here (a local disk, read before timing), so this is the floor of the difference; on a shared
file system the per-file cost is milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import print_ratios
from benchmarks.input_pipeline import save_result, write_jpegs
from data import build_loaders
from data.imagefolder import find_classes, find_images
from data.shards import convert, file_samples
from resnet.config import data_config

GOAL = ">= 1.0"  # shards / folders, loader images/s per worker
VERIFY_GOAL = ">= 0.98"  # shards read with their checksums checked / without
SHARE_GOAL = ">= 0.99"  # batches moved to shared memory in the worker / by the queue's feeder thread


def as_built(batch):
    """A loader's ``collate_fn`` that hands the dataset's batch on untouched (torch's queue then
    moves its tensors to shared memory in its feeder thread)."""
    return batch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=512, help="generated JPEGs (4 classes)")
    parser.add_argument("--workers", type=int, default=1, help="loader workers of each loader")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--shard-size", type=int, default=128, help="images per shard")
    parser.add_argument("--repeats", type=int, default=7, help="alternating passes; the ratio is their median")
    parser.add_argument("--quick", action="store_true", help="smoke run: 64 images, 2 repeats")
    parser.add_argument("--out", type=Path, default=Path("results/bench_shards.json"), help="JSON result path")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.repeats, args.shard_size = 64, 2, 16
    return args


def make_data(root: Path, images: int, shard_size: int) -> None:
    per_class = images // 4
    for c in range(4):
        for i, path in enumerate(
            write_jpegs(root / "folder" / "train" / f"c{c}", per_class, 500, 375, seed=c, grain=40)
        ):
            if i < max(per_class // 8, 1):  # a val split: the loaders need one
                (root / "folder" / "val" / f"c{c}").mkdir(parents=True, exist_ok=True)
                (root / "folder" / "val" / f"c{c}" / path.name).write_bytes(path.read_bytes())
    for split in ("train", "val"):
        folder = root / "folder" / split
        classes = find_classes(folder)
        convert(
            file_samples(folder, find_images(folder, classes)),
            classes,
            root / "shards" / split,
            split,
            shard_size=shard_size,
            progress=False,
        )


class ByteCount:
    """A 'transform' that only reads: the image's byte count as a tensor."""

    def __call__(self, data: bytes) -> torch.Tensor:
        return torch.tensor([len(data)])

    def __repr__(self) -> str:
        return "ByteCount()"


def epoch_rate(loader) -> float:
    start = time.perf_counter()
    images = sum(len(batch[1]) for batch in loader)
    return images / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_data(root, args.images, args.shard_size)
        names = {"folder": "imagefolder", "shards": "imagenet_shards"}

        def build(kind: str):
            return build_loaders(
                data_config(names[kind], root=str(root / kind), workers=args.workers), batch_size=args.batch
            )

        loaders = {kind: build(kind) for kind in names}
        readers = {kind: build(kind) for kind in names}
        for loader in readers.values():  # set before the first pass starts (and pickles) the workers
            loader.train.dataset.transform = ByteCount()
        unverified = build("shards")
        unverified.train.dataset.verify = False
        feeder = build("shards")
        feeder.train.collate_fn = as_built
        rates: dict[str, list[float]] = {f"{kind} {what}": [] for what in ("train", "read only") for kind in loaders}
        rates["shards unverified train"] = []
        rates["shards feeder-shared train"] = []
        print(f"timing {args.images} JPEGs, {args.workers} worker(s), {args.repeats} alternating passes...", flush=True)
        for repeat in range(args.repeats + 1):  # the first pass warms the page cache and the workers
            for kind in loaders:
                passes = [("train", loaders[kind]), ("read only", readers[kind])]
                if kind == "shards":
                    passes += [("unverified train", unverified), ("feeder-shared train", feeder)]
                for what, source in passes:
                    source.set_epoch(repeat)
                    rate = epoch_rate(source.train)
                    if repeat:
                        rates[f"{kind} {what}"].append(rate / max(args.workers, 1))

    def ratio(what: str) -> float:
        return statistics.median(a / b for a, b in zip(rates[f"shards {what}"], rates[f"folder {what}"]))

    result = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "env": {"torch": torch.__version__, "cpus": os.cpu_count(), "loadavg": os.getloadavg()},
        "images_per_s_per_worker": {name: statistics.median(r) for name, r in rates.items()},
        "rates": rates,
        "ratios": {
            "shards / folders train": ratio("train"),
            "shards / folders read only": ratio("read only"),
            "shards verified / unverified train": statistics.median(
                a / b for a, b in zip(rates["shards train"], rates["shards unverified train"])
            ),
            "shards worker-shared / feeder-shared train": statistics.median(
                a / b for a, b in zip(rates["shards train"], rates["shards feeder-shared train"])
            ),
        },
        "goals": {
            "shards / folders train": GOAL,
            "shards verified / unverified train": VERIFY_GOAL,
            "shards worker-shared / feeder-shared train": SHARE_GOAL,
        },
    }
    print(f"\n{'images/s per worker':<36}{'median':>10}")
    for name, value in result["images_per_s_per_worker"].items():
        print(f"{name:<36}{value:>10.0f}")
    print_ratios(result, 36, 2, 10)
    save_result(result, args.out)
    return result


if __name__ == "__main__":
    main()
