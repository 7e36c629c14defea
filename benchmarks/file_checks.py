"""What the two checks on an image file's bytes cost, and what the size limit saves (issue 55).

    python -m benchmarks.file_checks              # 200 ImageNet-sized JPEGs (~110 kB), a 1,000 MiB file
    python -m benchmarks.file_checks --photos     # real photographs (scikit-image's), ~50 kB
    python -m benchmarks.file_checks --quick      # a smoke run

**The end check** (:func:`data.decode.check_end`): a JPEG must have its end-of-image marker after
its header, so that one cut short is refused whatever the crop. :func:`data.decode.jpeg_frame`
walks the header on to the first scan and looks for the marker from the end. Measured two ways,
in one process on one thread (what a DataLoader worker gets), on the same files:

* per image, CPU µs: ``jpeg_frame`` as it is against the frame-only walk it replaced
  (:func:`frame_only`, the old code), their difference set against a whole training sample
  (``ImageFolder[i]``: read, header, crop draw, window decode, resize, flip). Goal: at most 1 %.
* side by side: training samples per second, checked against unchecked (``jpeg_frame`` swapped
  for :func:`frame_only` during the pass), interleaved repeats, the median of the paired ratios.
  The same figure with the noise of a loader pass: a few tenths of a percent at best.

**The size check** (``data.max_file_mb``) compares the size ``read_file`` already had from its
``fstat`` with the limit: no extra system call. Its per-image time is ``read_file``'s whole.

**Peak memory** of a loader worker over a folder holding one sparse file of ``--big-mb`` MiB
named like an image (``truncate -s 1000M``: no disk, no time to make), beside the JPEGs: the
training transform through a one-worker DataLoader, one epoch, in a fresh process per row; the
worker's peak RSS is ``getrusage(RUSAGE_CHILDREN).ru_maxrss`` once it has exited. Rows: no large
file; the large file under the former 1 GiB limit (read whole, then refused as not an image) and
under the default 64 MiB (refused from its size, unread); a file just under the default limit.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from benchmarks import interpreter, print_ratios, save_result
from benchmarks.input_pipeline import write_jpegs, write_photos
from data import decode
from data.files import MAX_FILE_BYTES, MiB, read_file
from data.imagefolder import ImageFolder
from data.transforms import RandomResizedCropFlip

END_CHECK_GOAL = 0.01  # the end check's share of a training sample's CPU time
OLD_LIMIT = 1 << 30  # the read limit before data.max_file_mb


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=200, help="JPEG files, 500x375 q90 (a third portrait)")
    parser.add_argument("--grain", type=int, default=40, help="noise amplitude: 40 -> ~110 kB files (ImageNet's mean)")
    parser.add_argument("--photos", action="store_true", help="real photographs instead of generated files")
    parser.add_argument("--repeats", type=int, default=9, help="interleaved passes; ratios are their median")
    parser.add_argument("--big-mb", type=int, default=1000, help="the sparse file of the memory rows, MiB")
    parser.add_argument("--quick", action="store_true", help="smoke run: 16 images, 2 repeats, a 100 MiB file")
    parser.add_argument("--out", type=Path, default=Path("results/bench_file_checks.json"), help="JSON result path")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # one memory row: the folder
    parser.add_argument("--limit", type=int, default=MAX_FILE_BYTES, help=argparse.SUPPRESS)  # its limit, bytes
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.repeats, args.big_mb = 16, 2, 100
    return args


def frame_only(data: bytes) -> tuple[int, int, int, int] | None:
    """:func:`data.decode.jpeg_frame` before the end check: the header walked up to the frame."""
    if data[:2] != b"\xff\xd8":
        return None
    pos, end = 2, len(data) - 10
    while pos < end and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
        elif marker in decode.STANDALONE_MARKERS:
            pos += 2
        elif marker in decode.SOF_MARKERS:
            height, width = struct.unpack_from(">HH", data, pos + 5)
            return (marker, width, height, data[pos + 9]) if height and width else None
        else:
            pos += 2 + struct.unpack_from(">H", data, pos + 2)[0]
    return None


@contextmanager
def unchecked():
    """Training samples without the end check: ``jpeg_frame`` is the frame-only walk meanwhile."""
    checked = decode.jpeg_frame
    decode.jpeg_frame = frame_only
    try:
        yield
    finally:
        decode.jpeg_frame = checked


def per_image_us(step, items: list, repeats: int) -> float:
    """Median over ``repeats`` of the CPU µs per item of ``step(item)``."""
    times = []
    for _ in range(repeats):
        cpu = time.process_time()
        for item in items:
            step(item)
        times.append(1e6 * (time.process_time() - cpu) / len(items))
    return statistics.median(times)


def check_costs(root: Path, paths: list[Path], repeats: int) -> dict:
    """The end check against a training sample: per image, and side by side."""
    blobs = [path.read_bytes() for path in paths]
    assert all(decode.jpeg_frame(b) == frame_only(b) for b in blobs)  # the same frames, whole files
    dataset = ImageFolder(root, RandomResizedCropFlip(224))
    indices = list(range(len(dataset)))
    passes = 20 * repeats  # the header steps take microseconds: many passes
    us = {
        "jpeg_frame, frame only (before)": per_image_us(frame_only, blobs, passes),
        "jpeg_frame, to the scan and the end marker (now)": per_image_us(decode.jpeg_frame, blobs, passes),
        "read_file (its fstat and size check included)": per_image_us(read_file, paths, repeats),
    }
    for _ in range(2):  # warm-up: page cache, allocator, the region decoder
        for i in indices:
            dataset[i, i]
    rates: dict[str, list[float]] = {"checked": [], "unchecked": []}
    for repeat in range(repeats):
        for name in ("checked", "unchecked") if repeat % 2 else ("unchecked", "checked"):
            with unchecked() if name == "unchecked" else _nothing():
                cpu = time.process_time()
                for i in indices:
                    dataset[i, i]  # seeded by i: the same crops in both
                rates[name].append(len(indices) / (time.process_time() - cpu))
    sample_us = 1e6 / statistics.median(rates["checked"])
    us["training sample, checked (read, header, crop, decode, resize)"] = sample_us
    end_check_us = us["jpeg_frame, to the scan and the end marker (now)"] - us["jpeg_frame, frame only (before)"]
    return {
        "us": us,
        "rates": rates,
        "ratios": {
            "end check / training sample": end_check_us / sample_us,
            "checked / unchecked training samples per s": statistics.median(
                a / b for a, b in zip(rates["checked"], rates["unchecked"])
            ),
        },
    }


@contextmanager
def _nothing():
    yield


def memory_row(folder: Path, limit: int) -> dict:
    """One memory row, in a fresh process: (worker's and main process's peak RSS, MiB; skipped)."""
    command = [interpreter(), "-m", "benchmarks.file_checks", "--child", str(folder), "--limit", str(limit)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[1])
    return json.loads(done.stdout.strip().splitlines()[-1])


def child(folder: Path, limit: int) -> None:
    """One epoch of a one-worker loader over ``folder``; prints the peaks as one JSON line."""
    from torch.utils.data import DataLoader

    from data.batch import collate

    torch.set_num_threads(1)
    dataset = ImageFolder(folder, RandomResizedCropFlip(224), max_file_bytes=limit)
    loader = DataLoader(dataset, batch_size=16, num_workers=1, collate_fn=collate)
    skipped = [path for batch in loader for path in batch.skipped_paths]
    del loader  # its worker exits and is waited for: its peak is in RUSAGE_CHILDREN
    kib = 1024 if sys.platform == "darwin" else 1  # ru_maxrss: bytes on macOS, KiB on Linux
    peak = {
        "worker_peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / kib / 1024,
        "main_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / kib / 1024,
        "skipped": skipped,
    }
    print(json.dumps(peak))


def sparse_file(path: Path, mib: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(mib * MiB)  # truncate -s: no block stored, reads as zeros
    return path


def memory_rows(root: Path, paths: list[Path], big_mb: int) -> dict[str, dict]:
    """Each row in a fresh process: the JPEGs alone, then beside one large file."""
    folder = root / "memory"
    (folder / "c").mkdir(parents=True)
    for path in paths:
        (folder / "c" / path.name).write_bytes(path.read_bytes())
    rows = {"no large file": memory_row(folder, MAX_FILE_BYTES)}
    big = sparse_file(folder / "c" / "zz_large.JPEG", big_mb)
    rows[f"a {big_mb} MiB file, limit 1,024 MiB (before)"] = memory_row(folder, OLD_LIMIT)
    rows[f"a {big_mb} MiB file, limit {MAX_FILE_BYTES // MiB} MiB (now)"] = memory_row(folder, MAX_FILE_BYTES)
    under = MAX_FILE_BYTES // MiB - 1
    big.unlink()
    sparse_file(folder / "c" / "zz_large.JPEG", under)
    rows[f"a {under} MiB file, limit {MAX_FILE_BYTES // MiB} MiB (read, not an image)"] = memory_row(
        folder, MAX_FILE_BYTES
    )
    return rows


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.child is not None:
        child(args.child, args.limit)
        return {}
    torch.set_num_threads(1)  # what a DataLoader worker gets
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.photos:
            paths = write_photos(root / "train" / "c", args.images, 500)
        else:
            paths = write_jpegs(root / "train" / "c", args.images, 500, 375, grain=args.grain)
        kb = sum(p.stat().st_size for p in paths) / len(paths) / 1000
        what = "photographs" if args.photos else "generated"
        print(f"timing {args.images} {what} JPEGs ({kb:.0f} kB)...", flush=True)
        load_start = os.getloadavg()
        costs = check_costs(root / "train", paths, args.repeats)
        print("peak memory of a loader worker, one process per row...", flush=True)
        memory = memory_rows(root, paths, args.big_mb)
    result = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "child"}
        | {"mean_kB": kb},
        "env": {
            "torch": torch.__version__,
            "cpu": platform.processor() or platform.machine(),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
        },
        "us_per_image": costs["us"],
        "rates": costs["rates"],
        "ratios": costs["ratios"],
        "goals": {"end check / training sample": f"<= {END_CHECK_GOAL}"},
        "memory": memory,
    }
    print_table(result)
    save_result(result, args.out)
    return result


def print_table(result: dict) -> None:
    env = result["env"]
    print(f"\nload average {env['loadavg_start'][0]:.1f} -> {env['loadavg_end'][0]:.1f}")
    print(f"\n{'per image, cpu us':<64}{'':>10}")
    for name, value in result["us_per_image"].items():
        print(f"{name:<64}{value:>10.2f}")
    print()
    print_ratios(result, 64, 4, 10)
    print(f"\n{'one loader worker, one epoch':<64}{'worker MiB':>12}{'main MiB':>10}  skipped")
    for name, row in result["memory"].items():
        skipped = "; ".join(Path(p.split(" (")[0]).name + " (" + p.split(" (", 1)[1][:48] for p in row["skipped"])
        print(f"{name:<64}{row['worker_peak_rss_mib']:>12.0f}{row['main_peak_rss_mib']:>10.0f}  {skipped or '-'}")
    print()


if __name__ == "__main__":
    main()
