"""Images/s per worker process: this package's ImageNet transforms vs torchvision's classic ones and vs raw decodes.

    python -m benchmarks.input_pipeline                   # 200 JPEGs 500x375 q90 -> 224 px
    python -m benchmarks.input_pipeline --grain 40        # ~110 kB files: ImageNet's mean file size
    python -m benchmarks.input_pipeline --photos          # real photographs (scikit-image's), ~50 kB at q90
    python -m benchmarks.input_pipeline --size 112 --width 1600 --height 1200
    python -m benchmarks.input_pipeline --quick           # a smoke run

Every contender turns the same files (generated and photo-like, ~63 kB at 500x375 q90 by
default, a third of them portrait; or, with ``--photos``, windows of scikit-image's six colour
photographs re-encoded at q90 with their longer side at ``--width``) into network input, in this
one process with one torch thread: what a DataLoader worker gets. Rows:

* ``decode torchvision`` / ``decode PIL``: read the file and decode it to RGB, nothing
  else (``read_file`` + ``decode_jpeg``; ``Image.open().convert("RGB")``, the classic
  loader's first step). A full decode is not the floor of a training crop: goal ours
  train >= 1.0x its rate (decoding only the crop's window, :mod:`data.roi`).
* ``classic train`` / ``classic val``: ``torchvision.datasets.ImageFolder`` + PIL
  ``RandomResizedCrop`` / ``RandomHorizontalFlip`` (``Resize`` / ``CenterCrop``) +
  ``ToTensor`` + ``Normalize``. Goal: ours train >= 2.5x classic train.
* ``tensor v2 train``: ``decode_image`` + ``transforms.v2`` ``RandomResizedCrop`` /
  ``RandomHorizontalFlip`` on the uint8 tensor, the obvious tensor pipeline.
* ``ours train`` / ``ours val``: :class:`data.ImageFolder` with ``RandomResizedCropFlip`` /
  ``ResizeCenterCrop``; they end at uint8, normalisation runs on the device.
* ``ours train, full decode``: the same, decoding whole files (``roi=False``): the same pixels,
  what the region decode saves.

Each repeat runs every contender over all files once, in rotating order; each ratio is
the median over repeats of the same-repeat ratio, by wall clock and by process CPU time
(steadier when other jobs share the cores). ``breakdown`` times the parts of ours train
per image (CPU time), which is what bounds the ratio to a full decode: the decode grows
with the file's bytes, the resize does not, so the ratio rises with ``--grain``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import PIL
import torch
import torchvision
import torchvision.transforms as T
import torchvision.transforms.v2 as T2
from PIL import Image
from torchvision.io import ImageReadMode, decode_jpeg, read_file

from benchmarks import save_result
from data.decode import DCT_REDUCTIONS, decode_resized_crop, decode_rgb, image_size
from data.imagefolder import ImageFolder
from data.roi import decode_region
from data.transforms import RandomResizedCropFlip, ResizeCenterCrop

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
CLOCKS = ("wall", "cpu")  # time.perf_counter, time.process_time
# (label, numerator, denominator, goal: the ratio must reach it, or None).
RATIOS = (
    ("ours train / classic train", "ours train", "classic train", 2.5),
    ("ours train / decode torchvision", "ours train", "decode torchvision", 1.0),
    ("region / full decode, ours train", "ours train", "ours train, full decode", None),
    ("ours train / tensor v2 train", "ours train", "tensor v2 train", None),
    ("ours val / classic val", "ours val", "classic val", None),
    ("decode PIL / decode torchvision", "decode PIL", "decode torchvision", None),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=200, help="generated JPEG files")
    parser.add_argument("--width", type=int, default=500, help="landscape width (px); a third are portrait")
    parser.add_argument("--height", type=int, default=375, help="landscape height (px)")
    parser.add_argument("--grain", type=int, default=12, help="noise amplitude: 12 -> ~63 kB files, 40 -> ~110 kB")
    parser.add_argument("--size", type=int, default=224, help="output side (px); val resizes to size / 0.875 first")
    parser.add_argument("--repeats", type=int, default=9, help="interleaved passes; ratios are their median")
    parser.add_argument("--photos", action="store_true", help="real photographs instead of generated files")
    parser.add_argument("--quick", action="store_true", help="smoke run: 16 images, 2 repeats")
    parser.add_argument("--out", type=Path, default=Path("results/bench_input_pipeline.json"), help="JSON result path")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.repeats = 16, 2
    return args


def write_jpegs(folder: Path, count: int, width: int, height: int, seed: int = 0, grain: int = 12) -> list[Path]:
    """Photo-like q90 JPEGs, a third of them portrait: smooth colour fields plus uniform
    grain of +-``grain`` levels. At 500x375, grain 12 gives ~63 kB files, 40 gives ~110 kB
    (ImageNet's mean file size: ~140 GB / 1.28 M images); decode time grows with the bytes."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        w, h = (width, height) if i % 3 else (height, width)
        field = Image.fromarray((rng.random((h // 16, w // 16, 3)) * 255).astype(np.uint8))
        pixels = np.asarray(field.resize((w, h), Image.Resampling.BICUBIC)).astype(np.int16)
        pixels = (pixels + rng.integers(-grain, grain, pixels.shape)).clip(0, 255).astype(np.uint8)
        paths.append(folder / f"{i}.JPEG")
        Image.fromarray(pixels).save(paths[-1], quality=90)
    return paths


PHOTOS = ("astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "motorcycle_left.png", "motorcycle_right.png")


def write_photos(folder: Path, count: int, longer_side: int, seed: int = 0) -> list[Path]:
    """``count`` q90 JPEGs cut from scikit-image's colour photographs (bundled with it, no download):
    a random window of 70-100% of each side, resized so that its longer side is ``longer_side``
    (ImageNet's photos are ~500x375). Real photographs spend their bytes, and so the decoder's
    time, differently from generated grain."""
    from importlib.resources import files

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    sources = [Image.open(files("skimage") / "data" / name).convert("RGB") for name in PHOTOS]
    paths = []
    for i in range(count):
        photo = sources[i % len(sources)]
        w, h = (round(side * rng.uniform(0.7, 1.0)) for side in photo.size)
        left, top = rng.integers(0, photo.width - w + 1), rng.integers(0, photo.height - h + 1)
        scale = longer_side / max(w, h)
        window = photo.crop((left, top, left + w, top + h))
        window = window.resize((round(w * scale), round(h * scale)), Image.Resampling.LANCZOS)
        paths.append(folder / f"{i}.JPEG")
        window.save(paths[-1], quality=90)
    return paths


def make_contenders(root: Path, paths: list[Path], size: int) -> dict[str, Callable[[], int]]:
    """name -> one pass over every file, returning how many images it produced."""
    classic_train = T.Compose(
        [T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]
    )
    classic_val = T.Compose([T.Resize(int(size / 0.875)), T.CenterCrop(size), T.ToTensor(), T.Normalize(MEAN, STD)])
    tensor_v2_train = T2.Compose([T2.RandomResizedCrop(size, antialias=True), T2.RandomHorizontalFlip()])
    datasets = {
        "classic train": torchvision.datasets.ImageFolder(str(root), classic_train),
        "tensor v2 train": ImageFolder(root, lambda data: tensor_v2_train(decode_rgb(data))),
        "ours train": ImageFolder(root, RandomResizedCropFlip(size)),
        "ours train, full decode": ImageFolder(root, RandomResizedCropFlip(size, roi=False)),
        "classic val": torchvision.datasets.ImageFolder(str(root), classic_val),
        "ours val": ImageFolder(root, ResizeCenterCrop(size)),
    }

    def decode_torchvision() -> int:
        for path in paths:
            decode_jpeg(read_file(str(path)), mode=ImageReadMode.RGB)
        return len(paths)

    def decode_pil() -> int:
        for path in paths:
            with Image.open(path) as image:
                image.convert("RGB")  # torchvision.datasets.folder.pil_loader
        return len(paths)

    def each(dataset) -> Callable[[], int]:
        def work() -> int:
            for i in range(len(dataset)):
                sample = dataset[i]
                if not isinstance(sample, tuple):  # a BadImage: the comparison would be meaningless
                    raise RuntimeError(f"could not read a generated image: {sample}")
            return len(dataset)

        return work

    return {"decode torchvision": decode_torchvision, "decode PIL": decode_pil} | {
        name: each(dataset) for name, dataset in datasets.items()
    }


def time_contenders(contenders: dict[str, Callable[[], int]], repeats: int) -> dict[str, dict[str, list[float]]]:
    """Images/s of each contender, one entry per repeat, by wall clock and by process CPU time."""
    for work in contenders.values():  # warm-up: page cache, allocator, lazy imports
        work()
    rates: dict[str, dict[str, list[float]]] = {clock: {name: [] for name in contenders} for clock in CLOCKS}
    names = list(contenders)
    for repeat in range(repeats):
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            wall, cpu = time.perf_counter(), time.process_time()
            n = contenders[name]()
            rates["wall"][name].append(n / (time.perf_counter() - wall))
            rates["cpu"][name].append(n / max(time.process_time() - cpu, 1e-9))
    return rates


def breakdown(paths: list[Path], size: int, repeats: int) -> dict[str, float]:
    """CPU microseconds per image of each step of ours train, on the same files and boxes."""
    blobs = [path.read_bytes() for path in paths]
    torch.manual_seed(0)
    transform = RandomResizedCropFlip(size)
    samples = [transform.sample(*reversed(image_size(b))) for b in blobs]  # (box, flip) per image
    # Each step discards its outputs as it goes, as the pipeline does: kept in a list, every
    # image would land in fresh pages and pay for page faults the pipeline does not.
    steps: dict[str, Callable[[int], object]] = {
        "read file": lambda i: paths[i].read_bytes(),
        "decode (full)": lambda i: decode_rgb(blobs[i]),
        "decode (the crop's window only)": lambda i: decode_region(blobs[i], samples[i][0]),
        "header + box and flip draw": lambda i: transform.sample(*reversed(image_size(blobs[i]))),
        "decode_resized_crop (+ crop, resize, flip)": lambda i: decode_resized_crop(
            blobs[i], None, samples[i][0], size, flip=samples[i][1]
        ),
        "whole transform": lambda i: transform(blobs[i]),
    }
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            cpu = time.process_time()
            for i in range(len(paths)):
                step(i)
            times[name].append(1e6 * (time.process_time() - cpu) / len(paths))
    parts = {f"{name} us": statistics.median(t) for name, t in times.items()}
    # By difference: timed after a decode, as in the pipeline, the decoded image still in cache.
    # Negative where reduced decodes save more than the resize costs.
    parts["crop, resize, flip (difference) us"] = (
        parts["decode_resized_crop (+ crop, resize, flip) us"] - parts["decode (full) us"]
    )
    reduced = sum(min(box[2], box[3]) >= min(DCT_REDUCTIONS) * size for box, _ in samples)  # decode_resized_crop's rule
    parts["reduced decode share"] = reduced / len(samples)
    return parts


def paired_ratio(rates: dict[str, list[float]], num: str, den: str) -> float:
    return statistics.median(a / b for a, b in zip(rates[num], rates[den]))


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(1)  # what a DataLoader worker gets
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.photos:
            paths = write_photos(root / "c", args.images, args.width)
        else:
            paths = write_jpegs(root / "c", args.images, args.width, args.height, grain=args.grain)
        kb = sum(p.stat().st_size for p in paths) / len(paths) / 1024
        what = "photographs" if args.photos else "generated"
        print(
            f"timing {args.images} {what} JPEGs {args.width}x{args.height} ({kb:.0f} kB) -> {args.size} px...",
            flush=True,
        )
        load_start = os.getloadavg()
        rates = time_contenders(make_contenders(root, paths, args.size), args.repeats)
        parts = breakdown(paths, args.size, max(args.repeats // 3, 1))
    result = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()} | {"mean_kB": kb},
        "env": {
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "pillow": PIL.__version__,
            "threads": torch.get_num_threads(),
            "cpu": platform.processor() or platform.machine(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "loadavg_start": load_start,  # other jobs on the machine make timings noisy
            "loadavg_end": os.getloadavg(),
        },
        "images_per_s": {clock: {n: statistics.median(r) for n, r in rates[clock].items()} for clock in CLOCKS},
        "rates": rates,
        "ratios": {
            clock: {label: paired_ratio(rates[clock], num, den) for label, num, den, _ in RATIOS} for clock in CLOCKS
        },
        "goals": {label: goal for label, _, _, goal in RATIOS if goal is not None},
        "breakdown": parts,
    }
    print_table(result)
    save_result(result, args.out)
    return result


def print_table(result: dict) -> None:
    config, env = result["config"], result["env"]
    print(
        f"\n{config['images']} {'photographs' if config.get('photos') else 'generated'} JPEGs "
        f"{config['width']}x{config['height']} q90 ({config['mean_kB']:.0f} kB) -> "
        f"{config['size']} px, 1 process, 1 thread, median of {config['repeats']} interleaved repeats, "
        f"load average {env['loadavg_start'][0]:.1f} -> {env['loadavg_end'][0]:.1f}\n"
    )
    print(f"{'images/s per process':<36}" + "".join(f"{clock:>10}" for clock in CLOCKS))
    for name in result["images_per_s"]["wall"]:
        print(f"{name:<36}" + "".join(f"{result['images_per_s'][clock][name]:>10.0f}" for clock in CLOCKS))
    print(f"\n{'ratio':<36}" + "".join(f"{clock:>10}" for clock in CLOCKS) + f"{'goal':>10}")
    for label, _, _, goal in RATIOS:
        cells = ""
        for clock in CLOCKS:
            ratio = result["ratios"][clock][label]
            cells += f"{ratio:.2f}{' !' if goal is not None and ratio < goal else '  '}".rjust(10)
        print(f"{label:<36}{cells}{'>= ' + str(goal) if goal else '':>10}")
    parts = result["breakdown"]
    print(f"\n{'ours train, per image':<46}{'cpu us':>10}")
    for name, value in parts.items():
        if name.endswith(" us"):
            print(f"{name[:-3]:<46}{value:>10.0f}")
    print(f"{'crops decoded at reduced scale':<46}{parts['reduced decode share']:>10.0%}\n")


if __name__ == "__main__":
    main()
