"""End to end on CPU: train.py and eval.py against plain torchvision-style loops, and DDP against one process.

    python -m benchmarks.end_to_end                    # resnet_small at 64 px
    python -m benchmarks.end_to_end --arch resnet18 --size 112 --steps 20
    python -m benchmarks.end_to_end --quick            # smoke run: train.py and its reference only

A generated ImageNet-like folder (``--classes`` x photo-like 500x375 q90 JPEGs, as
``benchmarks.input_pipeline`` writes them) and seven contenders, each a fresh process:

* ``train.py``: ``data=imagefolder``, ``--workers`` workers, ``max_steps_per_epoch``,
  ``logger=csv``; ``reference train``: ``benchmarks.baseline_loops`` (classic ImageFolder +
  PIL transforms + DataLoader + the same model, batch, channels_last and SGD).
* ``eval.py`` single crop and ``reference eval`` (Resize / CenterCrop / ToTensor /
  Normalize), both on the checkpoint of a first, untimed train.py run; ``eval.py``
  10-crop on the same weights.
* ``train.py threads shared``: ``train.py`` without ``OMP_NUM_THREADS``, so that it lowers
  its intra-op threads to the CPUs its loader workers leave (``resnet.runtime.workers.share_cpus``).
* ``train.py 2 processes``: ``torchrun --standalone --nproc_per_node=2`` (gloo), the same
  global batch, half the workers each, ``OMP_NUM_THREADS=1`` each, against ``train.py``
  alone with ``OMP_NUM_THREADS=--threads``.

Every figure is the contender's own loop rate (images / seconds from the first batch
requested to the last step; worker start-up included), as train.py (``results.json``)
and eval.py (its summary table) report it. Each repeat runs every contender once, in
rotating order; each ratio is the median over repeats of the same-repeat ratio. A shared
machine shows in ``others cpu``: the share of all cores that other processes used during
the run (multi-threaded steps stall at every barrier when a core is taken).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks import interpreter, save_result
from benchmarks.input_pipeline import write_jpegs

REPO_ROOT = Path(__file__).resolve().parents[1]  # train.py and eval.py live here
# (label, numerator, denominator, goal, "<=" or ">="): ratios of images/s. The 10-crop one
# reads as a ratio of costs: 1-crop rate / 10-crop rate = 10-crop s per image / 1-crop s per image.
RATIOS = (
    ("train.py / reference train", "train.py", "reference train", None, ""),
    ("eval.py / reference eval", "eval.py", "reference eval", None, ""),
    ("10-crop cost / 1-crop cost", "eval.py", "eval.py 10-crop", 10.5, "<="),
    ("2 processes / 1 process", "train.py 2 processes", "train.py", None, ""),
    ("threads shared / all threads", "train.py threads shared", "train.py", None, ""),
)


@dataclass
class Contender:
    name: str
    argv: list[str]
    env: dict[str, str | None]  # over this process's environment; None: unset
    read: Callable[[str, Path], dict]  # (stdout, run dir) -> {"images_per_s": ..., ...}
    hydra: bool = True  # train.py / eval.py: given hydra.run.dir=<run dir>


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="resnet_small", help="model config (configs/model/<arch>.yaml)")
    parser.add_argument("--size", type=int, default=64, help="network input side (px); eval resizes to size / 0.875")
    parser.add_argument("--batch", type=int, default=32, help="global images per step")
    parser.add_argument("--steps", type=int, default=30, help="training steps per run (max_steps_per_epoch)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers in all (split over DDP processes)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="OMP_NUM_THREADS of one-process runs")
    parser.add_argument("--classes", type=int, default=10, help="class folders")
    parser.add_argument("--val-images", type=int, default=100, help="val images per class")
    parser.add_argument("--eval-batch", type=int, default=250, help="network inputs per eval step (eval.py's default)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats; ratios are their median")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny folder, 32 px, 3 steps, 1 repeat")
    parser.add_argument("--out", type=Path, default=Path("results/bench_end_to_end.json"), help="JSON result path")
    args = parser.parse_args(argv)
    if args.quick:
        args.size, args.batch, args.steps, args.classes, args.val_images = 32, 8, 3, 2, 8
        args.eval_batch, args.repeats = 20, 1
    return args


def make_folder(root: Path, args: argparse.Namespace) -> None:
    """root/train and root/val, ``--classes`` class folders each; train holds steps x batch images."""
    train_per_class = -(-args.steps * args.batch // args.classes)  # ceil: one epoch covers every step
    for c in range(args.classes):
        write_jpegs(root / "train" / f"class{c}", train_per_class, 500, 375, seed=c)
        write_jpegs(root / "val" / f"class{c}", args.val_images, 500, 375, seed=1000 + c)


def read_results_json(stdout: str, run_dir: Path) -> dict:
    results = json.loads((run_dir / "results.json").read_text())
    return {"images_per_s": results["train_images_per_s"], "top1_err": results["top1_err"]}


def read_json_line(stdout: str, run_dir: Path) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def read_eval_table(stdout: str, run_dir: Path) -> dict:
    """eval.py's summary: the last box table printed, one header line and one row."""
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    header, row = ([cell.strip() for cell in line.strip("|").split("|")] for line in lines[-2:])
    cells = dict(zip(header, row))
    return {"images_per_s": float(cells["img/s"].replace(",", "")), "top1_err": float(cells["top1_err %"])}


