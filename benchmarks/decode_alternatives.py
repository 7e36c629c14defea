"""What the training crop's decode chose, and what it did not: the alternatives timed on the same crops.

    python -m benchmarks.decode_alternatives              # 200 generated 500x375 JPEGs (~111 kB)
    python -m benchmarks.decode_alternatives --photos     # scikit-image's photographs, re-encoded
    python -m benchmarks.decode_alternatives --quick      # a smoke run

One process, one thread, CPU microseconds per image (median of ``--repeats``), the same crop boxes
(torchvision's RandomResizedCrop distribution) for every contender:

* ``whole decode``: the file decoded whole (torchvision), the floor of a loader that does so;
* ``window decode``: only the crop's window (:mod:`data.roi`, the loader's choice): exact;
* ``window decode, fast``: the same with libjpeg-turbo's fast IDCT and plain upsampling, and how
  far its pixels are from the exact ones (not taken: it trades exactness for the time shown);
* on the crops at least twice the output side (``--half-size``, 160 px: where a 1/2 DCT-scaled
  decode keeps the resolution): PIL's 1/2 draft decode + resize against the window decode +
  resize (the loader's choice below 4x; goal: the window is the faster).

Also: where the crops end (their last row as a fraction of the image's height: the entropy decoding
above it is the work a window decode cannot skip) and their mean area.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from benchmarks import save_result
from benchmarks.input_pipeline import write_jpegs, write_photos
from data import roi
from data.decode import decode_rgb, image_size, open_header, pil_to_tensor, resize_rows
from data.transforms import RandomResizedCropFlip

FAST = "libjpeg_turbo_decoder:fast_idct=1 libjpeg_turbo_decoder:fancy_upsampling=0"
GOAL = ("PIL 1/2 draft / window decode (crops >= 2x)", ">= 1.0")  # the window decode is the faster


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=200, help="JPEG files")
    parser.add_argument("--grain", type=int, default=40, help="generated files' noise: 40 -> ~111 kB at 500x375")
    parser.add_argument("--photos", action="store_true", help="real photographs instead of generated files")
    parser.add_argument("--size", type=int, default=224, help="training crop side (px)")
    parser.add_argument("--half-size", type=int, default=160, help="output side for the 1/2-decode comparison")
    parser.add_argument("--repeats", type=int, default=5, help="passes; figures are their median")
    parser.add_argument("--quick", action="store_true", help="smoke run: 12 images, 1 repeat")
    parser.add_argument("--out", type=Path, default=Path("results/bench_decode_alternatives.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.repeats = 12, 1
    return args


def boxes(blobs: list[bytes], size: int, count: int, min_side: int = 0) -> list[tuple[bytes, tuple]]:
    """``count`` (file, crop box) pairs drawn as the training transform draws them (seeded), each
    box's shorter side at least ``min_side``."""
    sampler, pairs = RandomResizedCropFlip(size), []
    torch.manual_seed(0)
    for _ in range(100 * count):
        for blob in blobs:
            width, height = image_size(blob)
            box = sampler.sample(height, width)[0]
            if min(box[2], box[3]) >= min_side:
                pairs.append((blob, box))
            if len(pairs) == count:
                return pairs
    return pairs


def pil_half(blob: bytes, box: tuple, size: int) -> torch.Tensor:
    """PIL's 1/2 DCT-scaled decode of the file, then the box (mapped onto it) resized to ``size``."""
    top, left, height, width = box
    header = open_header(blob)
    full_width, full_height = header.size
    header.draft("RGB", (full_width // 2, full_height // 2))
    sx, sy = header.size[0] / full_width, header.size[1] / full_height
    region = (left * sx, top * sy, (left + width) * sx, (top + height) * sy)
    return pil_to_tensor(header.convert("RGB").resize((size, size), Image.Resampling.BILINEAR, box=region))


def cpu_us(step: Callable[[bytes, tuple], object], pairs: list, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        for blob, box in pairs:
            step(blob, box)
        times.append(1e6 * (time.process_time() - start) / len(pairs))
    return statistics.median(times)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(1)
    exact, fast = roi.make_decoder(), roi.make_decoder(FAST)
    if exact is None:
        raise SystemExit("nvidia-nvimgcodec-cu12 is not installed (no wheel for this platform): nothing to compare")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "c"
        paths = write_photos(folder, args.images, 500) if args.photos else write_jpegs(
            folder, args.images, 500, 375, grain=args.grain)  # fmt: skip
        blobs = [p.read_bytes() for p in paths]
    kb = sum(map(len, blobs)) / len(blobs) / 1024
    crops = boxes(blobs, args.size, len(blobs))
    big = boxes(blobs, args.half_size, len(blobs), min_side=2 * args.half_size)
    print(
        f"{len(blobs)} {'photographs' if args.photos else 'generated'} JPEGs ({kb:.0f} kB), "
        f"{len(crops)} crops at {args.size} px, {len(big)} crops >= 2x {args.half_size} px...",
        flush=True,
    )

    us = {
        "whole decode": cpu_us(lambda blob, box: decode_rgb(blob), crops, args.repeats),
        "window decode": cpu_us(lambda blob, box: roi.decode_region(blob, box, exact), crops, args.repeats),
        "window decode, fast": cpu_us(lambda blob, box: roi.decode_region(blob, box, fast), crops, args.repeats),
    }
    diffs = [(roi.decode_region(b, box, fast).int() - roi.decode_region(b, box, exact).int()).abs() for b, box in crops]
    result = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()} | {"mean_kB": kb},
        "us_per_image": us,
        "fast_pixels_off": {
            "max": max(int(d.max()) for d in diffs),
            "mean": float(np.mean([d.float().mean() for d in diffs])),
        },
        "crop_bottom_fraction_mean": float(np.mean([(box[0] + box[2]) / image_size(b)[1] for b, box in crops])),
        "crop_area_fraction_mean": float(np.mean([box[2] * box[3] / np.prod(image_size(b)) for b, box in crops])),
        "ratios": {
            "window / whole decode (time)": us["window decode"] / us["whole decode"],
            "fast / exact window decode (time)": us["window decode, fast"] / us["window decode"],
        },
        "goals": {GOAL[0]: GOAL[1]},
    }
    if big:
        half = args.half_size
        us["PIL 1/2 draft + resize (crops >= 2x)"] = cpu_us(lambda b, box: pil_half(b, box, half), big, args.repeats)
        us["window decode + resize (crops >= 2x)"] = cpu_us(
            lambda b, box: resize_rows(roi.decode_region(b, box, exact), half), big, args.repeats)  # fmt: skip
        pil, window = us["PIL 1/2 draft + resize (crops >= 2x)"], us["window decode + resize (crops >= 2x)"]
        result["ratios"][GOAL[0]] = pil / window
    else:
        result["ratios"][GOAL[0]] = float("nan")  # no crop that large in these files
    print_table(result)
    save_result(result, args.out)
    return result


def print_table(result: dict) -> None:
    print(f"\n{'cpu us per image':<44}{'us':>8}")
    for name, value in result["us_per_image"].items():
        print(f"{name:<44}{value:>8.0f}")
    off = result["fast_pixels_off"]
    print(f"\nfast window decode: pixels off by up to {off['max']} levels (mean {off['mean']:.2f})")
    print(
        f"crops end at {result['crop_bottom_fraction_mean']:.0%} of the image's height on average, "
        f"cover {result['crop_area_fraction_mean']:.0%} of its area"
    )
    for label, value in result["ratios"].items():
        print(f"{label:<44}{value:>8.2f}")
    print()


if __name__ == "__main__":
    main()
