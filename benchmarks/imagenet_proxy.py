"""The demo's padding question on the ImageNet shape: ResNet-18 on RGB JPEG folders at 64 px.

    python -m benchmarks.imagenet_proxy                      # write the folders once, then the demo on them
    python -m benchmarks.imagenet_proxy --epochs 4 amp=none  # the rest goes to resnet-demo

The built-in demo's model (``resnet_small``, 28 px) has one stride-2 site whose padding differs
between ``symmetric`` and ``asymmetric``: the stem conv. A ResNet-18 at 64 px has all five of
ImageNet's (the 7x7/2 stem conv, the 3x3/2 stem pool, the first conv of layers 2-4), on maps of
64, 32, 16, 8 and 4 pixels. This command trains it under each scheme and on their grid and
re-grids the asymmetric model, through the demo itself (``resnet-demo`` with
``model=resnet18 data=imagefolder ...``): the cross matrix and the re-gridding table, each
method's seconds, and the wall time, in ``--out`` (default ``results/imagenet_proxy``).

The images: Fashion-MNIST's garments (the Debian package the project reads already) made
ImageNet-like, an ImageNet-layout folder ``root/{train,val}/n<8 digits>/<i>.JPEG`` of 72x72 RGB
JPEGs (q90): each garment scaled to 44-64 px, tinted away from the background and placed at a random
offset on a noisy two-colour gradient, so that position, colour and background vary as in
photographs and nothing sits on a fixed grid. Training reads them as ImageNet is read
(``RandomResizedCrop`` to 64 px, its smallest crop 35% of the image as FFCV's low-resolution
recipes take it, and flips; evaluation resizes to 73 and centre-crops 64); the demo's recipe
otherwise, at batch 64 and peak LR 0.1 x 64/256 (ResNet-18 from scratch on 10,000 images). The
folders are written once per ``--root`` (seconds), from the first ``--train-per-class`` training
and ``--val-per-class`` test images of each class.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F


def class_folder(label: int) -> str:
    return f"n{label:08d}"  # ImageNet's synset-id form


def render(images: torch.Tensor, size: int, generator: torch.Generator) -> torch.Tensor:
    """Garments ``images`` uint8 [N, 1, 28, 28] as uint8 RGB [N, 3, size, size] scenes: each scaled,
    tinted and placed at random on a noisy gradient (the draws come from ``generator``)."""
    n = len(images)
    ramp = torch.linspace(0, 1, size)
    horizontal = torch.rand(n, generator=generator) < 0.5
    along = torch.where(horizontal.view(n, 1, 1), ramp.view(1, 1, size), ramp.view(1, size, 1)).unsqueeze(1)
    low, high = torch.rand(n, 3, 1, 1, generator=generator), torch.rand(n, 3, 1, 1, generator=generator)
    scenes = low + (high - low) * along + 0.04 * torch.randn(n, 3, size, size, generator=generator)
    # a tint far from the background's mean colour: the garment stands out, as objects in photographs do
    tints = (1 - (low + high) / 2 + 0.3 * torch.randn(n, 3, 1, 1, generator=generator)).clamp(0, 1)
    sides = torch.randint(44, 65, (n,), generator=generator)
    for i in range(n):
        side = int(sides[i])
        alpha = F.interpolate(images[i : i + 1].float() / 255, size=(side, side), mode="bilinear", antialias=True)[0]
        top, left = (int(v) for v in torch.randint(0, size - side + 1, (2,), generator=generator))
        window = scenes[i, :, top : top + side, left : left + side]
        scenes[i, :, top : top + side, left : left + side] = window * (1 - alpha) + tints[i] * alpha
    return (scenes.clamp(0, 1) * 255).round().to(torch.uint8)


def write_split(folder: Path, images: torch.Tensor, labels: torch.Tensor, per_class: int, size: int, seed: int) -> int:
    """``per_class`` images of each class, the first of the split, rendered and written as JPEGs."""
    from torchvision.io import encode_jpeg

    generator = torch.Generator().manual_seed(seed)
    chosen = torch.cat([torch.nonzero(labels == c).flatten()[:per_class] for c in range(int(labels.max()) + 1)])
    written = 0
    for start in range(0, len(chosen), 1000):
        batch = chosen[start : start + 1000]
        scenes = render(images[batch], size, generator)
        for index, data in zip(batch.tolist(), encode_jpeg(list(scenes), quality=90)):
            path = folder / class_folder(int(labels[index])) / f"{index:05d}.JPEG"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data.numpy().tobytes())
            written += 1
    return written


def make_proxy_folders(root: Path, train_per_class: int, val_per_class: int, size: int = 72) -> dict:
    """``root/train`` and ``root/val`` from Fashion-MNIST's train and test splits, unless
    ``root/done.json`` says they were made with these settings."""
    from data.fashion_mnist import load_fashion_mnist

    settings = {"train_per_class": train_per_class, "val_per_class": val_per_class, "size": size}
    stamp = root / "done.json"
    if stamp.is_file() and json.loads(stamp.read_text()).get("settings") == settings:
        return json.loads(stamp.read_text())
    if root.exists() and any(root.iterdir()):
        raise SystemExit(f"error: {root} holds other files; pass --root <an empty or new folder>")
    start = time.perf_counter()
    splits = (("train", "train", train_per_class, 0), ("val", "test", val_per_class, 1))
    counts = {
        split: write_split(root / split, *load_fashion_mnist(source), per_class, size, seed)
        for split, source, per_class, seed in splits
    }
    record = {"settings": settings, "images": counts, "seconds": round(time.perf_counter() - start, 1)}
    stamp.write_text(json.dumps(record))
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/imagenet_proxy"), help="the JPEG folders (made once)")
    parser.add_argument("--train-per-class", type=int, default=1000)
    parser.add_argument("--val-per-class", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--regrid-images", type=int, default=2000, help="training images each re-gridding method reads")
    parser.add_argument("--out", type=Path, default=Path("results/imagenet_proxy"))
    args, demo_args = parser.parse_known_args(argv)  # the rest: the demo's (--no-grid, train.py overrides, ...)
    if args.regrid_images > 10 * args.train_per_class:
        parser.error(f"--regrid-images {args.regrid_images} exceeds the {10 * args.train_per_class} training images")
    start = time.perf_counter()
    made = make_proxy_folders(args.root, args.train_per_class, args.val_per_class)
    print(f"folders: {args.root} ({made['images']['train']} train, {made['images']['val']} val JPEGs)", flush=True)
    from resnet.cli.demo import main as demo

    demo([
        "--out", str(args.out), "--regrid-set", f"images={args.regrid_images}",
        "model=resnet18", "data=imagefolder", f"data.root={args.root.resolve()}", "data.num_classes=10",
        "data.image_size=64", "data.min_scale=0.35", f"epochs={args.epochs}", "batch_size=64", "optim.lr=0.1",
        "grid_bn=statistics",  # train.py's default; the demo's affine offsets cost 1.4 points here (3 seeds)
        *demo_args,
    ])  # fmt: skip
    print(f"imagenet_proxy wall time (folders included): {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
