"""Plain torchvision-reference-style loops, the baselines that ``benchmarks.end_to_end`` runs beside train.py, eval.py.

    python -m benchmarks.baseline_loops train --root /tmp/folder --arch resnet_small --size 64 --batch 32 --steps 30
    python -m benchmarks.baseline_loops eval --root /tmp/folder --weights outputs/<run>/last.pt --size 64

What a user writes from torchvision's references/classification: the classic
``torchvision.datasets.ImageFolder`` with PIL transforms ending in ``ToTensor`` +
``Normalize``, a ``DataLoader``, and the step. The model is the same one train.py builds
(``resnet.build_model``), so only the data path and the loop differ. Each run prints one
JSON line: images, seconds and images/s of the loop, timed like train.py's and eval.py's
own loops (from the first batch requested to the last step: worker start-up included).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torchvision
import torchvision.transforms as T
from torch import nn
from torch.utils.data import DataLoader

from resnet import build_model
from resnet.checkpoint import load_model

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def train(root: Path, arch: str, size: int, batch: int, workers: int, steps: int, channels_last: bool) -> dict:
    """``steps`` SGD steps of ``arch`` on ``root/train``; the loop's images/s."""
    transform = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    dataset = torchvision.datasets.ImageFolder(str(root / "train"), transform)
    loader = DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers, drop_last=True)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model = build_model(arch, num_classes=len(dataset.classes)).to(memory_format=memory_format).train()
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)  # train.py's default
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    images, start = 0, time.perf_counter()
    for step, (x, y) in enumerate(loader):
        if step == steps:
            break
        loss = criterion(model(x.contiguous(memory_format=memory_format)), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        images += len(y)
    seconds = time.perf_counter() - start
    return {"images": images, "seconds": seconds, "images_per_s": images / seconds, "loss": loss.item()}


@torch.inference_mode()
def evaluate(root: Path, weights: Path, size: int, batch: int, workers: int, crop_pct: float = 0.875) -> dict:
    """Top-1 error of the checkpoint ``weights`` on ``root/val``, single centre crop; the loop's images/s."""
    transform = T.Compose(
        [T.Resize(math.floor(size / crop_pct)), T.CenterCrop(size), T.ToTensor(), T.Normalize(MEAN, STD)]
    )
    dataset = torchvision.datasets.ImageFolder(str(root / "val"), transform)
    loader = DataLoader(dataset, batch_size=batch, num_workers=workers)
    model = load_model(weights)
    correct, images, start = 0, 0, time.perf_counter()
    for x, y in loader:
        correct += int((model(x).argmax(1) == y).sum())
        images += len(y)
    seconds = time.perf_counter() - start
    return {
        "images": images,
        "seconds": seconds,
        "images_per_s": images / seconds,
        "top1_err": 100.0 * (1 - correct / images),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("loop", choices=("train", "eval"))
    parser.add_argument("--root", type=Path, required=True, help="holds train/<class>/* and val/<class>/*")
    parser.add_argument("--arch", default="resnet_small", help="train: the architecture (resnet.build_model)")
    parser.add_argument("--weights", type=Path, help="eval: a checkpoint written by train.py")
    parser.add_argument("--size", type=int, default=64, help="network input side (px)")
    parser.add_argument("--batch", type=int, default=32, help="images per step")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--steps", type=int, default=30, help="train: optimizer steps")
    parser.add_argument("--channels-last", action="store_true", help="train: NHWC model and input, as train.py")
    args = parser.parse_args(argv)
    if args.loop == "train":
        result = train(args.root, args.arch, args.size, args.batch, args.workers, args.steps, args.channels_last)
    else:
        if args.weights is None:
            parser.error("eval needs --weights")
        result = evaluate(args.root, args.weights, args.size, args.batch, args.workers)
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
