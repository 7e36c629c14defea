"""The GPU check: everything this project claims about a GPU, run on one, in one command.

    bash scripts/gpu_check.sh                           # one CUDA device (its expected time: docs/benchmarks.md)
    python -m benchmarks.gpu_check --out DIR            # the same, with this interpreter
    python -m benchmarks.gpu_check --device cuda --quick    # every step, small: a first look at a GPU
    python -m benchmarks.gpu_check --device cpu --quick     # smoke run of every step (the tests run it)

Steps, in this order (the quick correctness checks first, the longest last: a run cut short, as
the device tool cuts a command at 10 minutes, still reports them), each timed, each one's failure
recorded without stopping the others:

* ``environment``: torch, torchvision, CUDA, cuDNN, the device, ``nvidia-smi -L``, CPU cores.
* ``parity``: generated ImageNet-sized JPEGs (500x375, q90, 4:2:0, ~110 kB) with crop boxes drawn
  from the same seeds, decoded by ``data.decode=gpu``'s path (:meth:`EncodedBatch.decode`:
  nvJPEG, crop, resize, flip) and by the CPU path (:class:`RandomResizedCropFlip`). Judged: our
  crop/resize/flip on the device within 1 level of the same code on the CPU from the same decoded
  pixels; nvJPEG's whole images within 4 levels of libjpeg-turbo's on average (they are not equal:
  ``data.decode=gpu`` is not pixel-exact, and the step reports by how much); two decodes of one
  batch equal bit for bit. Reported: the difference from the CPU path (``pixel_exact`` where it is
  within 1 level bilinear / 2 bicubic), the decode's images/s, the nvJPEG version and the busiest
  the GPU's JPEG engine got (0: nvJPEG decoded on the SMs).
* ``race``: docs/gpu.md's check of item 2. For 200 steps (20 with ``--quick``) a ResNet-50 forward and
  backward is queued on the training stream and the batch decoded while it runs: the images must
  equal the idle decode's and the gradients those of the same step with the decode after a
  synchronisation (cuDNN deterministic), bit for bit. Then torchvision #9606's probe: tensors of
  known content, a long kernel, one reduction per tensor, the tensors freed, a decode, the
  reductions checked. Called as the old code did (``decode_jpeg`` on the training stream) it must
  corrupt them, or the probe cannot see the race here and the step says so (``inconclusive``)
  instead of passing; through :meth:`EncodedBatch.decode` it must not. CUDA only; on the CPU the
  loop runs as a smoke test and the probe is left out.
* ``train``: ``train.py +experiment=tv_v1`` (ResNet-50, SGD, bf16) on generated JPEGs in an
  ImageNet layout, with ``channels_last=true compile=true data.decode=gpu``, 2 short epochs, in
  its own process under a timeout; top-1 error (chance: the images are noise) and images/s.
* ``eval``: ``eval.py`` on that run's ``last.pt`` and the same folder's val split.
* ``benchmark``: ``python -m benchmarks.gpu`` in this process (train images/s, bf16 and
  channels_last, eager and compiled, symmetric / asymmetric / frozen pads; loader images/s and
  CPU cores per 1,000 images/s with CPU and GPU decode; 1-crop against 10-crop evaluation).

Writes ``DIR/report.json`` (every figure) and ``DIR/summary.md`` (one row a step: status, key
figures, seconds) after every step, ``bench_gpu.json``, ``train.log`` and ``eval.log`` beside
them, and prints the summary. DIR: ``--out``, else ``$OUT`` (where the device tool collects
files), else ``results/gpu_check/<date-time>``. Exits 1 when any step is not ``ok``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
import traceback
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import torch

from benchmarks.gpu_check.benchmark import step_benchmark
from benchmarks.gpu_check.check import REPO, Check, StepFailed
from benchmarks.gpu_check.environment import step_environment
from benchmarks.gpu_check.eval import step_eval
from benchmarks.gpu_check.parity import step_parity
from benchmarks.gpu_check.race import step_race
from benchmarks.gpu_check.train import step_train

STEPS = ("environment", "parity", "race", "train", "eval", "benchmark")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gpu_check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cuda: the check; cpu: a smoke run of every step (implies --quick)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="every step small (no compile): minutes on a GPU")
    parser.add_argument("--out", type=Path, default=None,
                        help="report folder (default: $OUT, else results/gpu_check/<date-time>)")  # fmt: skip
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated steps to run, of {', '.join(STEPS[1:])} (environment always runs)",
    )
    parser.add_argument("--data-root", type=Path, default=None,
                        help="train and eval on this ImageNet-layout folder (train/<class>/*, val/<class>/*) "
                             "instead of generated JPEGs")  # fmt: skip
    parser.add_argument("--weights", default=None, help="eval these weights instead of the train step's last.pt")
    parser.add_argument("--bench-args", default="", help="more arguments for benchmarks.gpu, e.g. '--batch 128'")
    parser.add_argument(
        "--keep-work",
        action="store_true",
        help="keep the work folder (generated JPEGs, the training run and its checkpoint)",
    )
    args = parser.parse_args(argv)
    if args.device == "cpu":
        args.quick = True
    args.steps = list(STEPS) if args.only is None else ["environment", *args.only.split(",")]
    unknown = sorted(set(args.steps) - set(STEPS))
    if unknown:
        parser.error(f"unknown step {', '.join(unknown)}; choose from {', '.join(STEPS[1:])}")
    args.steps = [step for step in STEPS if step in args.steps]
    if args.out is None:
        args.out = Path(os.environ["OUT"]) if os.environ.get("OUT") else (
            REPO / "results" / "gpu_check" / datetime.now().strftime("%Y%m%d-%H%M%S"))  # fmt: skip
    return args


def run(check: Check) -> int:
    """Every step of ``check`` in order, each timed, a failure recorded without stopping the next;
    report.json and summary.md rewritten around each. 0 when every step is ok, else 1."""
    check.write()
    for name in check.args.steps:
        result = check.results[name]
        if name != "environment" and check.results["environment"].status != "ok" and check.device.type == "cuda":
            result.status, result.error = "skipped", "no usable CUDA device (environment)"
            check.write()
            continue
        result.status = "running"
        check.write()
        print(f"\n[gpu-check] {name}...", flush=True)
        start = time.perf_counter()
        try:
            result.figures, result.summary = STEP_FUNCTIONS[name](check)
            result.status = "ok"
        except StepFailed as err:
            result.status, result.error = err.status, str(err)
            result.figures, result.summary = err.figures or result.figures, err.summary or result.summary
        except Exception as err:  # noqa: BLE001 - a step's crash is its failure, the next step runs
            traceback.print_exc()
            result.status, result.error = "fail", f"{type(err).__name__}: {err}"
        finally:
            result.seconds = time.perf_counter() - start
            if check.device.type == "cuda":
                torch.cuda.empty_cache()
        print(f"[gpu-check] {name}: {result.status} ({result.seconds:.1f} s) {result.summary}"
              + (f"\n[gpu-check]   {result.error}" if result.error else ""), flush=True)  # fmt: skip
        check.write()
    check.write(finished=True)
    print("\n" + (check.out / "summary.md").read_text(), flush=True)
    if check.args.keep_work:
        print(f"[gpu-check] work folder kept: {check.work}")
    else:
        shutil.rmtree(check.work, ignore_errors=True)
    return 0 if check.ok else 1


# each returns (figures, one-line summary) or raises (StepFailed: the step's figures are kept)
STEP_FUNCTIONS: dict[str, Callable[[Check], tuple[dict, str]]] = {
    "environment": step_environment,
    "parity": step_parity,
    "race": step_race,
    "train": step_train,
    "eval": step_eval,
    "benchmark": step_benchmark,
}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check = Check(args)
    print(f"[gpu-check] {args.device}{' --quick' if args.quick else ''}: {', '.join(args.steps)}; "
          f"report in {args.out}", flush=True)  # fmt: skip
    return run(check)
