"""Every benchmark, one after the other, each in a fresh process; then every goal in one table.

    python -m benchmarks                       # input pipeline, end to end, model step, shards, ...
    python -m benchmarks --quick               # smoke run of each script, in this process
    python -m benchmarks --only input_pipeline,end_to_end
    python -m benchmarks --only shards       # shards vs image folders, loader images/s per worker
    python -m benchmarks --only checkpoint_save   # a ResNet-50 last.pt (optimizer, EMA): the GraceTime a stop needs
    python -m benchmarks --only scale        # costs against the number of images, up to ImageNet's 1.28 M

Each run prints its own table and writes ``<out-dir>/bench_<run>.json``; this runner adds
``<out-dir>/bench_summary.json``: every ratio that has a goal, with its value and whether
it is met. The input pipeline runs twice: on ~63 kB files (the default generator) and on
~110 kB ones (``--grain 40``, ImageNet's mean file size), since the decode's share of the
work, and so the ratio to a bare decode, grows with the bytes. Each script's ``--help``
says what its figures mean; how long each takes, and what it measured: docs/benchmarks.md.

``--quick`` is a smoke run (its figures mean nothing): each script runs in this process,
which spares a Python start-up per script; the processes end_to_end starts are still its own.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# run -> (script, its arguments, the arguments of its smoke run).
RUNS = {
    "input_pipeline": ("input_pipeline", [], ["--quick"]),
    "input_pipeline_110kB": ("input_pipeline", ["--grain", "40"], ["--quick", "--grain", "40"]),
    "input_pipeline_photos": ("input_pipeline", ["--photos"], ["--quick", "--photos"]),
    "end_to_end": ("end_to_end", [], ["--quick", "--threads", "1"]),
    "model_step": (
        "model_step",
        [],
        ["--arch", "resnet18", "--batch", "2", "--size", "64", "--warmup", "0", "--repeats", "1"],
    ),
    "shards": ("shards", [], ["--quick"]),
    "decode_alternatives": ("decode_alternatives", [], ["--quick"]),
    "scale": ("scale", [], ["--quick"]),
    "checkpoint_save": ("checkpoint_save", [], ["--quick"]),
    "file_checks": ("file_checks", [], ["--quick"]),
    "unreadable_check": ("unreadable_check", [], ["--quick"]),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="each script's smoke configuration")
    parser.add_argument("--only", default=",".join(RUNS), help=f"comma-separated subset of {', '.join(RUNS)}")
    parser.add_argument("--out-dir", type=Path, default=Path("results"), help="where the JSON files go")
    args = parser.parse_args(argv)
    args.only = args.only.split(",")
    args.out_dir = args.out_dir.resolve()  # the scripts run from the repository root
    unknown = sorted(set(args.only) - set(RUNS))
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    return args


def goals(script: str, result: dict) -> list[dict]:
    """The ratios of one script's JSON that have a goal: label, value, goal, met."""
    rows = []
    if script == "input_pipeline":
        for label, goal in result["goals"].items():
            value = result["ratios"]["cpu"][label]  # process CPU time: the steadier clock on a shared machine
            rows.append({"ratio": f"{label} (cpu)", "value": value, "goal": f">= {goal}", "met": value >= goal})
    elif script in ("end_to_end", "shards", "decode_alternatives", "file_checks", "unreadable_check"):
        for label, goal in result["goals"].items():
            sense, bound = goal.split()
            value = result["ratios"][label]
            met = value <= float(bound) if sense == "<=" else value >= float(bound)
            rows.append({"ratio": label, "value": value, "goal": goal, "met": met})
    elif script == "scale":  # figures at the largest size, each with an upper bound
        for label, goal in result["goals"].items():
            value = result["figures"][label]
            rows.append({"ratio": label, "value": value, "goal": goal, "met": value <= float(goal.split()[1])})
    elif script == "checkpoint_save":  # what a stop needs of its GraceTime, beside the step it finishes
        rows.append(
            {
                "ratio": f"{result['arch']} save s",
                "value": result["save_s"],
                "goal": "<= 20",
                "met": result["save_s"] <= 20,
            }
        )
        rows.append(
            {
                "ratio": f"share of the run saving every {result['checkpoint_minutes']:g} min",
                "value": result["save_share"],
                "goal": "<= 0.01",
                "met": result["save_share"] <= 0.01,
            }
        )
    elif script == "model_step":
        for mode, figures in result["modes"].items():
            for label, value in figures["ratios"].items():
                rows.append(
                    {
                        "ratio": f"{label} ({mode})",
                        "value": value,
                        "goal": f"<= {result['goal']}",
                        "met": value <= result["goal"],
                    }
                )
    return rows


def run_here(script: str, argv: list[str]) -> None:
    """``benchmarks.<script>.main(argv)`` in this process, leaving torch's thread count as it was."""
    import torch

    threads = torch.get_num_threads()
    try:
        importlib.import_module(f"benchmarks.{script}").main(argv)
    finally:
        torch.set_num_threads(threads)


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    summary = []
    for name in args.only:
        script, full, quick = RUNS[name]
        out = args.out_dir / f"bench_{name}.json"
        argv = [*(quick if args.quick else full), "--out", str(out)]
        print(f"\n=== python -m benchmarks.{script} {' '.join(argv)}", flush=True)
        if args.quick:
            run_here(script, argv)
        else:
            subprocess.run([sys.executable, "-m", f"benchmarks.{script}", *argv], cwd=REPO_ROOT, check=True)
        summary += [{"benchmark": name} | row for row in goals(script, json.loads(out.read_text()))]
    print(f"\n{'run':<22}{'ratio':<48}{'value':>8}{'goal':>10}")
    for row in summary:
        missed = "" if row["met"] else "  missed"
        print(f"{row['benchmark']:<22}{row['ratio']:<48}{row['value']:>8.3f}{row['goal']:>10}{missed}")
    (args.out_dir / "bench_summary.json").write_text(json.dumps(summary, indent=2))
    print(f"saved {args.out_dir / 'bench_summary.json'}")
    return summary


if __name__ == "__main__":
    main()