def make_contenders(args: argparse.Namespace, root: Path, weights: Path) -> list[Contender]:
    python = interpreter()
    one_process = {"OMP_NUM_THREADS": str(args.threads)}
    data = [f"data.root={root}", f"data.num_classes={args.classes}", "device=cpu"]
    train = ["train.py", f"model={args.arch}", "data=imagefolder", f"data.image_size={args.size}", "epochs=1"]
    train += [f"max_steps_per_epoch={args.steps}", "logger=csv", *data]
    evaluate = ["eval.py", f"weights={weights}", "data=imagefolder", f"data.workers={args.workers}", *data]
    evaluate += [f"batch_size={args.eval_batch}", f"results_file={root.parent / 'eval.jsonl'}"]
    reference = [python, "-m", "benchmarks.baseline_loops", "--root", str(root), "--size", str(args.size)]
    reference += ["--workers", str(args.workers)]
    ddp_workers = max(args.workers // 2, 1)
    return [
        Contender(
            "train.py",
            [python, *train, f"batch_size={args.batch}", f"data.workers={args.workers}"],
            one_process,
            read_results_json,
        ),
        Contender(
            "reference train",
            [*reference, "train", "--arch", args.arch, "--batch", str(args.batch), "--steps", str(args.steps)]
            + ["--channels-last"],  # train.py's default (channels_last: true)
            one_process,
            read_json_line,
            hydra=False,
        ),
    ] + (
        []
        if args.quick
        else [  # a smoke run: the train pair only (eval and DDP: test_eval.py, test_train.py)
            Contender(  # no OMP_NUM_THREADS: train.py gives its loader workers their CPUs (runtime.workers.share_cpus)
                "train.py threads shared",
                [python, *train, f"batch_size={args.batch}", f"data.workers={args.workers}"],
                {"OMP_NUM_THREADS": None},  # unset
                read_results_json,
            ),
            Contender("eval.py", [python, *evaluate, "crops=1"], one_process, read_eval_table),
            Contender(
                "reference eval",
                [*reference, "eval", "--weights", str(weights), "--batch", str(args.eval_batch)],
                one_process,
                read_json_line,
                hydra=False,
            ),
            Contender("eval.py 10-crop", [python, *evaluate, "crops=10"], one_process, read_eval_table),
            Contender(
                "train.py 2 processes",
                [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *train]
                + [f"batch_size={args.batch // 2}", f"data.workers={ddp_workers}"],
                {"OMP_NUM_THREADS": "1"},
                read_results_json,
            ),
        ]
    )


def busy_cpu_seconds() -> float | None:
    """CPU seconds all processes of the machine have used since boot (Linux), else None."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(contender: Contender, run_dir: Path) -> dict:
    """Run one contender to completion; its figures, the process's wall and CPU seconds, others' load."""
    argv = contender.argv + ([f"hydra.run.dir={run_dir}"] if contender.hydra else [])
    env = {key: value for key, value in (os.environ | contender.env).items() if value is not None}
    busy, cpu, wall = busy_cpu_seconds(), children_cpu_seconds(), time.perf_counter()
    done = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - wall
    cpu = children_cpu_seconds() - cpu
    if done.returncode != 0:
        raise RuntimeError(f"{contender.name} failed ({' '.join(argv)}):\n{done.stderr[-3000:]}")
    figures = contender.read(done.stdout, run_dir)
    others = None if busy is None else max(busy_cpu_seconds() - busy - cpu, 0.0) / (wall * os.cpu_count())
    return figures | {"process_s": wall, "cpu_s": cpu, "others_cpu": others}


def paired_ratio(runs: dict[str, list[dict]], num: str, den: str) -> float:
    return statistics.median(a["images_per_s"] / b["images_per_s"] for a, b in zip(runs[num], runs[den]))


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "folder"
        print(f"writing {args.classes} classes of 500x375 JPEGs to {root}...", flush=True)
        make_folder(root, args)
        if args.quick:  # a smoke run: eval evaluates what the train.py contender, run first, saves
            contenders = make_contenders(args, root, Path(tmp) / "0-train.py" / "last.pt")
        else:
            contenders = make_contenders(args, root, Path(tmp) / "warmup" / "last.pt")
            print("untimed train.py run: page cache, and the checkpoint that eval evaluates...", flush=True)
            run(contenders[0], Path(tmp) / "warmup")
        runs: dict[str, list[dict]] = {c.name: [] for c in contenders}
        for repeat in range(args.repeats):
            for contender in contenders[repeat % len(contenders) :] + contenders[: repeat % len(contenders)]:
                print(f"repeat {repeat + 1}/{args.repeats}: {contender.name}", flush=True)
                runs[contender.name].append(run(contender, Path(tmp) / f"{repeat}-{contender.name.replace(' ', '_')}"))
    result = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "env": {
            "torch": torch.__version__,
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
        },
        "commands": {c.name: " ".join(c.argv) for c in contenders},
        "images_per_s": {name: statistics.median(r["images_per_s"] for r in rs) for name, rs in runs.items()},
        "runs": runs,
        "ratios": {label: paired_ratio(runs, n, d) for label, n, d, _, _ in RATIOS if n in runs and d in runs},
        "goals": {
            label: f"{sense} {goal}"
            for label, n, d, goal, sense in RATIOS
            if goal is not None and n in runs and d in runs
        },  # goals of the ratios measured
    }
    ddp = result["ratios"].get("2 processes / 1 process")
    result["ddp_overhead"] = None if ddp is None else 1 - ddp
    print_table(result)
    save_result(result, args.out)
    return result


def print_table(result: dict) -> None:
    config, env = result["config"], result["env"]
    print(
        f"\n{config['arch']} at {config['size']} px, batch {config['batch']}, {config['steps']} steps, "
        f"{config['workers']} workers, {config['classes']} classes of 500x375 q90 JPEGs; {env['cores']} cores, "
        f"median of {config['repeats']} interleaved repeats, "
        f"load average {env['loadavg_start'][0]:.1f} -> {env['loadavg_end'][0]:.1f}\n"
    )
    print(f"{'run':<24}{'loop img/s':>12}{'process s':>11}{'cpu s':>8}{'others cpu':>12}{'top-1 err':>11}")
    for name, runs in result["runs"].items():
        others = [r["others_cpu"] for r in runs if r["others_cpu"] is not None]
        print(
            f"{name:<24}{result['images_per_s'][name]:>12.0f}"
            f"{statistics.median(r['process_s'] for r in runs):>11.1f}"
            f"{statistics.median(r['cpu_s'] for r in runs):>8.1f}"
            f"{f'{statistics.median(others):.0%}' if others else '-':>12}"
            + (f"{statistics.median(r['top1_err'] for r in runs):>10.1f}%" if "top1_err" in runs[0] else f"{'-':>11}")
        )
    print(f"\n{'ratio (median of same-repeat ratios)':<40}{'value':>8}{'goal':>10}")
    for label, _, _, goal, sense in RATIOS:
        if label not in result["ratios"]:  # its contenders did not run (--quick)
            continue
        value = result["ratios"][label]
        met = goal is None or (value <= goal if sense == "<=" else value >= goal)
        cell = f"{value:.2f}{'  ' if met else ' !'}"
        print(f"{label:<40}{cell:>8}{f'{sense} {goal}' if goal else '':>10}")
    if result["ddp_overhead"] is not None:
        print(f"{'DDP overhead (1 - 2 processes / 1)':<40}{result['ddp_overhead']:>6.0%}")
    print()


if __name__ == "__main__":
    main()
