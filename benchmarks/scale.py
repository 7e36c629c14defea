"""Costs against the number of images, ImageNet-shaped: does any grow faster than the data?

    python -m benchmarks.scale             # 10 k, 100 k and 1,281,167 train images in 1,000 classes; flat val 50 k
    python -m benchmarks.scale --quick     # smoke run: 500 and 1,000 images in 4 classes, flat val 100

The trees are hard links to a few tiny JPEGs (1.28 M links take seconds and no space), built
under --tmp and deleted after: ``train/<wnid>/``, a ``val/<wnid>/`` of one image a class (the
loaders need one), and a flat ``flatval/`` with its ``LOC_val_solution.csv``. Every directory is
dated an hour back, as a real dataset's are, so that its index may be cached (data.index_cache).
Each figure comes from a fresh process (a probe), so that no memory or index carries over;
``--quick`` runs the probes in this process, and its figures mean nothing.

* scan: listing ``train/`` with no cached index (the file system's own caches are warm: the tree
  was just written), then reusing the cached index; torchvision's ImageFolder beside (it always lists);
* index: memory the dataset's index holds after construction (tracemalloc);
* worker USS: a loader worker's private memory (Private_Clean + Private_Dirty of
  /proc/<pid>/smaps_rollup) after its first batch and after one epoch of index reads (each
  item looks its (path, label) up; no file read, no decode), --workers workers, shuffled;
* first batch: from the process's launch (Python start-up and imports included) to the first
  training batch of data.build_loaders (224 px crops, --batch images, --workers workers), with
  the index rebuilt, reused, and reused with the epoch resumed at 80 %; for the resume also the
  seconds from set_epoch to that batch; and ``python train.py``'s launch to its first training
  step, the index rebuilt (resnet_tiny, --train-batch images: on a CPU a big batch's step would
  dominate);
* flat val: resnet.evaluation's set-up of the flat val (listing, labels csv), then its first batch;
* shard conversion: images/s of data.shards.convert over the train tree (its listing excluded).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import torch

from benchmarks import save_result
from benchmarks.input_pipeline import write_jpegs

REPO_ROOT = Path(__file__).resolve().parents[1]
IMAGENET_TRAIN = 1_281_167
LINKS_PER_FILE = 30_000  # ext4 allows 65,000 hard links to one file
GOALS = {  # figure at the largest size -> goal
    "launch to first batch, index rebuilt s": "<= 60",
    "train.py: launch to first step s": "<= 60",
    "resume at 80%: set_epoch to first batch s": "<= 5",
    "flat val set-up s": "<= 10",
    "worker USS after an epoch MiB": "<= 48",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, IMAGENET_TRAIN])
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--val", type=int, default=50_000, help="images of the flat val")
    parser.add_argument("--workers", type=int, default=2, help="loader workers (the 2-core VM: 2)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument(
        "--train-batch",
        type=int,
        default=32,
        help="train.py's batch: small, so that a CPU's forward and backward do not hide the rest",
    )
    parser.add_argument(
        "--convert",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time the shard conversion (16 min at 1.28 M on the 2-core VM)",
    )
    parser.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()), help="where the trees are built")
    parser.add_argument("--quick", action="store_true", help="smoke run, in this process")
    parser.add_argument("--probe", help=argparse.SUPPRESS)  # internal: one measurement, as JSON
    parser.add_argument("--out", type=Path, default=Path("results/bench_scale.json"), help="JSON result path")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.classes, args.val, args.batch = [500, 1000], 4, 100, 16
    return args


# --- the trees ---------------------------------------------------------------------------


def build_tree(root: Path, images: int, classes: int, val: int) -> None:
    links = images + classes + val
    sources = write_jpegs(root / "sources", max(4, -(-links // LINKS_PER_FILE)), 64, 48, seed=0)
    rows = ["ImageId,PredictionString"]
    for c in range(classes):
        wnid = f"n{c:08d}"
        for split, count in (("train", images // classes + (c < images % classes)), ("val", 1)):
            folder = root / split / wnid
            folder.mkdir(parents=True)
            for i in range(count):
                os.link(sources[i % len(sources)], folder / f"{wnid}_{i}.JPEG")
    (root / "flatval").mkdir()
    for i in range(1, val + 1):
        os.link(sources[i % len(sources)], root / "flatval" / f"ILSVRC2012_val_{i:08d}.JPEG")
        rows.append(f"ILSVRC2012_val_{i:08d},n{i % classes:08d} 0 0 10 10")
    (root / "LOC_val_solution.csv").write_text("\n".join(rows) + "\n")
    hour_ago = time.time() - 3600
    for folder, _, _ in os.walk(root):
        os.utime(folder, (hour_ago, hour_ago))


# --- the probes: each returns a dict of figures ----------------------------------------


class IndexReads(torch.utils.data.Dataset):
    """What a loader worker does per image, less the read and the decode: look its entry up."""

    def __init__(self, samples):
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> int:
        path, label = self.samples[i]
        return len(path) + label


def private_mib(pid: int) -> float:
    """USS: the memory only this process maps (what it copied of its parent's, and its own)."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        kib = sum(int(line.split()[1]) for line in f if line.startswith(("Private_Clean:", "Private_Dirty:")))
    return kib / 1024


def dataset(root: Path, kind: str):
    if kind == "torchvision":
        import torchvision.datasets

        return torchvision.datasets.ImageFolder(str(root / "train"))
    from data.imagefolder import ImageFolder
    from data.index_cache import load_scan

    return ImageFolder(root / "train", None, scan=load_scan(root / "train", log=None))


def probe_scan(root: Path, kind: str, **_) -> dict:
    start = time.perf_counter()
    dataset(root, kind)
    seconds = time.perf_counter() - start
    tracemalloc.start()
    kept = dataset(root, kind)
    index_mib = tracemalloc.get_traced_memory()[0] / 2**20
    tracemalloc.stop()
    return {"seconds": seconds, "index MiB": index_mib, "images": len(kept)}


def probe_workers(root: Path, kind: str, workers: int, batch: int, **_) -> dict:
    reads = IndexReads(dataset(root, kind).samples)
    loader = torch.utils.data.DataLoader(
        reads,
        batch_size=batch,
        shuffle=True,
        num_workers=workers,
        persistent_workers=True,
        collate_fn=sum,
        generator=torch.Generator().manual_seed(0),
    )
    batches = iter(loader)
    next(batches)
    pids = [w.pid for w in batches._workers]
    first = max(private_mib(pid) for pid in pids)
    for _ in batches:
        pass
    last = max(private_mib(pid) for pid in pids)
    batches._shutdown_workers()  # now, not at torch's 5 s join timeout when collected
    return {"USS after first batch MiB": first, "USS after an epoch MiB": last}


def probe_first_batch(root: Path, launched: float, workers: int, batch: int, resume: float = 0.0, **_) -> dict:
    from data import build_loaders
    from resnet.config import data_config

    loaders = build_loaders(data_config("imagenet", root=str(root), workers=workers), batch_size=batch)
    start_step = int(resume * len(loaders.train))
    start = time.perf_counter()
    loaders.set_epoch(0, start_step)
    next(iter(loaders.train))
    figures = {
        "launch to first batch s": time.time() - launched,
        "set_epoch to first batch s": time.perf_counter() - start,
        "start step": start_step,
        "steps": len(loaders.train) + start_step,
    }
    loaders.close()
    return figures


def probe_flat_val(root: Path, launched: float, workers: int, batch: int, **_) -> dict:
    from data import ShardSampler, collate
    from data.dataloader import DataLoader
    from data.ilsvrc import open_flat_val
    from data.transforms import ResizeCenterCrop

    start = time.perf_counter()
    val = open_flat_val(str(root), root / "flatval", ResizeCenterCrop(224), str(root / "LOC_val_solution.csv"), None)
    setup = time.perf_counter() - start
    loader = DataLoader(val, batch_size=batch, sampler=ShardSampler(len(val)), num_workers=workers, collate_fn=collate)
    next(iter(loader))
    loader.close()
    return {"set-up s": setup, "launch to first batch s": time.time() - launched, "images": len(val)}


def probe_convert(root: Path, **_) -> dict:
    from data.imagefolder import find_classes, find_images
    from data.shards import convert, file_samples

    classes = find_classes(root / "train")
    samples = file_samples(root / "train", find_images(root / "train", classes))
    start = time.perf_counter()
    convert(samples, classes, root / "shards", "train", progress=False)
    seconds = time.perf_counter() - start
    shutil.rmtree(root / "shards")
    return {"images/s": len(samples) / seconds, "seconds": seconds}


def first_step(root: Path, classes: int, workers: int, batch: int) -> dict:
    """Seconds from launching ``python train.py`` (resnet_tiny at ``batch`` images: the pipeline's
    share, not a big model's step) to its progress line after the first training step; the run is
    then killed."""
    command = [
        sys.executable,
        "train.py",
        "model=resnet_tiny",
        "data=imagenet",
        f"data.root={root}",
        f"data.num_classes={classes}",
        f"data.workers={workers}",
        f"batch_size={batch}",
        "epochs=1",
        "max_steps_per_epoch=2",
        "log_every=1",
        "device=cpu",
        "logger=csv",
        f"hydra.run.dir={root / 'run'}",
    ]
    launched = time.time()
    with subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"RESNET_PROGRESS": "lines"},
    ) as run:
        lines = []
        for line in run.stdout:
            lines.append(line)
            if line.startswith("train ") and " 1/" in line:
                seconds = time.time() - launched
                run.kill()
                return {"launch to first step s": seconds}
    raise RuntimeError("train.py ended before its first step:\n" + "".join(lines[-20:]))


