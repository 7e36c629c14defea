"""Images/s of this package's ImageNet pipeline vs torchvision's classic one, on generated JPEGs.

    python -m benchmarks.input_pipeline                      # 200 images 500x375 q90, 224 px, 1 process
    python -m benchmarks.input_pipeline --size 128 --workers 2 --width 1600 --height 1200

Rows: raw decodes (the floor), the classic ``torchvision.datasets.ImageFolder`` + PIL
``RandomResizedCrop`` / ``RandomHorizontalFlip`` / ``ToTensor`` / ``Normalize`` (and
``Resize`` / ``CenterCrop`` for val), and ours, which ends at uint8 (normalisation runs on
the device). Each row is the best of ``--rounds`` passes in one process with one torch thread
(what a DataLoader worker gets); ``--workers N`` adds whole-DataLoader rows.
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torchvision
import torchvision.transforms as T
from PIL import Image
from torch.utils.data import DataLoader
from torchvision.io import ImageReadMode, decode_jpeg

from data.batch import collate
from data.imagefolder import ImageFolder
from data.transforms import RandomResizedCropFlip, ResizeCenterCrop

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def write_jpegs(root: Path, count: int, width: int, height: int) -> list[Path]:
    """Photo-like JPEGs (smooth colour fields plus grain; ~65 kB at 500x375 q90), a third of them portrait."""
    rng = np.random.default_rng(0)
    (root / "c").mkdir(parents=True)
    paths = []
    for i in range(count):
        w, h = (width, height) if i % 3 else (height, width)
        field = Image.fromarray((rng.random((h // 16, w // 16, 3)) * 255).astype(np.uint8))
        pixels = np.asarray(field.resize((w, h), Image.Resampling.BICUBIC)).astype(np.int16)
        pixels = (pixels + rng.integers(-12, 12, pixels.shape)).clip(0, 255).astype(np.uint8)
        paths.append(root / "c" / f"{i}.JPEG")
        Image.fromarray(pixels).save(paths[-1], quality=90)
    return paths


def rate(work: Callable[[], int], rounds: int) -> float:
    """Best images/s over ``rounds`` calls of ``work`` (which returns how many images it did)."""
    best = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        n = work()
        best = max(best, n / (time.perf_counter() - start))
    return best


def each(dataset) -> Callable[[], int]:
    def work() -> int:
        for i in range(len(dataset)):
            dataset[i]
        return len(dataset)

    return work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--width", type=int, default=500)
    parser.add_argument("--height", type=int, default=375)
    parser.add_argument("--size", type=int, default=224, help="output side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0, help="also time whole DataLoaders with this many workers")
    args = parser.parse_args()
    torch.set_num_threads(1)
    size = args.size

    with tempfile.TemporaryDirectory() as tmp:
        paths = write_jpegs(Path(tmp), args.images, args.width, args.height)
        classic_train = T.Compose(
            [T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]
        )
        classic_val = T.Compose([T.Resize(int(size / 0.875)), T.CenterCrop(size), T.ToTensor(), T.Normalize(MEAN, STD)])
        datasets = {
            "classic train (torchvision ImageFolder + PIL, float)": torchvision.datasets.ImageFolder(
                tmp, classic_train
            ),
            "ours train (uint8)": ImageFolder(tmp, RandomResizedCropFlip(size)),
            "classic val (torchvision ImageFolder + PIL, float)": torchvision.datasets.ImageFolder(tmp, classic_val),
            "ours val (uint8)": ImageFolder(tmp, ResizeCenterCrop(size)),
        }

        def decode_torchvision() -> int:
            for p in paths:
                decode_jpeg(torchvision.io.read_file(str(p)), mode=ImageReadMode.RGB)
            return len(paths)

        def decode_pil() -> int:
            for p in paths:
                np.array(Image.open(io.BytesIO(p.read_bytes())).convert("RGB"))
            return len(paths)

        kb = sum(p.stat().st_size for p in paths) / len(paths) / 1024
        print(f"{args.images} JPEGs {args.width}x{args.height} q90 ({kb:.0f} kB), output {size}px, 1 thread:")
        rows = {"raw decode, torchvision decode_jpeg": decode_torchvision, "raw decode, PIL": decode_pil}
        rows |= {name: each(dataset) for name, dataset in datasets.items()}
        for name, work in rows.items():
            print(f"  {name:55s} {rate(work, args.rounds):7.0f} images/s")
        if args.workers:
            print(f"DataLoader, {args.workers} workers, batch 32:")
            for name, dataset in datasets.items():
                ours = isinstance(dataset, ImageFolder)
                loader = DataLoader(dataset, 32, num_workers=args.workers, collate_fn=collate if ours else None)
                print(f"  {name:55s} {rate(lambda loader=loader: sum(len(b[1]) for b in loader), 2):7.0f} images/s")


if __name__ == "__main__":
    main()