PROBES = {
    "scan": probe_scan,
    "workers": probe_workers,
    "first_batch": probe_first_batch,
    "flat_val": probe_flat_val,
    "convert": probe_convert,
}


def probe(args: argparse.Namespace, name: str, root: Path, **kwargs) -> dict:
    """One measurement: in a fresh process, or in this one for --quick."""
    kwargs |= {"workers": args.workers, "batch": args.batch}
    if args.quick:
        return PROBES[name](root, launched=time.time(), **kwargs)
    spec = json.dumps({"name": name, "root": str(root), "launched": time.time(), **kwargs})
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.scale", "--probe", spec], cwd=REPO_ROOT, capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(f"probe {name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def run_probe(spec: str) -> None:
    kwargs = json.loads(spec)
    name, root = kwargs.pop("name"), Path(kwargs.pop("root"))
    print(json.dumps(PROBES[name](root, **kwargs)), flush=True)


# --- one size, then the table ------------------------------------------------------------


def measure(args: argparse.Namespace, images: int) -> dict:
    from data.index_cache import cache_paths

    root = Path(tempfile.mkdtemp(prefix=f"scale-{images}-", dir=args.tmp))
    try:
        start = time.perf_counter()
        build_tree(root, images, args.classes, args.val)
        row = {"images": images, "build s": time.perf_counter() - start}
        print(f"{images:,} images: tree built in {row['build s']:.1f} s", flush=True)
        for index in cache_paths(root / "train") + cache_paths(root / "val"):
            index.unlink(missing_ok=True)
        row["first batch, index rebuilt"] = probe(args, "first_batch", root)
        for index in cache_paths(root / "train"):  # written by that probe
            index.unlink(missing_ok=True)
        row["scan cold"] = probe(args, "scan", root, kind="ours")
        row["scan cached"] = probe(args, "scan", root, kind="ours")
        row["first batch, index reused"] = probe(args, "first_batch", root)
        row["first batch, resumed at 80%"] = probe(args, "first_batch", root, resume=0.8)
        row["workers"] = probe(args, "workers", root, kind="ours")
        row["torchvision scan"] = probe(args, "scan", root, kind="torchvision")
        row["torchvision workers"] = probe(args, "workers", root, kind="torchvision")
        if not args.quick:  # a train.py start-up: seconds even at the smallest size
            for index in cache_paths(root / "train"):  # a first launch: the index is rebuilt
                index.unlink(missing_ok=True)
            row["train.py"] = first_step(root, args.classes, args.workers, args.train_batch)
        row["flat val"] = probe(args, "flat_val", root)
        if args.convert:
            row["convert"] = probe(args, "convert", root)
        print(json.dumps(row), flush=True)
        return row
    finally:
        shutil.rmtree(root, ignore_errors=True)


COLUMNS = {  # heading -> (row key, figure)
    "scan cold s": ("scan cold", "seconds"),
    "scan cached s": ("scan cached", "seconds"),
    "torchvision scan s": ("torchvision scan", "seconds"),
    "index MiB": ("scan cached", "index MiB"),
    "torchvision index MiB": ("torchvision scan", "index MiB"),
    "worker USS MiB (1st batch / epoch)": ("workers", None),
    "torchvision worker USS MiB": ("torchvision workers", None),
    "launch to 1st batch s (rebuilt / reused)": ("first batch, index rebuilt", None),
    "resume at 80%: launch / set_epoch to 1st batch s": ("first batch, resumed at 80%", None),
    "train.py, index rebuilt: launch to 1st step s": ("train.py", "launch to first step s"),
    "shard conversion img/s": ("convert", "images/s"),
}


def cell(row: dict, heading: str) -> str:
    key, figure = COLUMNS[heading]
    if key in ("workers", "torchvision workers"):
        return f"{row[key]['USS after first batch MiB']:.0f} / {row[key]['USS after an epoch MiB']:.0f}"
    if key == "first batch, index rebuilt":
        reused = row["first batch, index reused"]["launch to first batch s"]
        return f"{row[key]['launch to first batch s']:.1f} / {reused:.1f}"
    if key == "first batch, resumed at 80%":
        return f"{row[key]['launch to first batch s']:.1f} / {row[key]['set_epoch to first batch s']:.2f}"
    if key not in row:  # train.py under --quick, conversion under --no-convert
        return "-"
    value = row[key][figure]
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def table(rows: list[dict]) -> str:
    lines = ["| images | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    lines += [f"| {row['images']:,} | " + " | ".join(cell(row, h) for h in COLUMNS) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.probe:
        run_probe(args.probe)
        return {}
    rows = [measure(args, images) for images in args.sizes]
    last = rows[-1]
    figures = {
        "launch to first batch, index rebuilt s": last["first batch, index rebuilt"]["launch to first batch s"],
        "resume at 80%: set_epoch to first batch s": last["first batch, resumed at 80%"]["set_epoch to first batch s"],
        "flat val set-up s": last["flat val"]["set-up s"],
        "worker USS after an epoch MiB": last["workers"]["USS after an epoch MiB"],
    }
    if "train.py" in last:
        figures["train.py: launch to first step s"] = last["train.py"]["launch to first step s"]
    result = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "env": {"torch": torch.__version__, "cpus": os.cpu_count(), "loadavg": os.getloadavg()},
        "rows": rows,
        "figures": figures,
        "goals": {label: goal for label, goal in GOALS.items() if label in figures},
        "table": table(rows),
    }
    print("\n" + result["table"])
    print(
        f"\nflat val of {args.val:,}: set-up {last['flat val']['set-up s']:.2f} s, launch to first batch "
        f"{last['flat val']['launch to first batch s']:.1f} s"
    )
    for label, value in figures.items():
        print(f"{label:<48}{value:>10.2f}   goal {result['goals'][label]}")
    save_result(result, args.out)
    return result


if __name__ == "__main__":
    main()
