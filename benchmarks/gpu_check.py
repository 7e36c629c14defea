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
import contextlib
import ctypes
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision

from benchmarks import interpreter

REPO = Path(__file__).resolve().parents[1]
STEPS = ("environment", "parity", "race", "train", "eval", "benchmark")
# The GPU path's crops against the CPU path's: pixel-exact when within these levels (what
# tests/data/test_gpu_decode.py asks of the same code on CPU tensors). Reported, not judged: nvJPEG
# is not libjpeg-turbo, so data.decode=gpu is not pixel-exact (docs/gpu.md, "Parity").
LIMITS = {"bilinear": 1, "bicubic": 2}
CODE_LIMIT = 1  # judged: our crop/resize/flip on the device against the same code on the CPU, same pixels in
DECODER_MEAN_LIMIT = 4.0  # judged: mean |nvJPEG - libjpeg-turbo| over whole images (a wrong colour space: tens)
CROP = 224  # parity crops: no DCT-reduced decode on the CPU path for 500x375 images at this size


@dataclass(frozen=True)
class Plan:
    """How big each step is, for a device and ``--quick``."""

    parity_images: int
    decode_seconds: float  # the decode's images/s loop
    race_arch: str
    race_batch: int
    race_size: int
    race_iterations: int
    probe_trials: int
    classes: int
    train_per_class: int
    val_per_class: int
    train_overrides: tuple[str, ...]
    eval_overrides: tuple[str, ...]
    bench_args: tuple[str, ...]
    train_timeout: float
    eval_timeout: float


def make_plan(device: str, quick: bool) -> Plan:
    if device == "cuda" and not quick:  # the check itself
        return Plan(
            parity_images=32, decode_seconds=3.0, race_arch="resnet50", race_batch=128, race_size=224,
            race_iterations=200, probe_trials=3, classes=4, train_per_class=96, val_per_class=16,
            train_overrides=("+experiment=tv_v1", "epochs=2", "batch_size=32", "device=cuda", "amp=bf16",
                             "channels_last=true", "compile=true", "data.decode=gpu", "log_every=4"),
            eval_overrides=("device=cuda", "amp=bf16"),
            bench_args=("--device", "cuda"), train_timeout=600, eval_timeout=240,
        )  # fmt: skip
    if device == "cuda":  # every step on the GPU, small and uncompiled: minutes
        return Plan(
            parity_images=8, decode_seconds=1.0, race_arch="resnet50", race_batch=32, race_size=224,
            race_iterations=20, probe_trials=2, classes=2, train_per_class=16, val_per_class=4,
            train_overrides=("+experiment=tv_v1", "model=resnet_tiny", "data.image_size=64", "epochs=1",
                             "batch_size=8", "device=cuda", "amp=bf16", "channels_last=true", "compile=false",
                             "data.decode=gpu"),
            eval_overrides=("device=cuda", "amp=bf16"),
            bench_args=("--device", "cuda", "--quick"), train_timeout=300, eval_timeout=180,
        )  # fmt: skip
    return Plan(  # the CPU smoke run: every step's code, tiny; its figures mean nothing
        parity_images=8, decode_seconds=0.2, race_arch="resnet_tiny", race_batch=4, race_size=32,
        race_iterations=2, probe_trials=0, classes=2, train_per_class=4, val_per_class=2,
        train_overrides=("+experiment=tv_v1", "model=resnet_tiny", "data.image_size=32", "epochs=1", "batch_size=4",
                         "data.workers=0", "device=cpu", "amp=bf16", "channels_last=true", "compile=false",
                         "data.decode=cpu"),
        eval_overrides=("device=cpu", "amp=bf16", "batch_size=4", "data.workers=0"),
        bench_args=("--device", "cpu", "--quick"), train_timeout=180, eval_timeout=120,
    )  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cuda: the check; cpu: a smoke run of every step (implies --quick)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="every step small (no compile): minutes on a GPU")
    parser.add_argument("--out", type=Path, default=None,
                        help="report folder (default: $OUT, else results/gpu_check/<date-time>)")  # fmt: skip
    parser.add_argument("--only", default=None,
                        help=f"comma-separated steps to run, of {', '.join(STEPS[1:])} (environment always runs)")
    parser.add_argument("--data-root", type=Path, default=None,
                        help="train and eval on this ImageNet-layout folder (train/<class>/*, val/<class>/*) "
                             "instead of generated JPEGs")  # fmt: skip
    parser.add_argument("--weights", default=None, help="eval these weights instead of the train step's last.pt")
    parser.add_argument("--bench-args", default="", help="more arguments for benchmarks.gpu, e.g. '--batch 128'")
    parser.add_argument("--keep-work", action="store_true",
                        help="keep the work folder (generated JPEGs, the training run and its checkpoint)")
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


# --- steps: each returns (figures, one-line summary) or raises ---------------------------------------


class StepFailed(Exception):
    """The step ran and a check failed (or it could not run): its figures are kept."""

    status = "fail"

    def __init__(self, message: str, figures: dict | None = None, summary: str = ""):
        super().__init__(message)
        self.figures, self.summary = figures or {}, summary


class Inconclusive(StepFailed):
    status = "inconclusive"


class Skipped(StepFailed):
    status = "skipped"


@dataclass
class StepResult:
    status: str = "pending"  # pending | running | ok | fail | inconclusive | skipped
    seconds: float | None = None
    summary: str = ""
    figures: dict = field(default_factory=dict)
    error: str | None = None
    log: str | None = None  # a file beside the report


class Check:
    """One run of the check: its options, plan, folders, results, and what steps hand on."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.plan = make_plan(args.device, args.quick)
        self.device = torch.device(args.device)
        self.out: Path = args.out
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="gpu_check-"))
        self.results = {name: StepResult() for name in args.steps}
        self.started = datetime.now().astimezone()
        self.clock = time.perf_counter()
        self.env: dict = {}
        self.checkpoint: str | None = args.weights
        self._root: Path | None = None
        self._parity: dict[str, tuple] = {}

    # --- shared inputs, made once ---

    def data_root(self) -> tuple[Path, int]:
        """The ImageNet-layout folder for train and eval, and its class count."""
        if self.args.data_root is not None:
            train = self.args.data_root / "train"
            classes = sorted(p for p in train.iterdir() if p.is_dir()) if train.is_dir() else []
            return self.args.data_root, max(len(classes), 1)  # a missing folder: train.py says so
        if self._root is None:
            from benchmarks.input_pipeline import write_jpegs

            root, plan = self.work / "data", self.plan
            for c in range(plan.classes):
                write_jpegs(root / "train" / f"class{c}", plan.train_per_class, 500, 375, seed=c, grain=40)
                write_jpegs(root / "val" / f"class{c}", plan.val_per_class, 500, 375, seed=1000 + c, grain=40)
            self._root = root
        return self._root, self.plan.classes

    def parity_batch(self, interpolation: str) -> tuple:
        """(files, EncodedBatch, the CPU path's images [N, 3, 224, 224], the GPU decode on an idle
        device) for ``interpolation``; the boxes and flips drawn from the same seeds on both paths."""
        if interpolation not in self._parity:
            from benchmarks.input_pipeline import write_jpegs
            from data.gpu_decode import EncodedCrop, EncodedRandomResizedCropFlip, collate_encoded
            from data.transforms import RandomResizedCropFlip

            folder = self.work / "parity"
            paths = sorted(folder.glob("*.JPEG")) or write_jpegs(folder, self.plan.parity_images, 500, 375, seed=7,
                                                                 grain=40)  # fmt: skip
            files = [path.read_bytes() for path in paths]
            encoded = EncodedRandomResizedCropFlip(CROP, interpolation=interpolation)
            cpu = RandomResizedCropFlip(CROP, interpolation=interpolation)
            items, expected = [], []
            with torch.random.fork_rng(devices=[]):
                for seed, data in enumerate(files):
                    torch.manual_seed(seed)
                    item = encoded(data)
                    torch.manual_seed(seed)
                    expected.append(cpu(data))
                    if not isinstance(item, EncodedCrop):
                        raise StepFailed("a generated baseline JPEG was not sent to nvJPEG (nvjpeg_reads)")
                    torch.manual_seed(seed)
                    if (item.box, item.flip) != cpu.sample(*reversed(item_size(data))):
                        raise StepFailed(f"image {seed}: the GPU path drew another box or flip than the CPU path")
                    items.append(item)
            batch = collate_encoded([(item, 0) for item in items]).images
            reference = batch.decode(self.device)
            synchronize(self.device)
            self._parity[interpolation] = (files, batch, torch.stack(expected), reference)
        return self._parity[interpolation]

    # --- running and reporting ---

    def run(self) -> int:
        self.write()
        for name in self.args.steps:
            result = self.results[name]
            if name != "environment" and self.results["environment"].status != "ok" and self.device.type == "cuda":
                result.status, result.error = "skipped", "no usable CUDA device (environment)"
                self.write()
                continue
            result.status = "running"
            self.write()
            print(f"\n[gpu-check] {name}...", flush=True)
            start = time.perf_counter()
            try:
                result.figures, result.summary = STEP_FUNCTIONS[name](self)
                result.status = "ok"
            except StepFailed as err:
                result.status, result.error = err.status, str(err)
                result.figures, result.summary = err.figures or result.figures, err.summary or result.summary
            except Exception as err:  # noqa: BLE001 - a step's crash is its failure, the next step runs
                traceback.print_exc()
                result.status, result.error = "fail", f"{type(err).__name__}: {err}"
            finally:
                result.seconds = time.perf_counter() - start
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
            print(f"[gpu-check] {name}: {result.status} ({result.seconds:.1f} s) {result.summary}"
                  + (f"\n[gpu-check]   {result.error}" if result.error else ""), flush=True)  # fmt: skip
            self.write()
        self.write(finished=True)
        print("\n" + (self.out / "summary.md").read_text(), flush=True)
        if self.args.keep_work:
            print(f"[gpu-check] work folder kept: {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)
        return 0 if self.ok else 1

    @property
    def ok(self) -> bool:
        return all(result.status == "ok" for result in self.results.values())

    def write(self, finished: bool = False) -> None:
        """report.json and summary.md as they stand (rewritten after every step)."""
        report = {
            "command": ["python", "-m", "benchmarks.gpu_check", *sys.argv[1:]],
            "device": self.args.device,
            "quick": self.args.quick,
            "started": self.started.isoformat(timespec="seconds"),
            "finished": datetime.now().astimezone().isoformat(timespec="seconds") if finished else None,
            "seconds": time.perf_counter() - self.clock,
            "ok": self.ok,
            "env": self.env,
            "plan": asdict(self.plan),
            "steps": {name: asdict(result) for name, result in self.results.items()},
        }
        _write_atomically(self.out / "report.json", json.dumps(report, indent=2, default=str) + "\n")
        _write_atomically(self.out / "summary.md", self.summary(report))

    def summary(self, report: dict) -> str:
        env = self.env
        where = env.get("device_name", self.args.device)
        versions = ", ".join(f"{k} {env[k]}" for k in ("torch", "torchvision", "cuda", "cudnn") if env.get(k))
        failed = [name for name, r in self.results.items() if r.status not in ("ok", "pending", "running")]
        state = ("in progress" if report["finished"] is None
                 else "every step ok" if self.ok else f"not ok: {', '.join(failed)}")  # fmt: skip
        lines = [
            f"# GPU check: {where}",
            "",
            f"{self.started:%Y-%m-%d %H:%M %Z}; {versions}; {env.get('cpu_cores', '?')} CPU cores. "
            f"`{' '.join(report['command'])}`{' (quick: small, uncompiled; figures are a smoke run)' if self.args.quick else ''}. "  # noqa: E501
            f"{report['seconds']:.0f} s, {state}.",
            "",
            "| step | status | key figures | seconds |",
            "|---|---|---|---|",
        ]
        for name, r in self.results.items():
            seconds = f"{r.seconds:.1f}" if r.seconds is not None else ""
            lines.append(f"| {name} | {r.status} | {_cell(r.summary)} | {seconds} |")
        problems = [(name, r) for name, r in self.results.items() if r.error]
        if problems:
            lines += ["", "## Not ok", ""]
            for name, r in problems:
                lines.append(f"- **{name}** ({r.status}): {r.error}")
        return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def item_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the JPEG header."""
    from data.decode import image_size

    return image_size(data)


# --- environment -----------------------------------------------------------------------------------


def step_environment(check: Check) -> tuple[dict, str]:
    import data.roi

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cpu_cores": len(os.sched_getaffinity(0)),
        "host": platform.node(),
        "git_commit": _command(["git", "rev-parse", "--short=12", "HEAD"]),
        "roi_decode": data.roi.available(),  # the CPU path decodes only the crop's window (nvImageCodec)
        "nvidia_smi": _command(["nvidia-smi", "-L"]),
        "driver": _command(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        "cuda_available": torch.cuda.is_available(),
    }
    check.env = env
    if check.device.type != "cuda":
        env["device_name"] = "cpu"
        return env, f"cpu (smoke run), torch {env['torch']}, {env['cpu_cores']} cores"
    if not torch.cuda.is_available():
        raise StepFailed(f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False; "
                         f"nvidia-smi: {env['nvidia_smi'] or 'not found'}): run on a GPU machine, or pass "
                         "--device cpu --quick for a smoke run", env, "no CUDA device")  # fmt: skip
    props = torch.cuda.get_device_properties(check.device)
    env.update(device_name=props.name, capability=f"{props.major}.{props.minor}",
               memory_gib=round(props.total_memory / 2**30, 1), multiprocessors=props.multi_processor_count,
               cuda_devices=torch.cuda.device_count())  # fmt: skip
    return env, (f"{props.name} ({env['memory_gib']} GiB, sm {env['capability']}), driver {env['driver']}, "
                 f"torch {env['torch']}, CUDA {env['cuda']}, {env['cpu_cores']} cores")  # fmt: skip


def _command(args: list[str]) -> str | None:
    """A command's output, stripped; None where it is missing or fails."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=30, cwd=REPO)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


# --- parity ----------------------------------------------------------------------------------------


def step_parity(check: Check) -> tuple[dict, str]:
    """GPU crops against the CPU path's, in three parts, each measured on its own:

    * the decoders: nvJPEG's whole images against libjpeg-turbo's. Their IDCT and chroma
      upsampling differ (by up to 37 levels at edges on an H100), so ``data.decode=gpu`` is not
      pixel-exact; what is judged is their mean, which a wrong colour space or a shifted plane
      would push to tens of levels;
    * our code on the device: :func:`crop_resize_flip` of the GPU's decoded images, against the
      same function on the CPU from the same pixels. This is what this project can get wrong on a
      GPU, and it must agree within :data:`CODE_LIMIT`;
    * the float resize against the CPU path's uint8 one, the same on every device: the GPU path's
      code on CPU tensors (``decode("cpu")``). For bicubic on grainy JPEGs the uint8 kernel rounds
      and clamps between its two passes where the first overshoots [0, 255], so there that part
      alone reaches ~5 levels at a few pixels in 100,000 (within 2 on smooth images,
      tests/data/test_gpu_decode.py).

    The whole difference from the CPU path is reported too, at every pixel where the third part
    is within :data:`LIMITS` (``pixel_exact``: within them there as well)."""
    from torchvision.io import ImageReadMode, decode_jpeg

    from data.gpu_decode import EncodedBatch, crop_resize_flip

    figures: dict = {"images": check.plan.parity_images, "crop": CROP, "jpegs": "500x375 q90 4:2:0, ~110 kB"}
    problems = []
    for interpolation, limit in LIMITS.items():
        files, batch, expected, decoded = check.parity_batch(interpolation)
        again = batch.decode(check.device)
        synchronize(check.device)
        same_code = batch.decode("cpu").int()  # libjpeg-turbo and the float resize: the GPU path's code
        decoded, expected = decoded.cpu().int(), expected.int()
        diff = (decoded - expected).abs()
        resize_part = (same_code - expected).abs()
        judged = resize_part <= limit
        worst = int(diff[judged].max()) if judged.any() else 0
        whole = batch.decode_whole(check.device)
        on_device = crop_resize_flip(whole, batch.boxes, batch.flips, batch.size, interpolation).cpu().int()
        on_cpu = crop_resize_flip([image.cpu() for image in whole], batch.boxes, batch.flips, batch.size,
                                  interpolation).int()  # fmt: skip
        decoders = torch.cat([(image.cpu().int() - decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                                                                mode=ImageReadMode.RGB).int()).abs().flatten()
                              for image, data in zip(whole, files)])  # fmt: skip
        figures[interpolation] = {
            "limit": limit,
            "max_abs_diff": worst,  # against the CPU path, at the pixels judged
            "pixel_exact": worst <= limit,
            "mean_abs_diff": float(diff.float().mean()),
            "max_abs_diff_all_pixels": int(diff.max()),
            "above_limit_fraction": float((diff > limit).float().mean()),
            "code_part_max_abs_diff": int((on_device - on_cpu).abs().max()),  # judged: <= CODE_LIMIT
            "decoder_mean_abs_diff": float(decoders.float().mean()),  # judged: <= DECODER_MEAN_LIMIT
            "decoder_max_abs_diff": int(decoders.max()),
            "device_part_max_abs_diff": int((decoded - same_code).abs().max()),  # decoders and code: 0 on the CPU
            "resize_part_max_abs_diff": int(resize_part.max()),  # float vs uint8 resize, any device
            "pixels_not_judged": int((~judged).sum()),
            "repeat_equal": bool(torch.equal(batch.decode(check.device), again)),
        }
        problems += parity_problems(interpolation, figures[interpolation])

    batch: EncodedBatch = check.parity_batch("bilinear")[1]
    with jpeg_engine_monitor(check.device) as engine:
        rate = _decode_rate(batch, check.device, check.plan.decode_seconds)
    figures["decode_images_per_s"] = rate
    figures["jpeg_engine_utilization_max_percent"] = engine.peak
    figures["nvjpeg"] = nvjpeg_version() if check.device.type == "cuda" else None
    summary = "; ".join(
        f"{i}: our code on the device {figures[i]['code_part_max_abs_diff']} (limit {CODE_LIMIT}), decoders mean "
        f"{figures[i]['decoder_mean_abs_diff']:.2f} (limit {DECODER_MEAN_LIMIT:g}) max "
        f"{figures[i]['decoder_max_abs_diff']}; against the CPU path max {figures[i]['max_abs_diff']}, "
        f"{'pixel-exact' if figures[i]['pixel_exact'] else 'not pixel-exact'} (within {figures[i]['limit']})"
        for i in LIMITS)
    summary += f"; {check.plan.parity_images} images; decode {rate:.0f} img/s"
    if check.device.type == "cuda":
        summary += f"; nvJPEG {figures['nvjpeg'] or '?'}; JPEG engine peak " + (
            "n/a" if engine.peak is None else f"{engine.peak}%")
    if problems:
        raise StepFailed("; ".join(problems), figures, summary)
    return figures, summary


def parity_problems(interpolation: str, found: dict) -> list[str]:
    """What of one interpolation's parity figures fails the step (:func:`step_parity` says why)."""
    problems = []
    if found["code_part_max_abs_diff"] > CODE_LIMIT:
        problems.append(f"{interpolation}: crop_resize_flip on the device differs from the same code on the "
                        f"CPU by {found['code_part_max_abs_diff']} levels (limit {CODE_LIMIT})")
    if found["decoder_mean_abs_diff"] > DECODER_MEAN_LIMIT:
        problems.append(f"{interpolation}: nvJPEG's images differ from libjpeg-turbo's by "
                        f"{found['decoder_mean_abs_diff']:.2f} levels on average (limit {DECODER_MEAN_LIMIT:g})")
    if not found["repeat_equal"]:
        problems.append(f"{interpolation}: two decodes of the same batch differ")
    return problems


def _decode_rate(batch, device: torch.device, seconds: float) -> float:
    """Images/s of ``batch.decode`` (decode, crop, resize, flip), synchronised, for about ``seconds``."""
    batch.decode(device)
    synchronize(device)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or count == 0:
        batch.decode(device)
        count += len(batch)
    synchronize(device)
    return count / (time.perf_counter() - start)


class jpeg_engine_monitor(contextlib.AbstractContextManager):  # noqa: N801 - used as a function
    """The highest JPEG-engine utilisation NVML reports while the block runs (``peak``, percent),
    polled every 20 ms; None where NVML (nvidia-ml-py) or the counter is missing, or on the CPU."""

    def __init__(self, device: torch.device):
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread = None
        if device.type != "cuda":
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = _nvml_handle(pynvml, device)
            self._read = lambda: pynvml.nvmlDeviceGetJpgUtilization(self._handle)[0]
            self._read()
        except Exception:  # noqa: BLE001 - no NVML, no counter: the figure is unknown
            return
        self.peak = 0
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(0.02):
            with contextlib.suppress(Exception):
                self.peak = max(self.peak, int(self._read()))

    def __enter__(self):
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread is not None:
            time.sleep(0.2)  # the counter is an average over a sampling period
            self._stop.set()
            self._thread.join()
        return False


def _nvml_handle(pynvml, device: torch.device):
    if pynvml.nvmlDeviceGetCount() == 1:
        return pynvml.nvmlDeviceGetHandleByIndex(0)
    props = torch.cuda.get_device_properties(device)
    bus = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
    return pynvml.nvmlDeviceGetHandleByPciBusId(bus.encode())


def nvjpeg_version() -> str | None:
    """The version of the libnvjpeg this process loaded (after a CUDA decode), via nvjpegGetProperty."""
    try:
        maps = Path("/proc/self/maps").read_text()
        path = next(line.split()[-1] for line in maps.splitlines() if "libnvjpeg" in line.split()[-1])
        lib = ctypes.CDLL(path)
        parts = []
        for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
            value = ctypes.c_int()
            if lib.nvjpegGetProperty(prop, ctypes.byref(value)) != 0:
                return None
            parts.append(str(value.value))
        return ".".join(parts)
    except Exception:  # noqa: BLE001 - not found, not loadable: unknown
        return None


# --- race ------------------------------------------------------------------------------------------


def step_race(check: Check) -> tuple[dict, str]:
    from resnet import build_model

    plan, device = check.plan, check.device
    files, batch, _, reference = check.parity_batch("bilinear")
    flags = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        torch.manual_seed(0)
        model = build_model(plan.race_arch, padding="symmetric").to(device, memory_format=torch.channels_last)
        x = torch.randn(plan.race_batch, 3, plan.race_size, plan.race_size, device=device)
        x = x.contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (plan.race_batch,), device=device)
        params = [p for p in model.parameters() if p.requires_grad]

        def step() -> None:  # queued; every reference to the activations is gone when it returns
            model.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            loss.backward()

        def gradients() -> torch.Tensor:
            return torch.cat([p.grad.flatten() for p in params])

        # The reference: the same step with the decode after a synchronisation, twice (cuDNN
        # deterministic: equal bit for bit, or the gradient comparison cannot be made here).
        refs = []
        for _ in range(2):
            step()
            synchronize(device)
            refs.append(gradients())
            batch.decode(device)
            synchronize(device)
        reproducible = bool(torch.equal(*refs))
        images_wrong = grads_wrong = nonfinite = 0
        for _ in range(plan.race_iterations):
            step()
            images = batch.decode(device)  # while the backward runs on the training stream
            synchronize(device)
            images_wrong += not torch.equal(images, reference)
            grads = gradients()
            nonfinite += not bool(torch.isfinite(grads).all())
            grads_wrong += reproducible and not torch.equal(grads, refs[0])
    finally:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = flags
    figures: dict = {
        "arch": plan.race_arch, "batch": plan.race_batch, "iterations": plan.race_iterations,
        "images_decoded": plan.race_iterations * len(batch), "decode_mismatches": images_wrong,
        "gradient_mismatches": grads_wrong if reproducible else None, "nonfinite_gradients": nonfinite,
        "gradients_reproducible": reproducible,
    }  # fmt: skip
    summary = (f"{plan.race_iterations} {plan.race_arch} steps x {len(batch)} images: {images_wrong} decodes, "
               + (f"{grads_wrong} gradients" if reproducible else "gradients not comparable (not reproducible)")
               + f" differ; {nonfinite} non-finite")  # fmt: skip
    problems = []
    if images_wrong or grads_wrong or nonfinite:
        problems.append(f"under a concurrent backward {images_wrong} decoded batches differ from the idle decode, "
                        f"{grads_wrong} gradients from the synchronised step's, {nonfinite} hold non-finite "
                        "values: the decode and the backward share memory (docs/gpu.md, item 2)")  # fmt: skip
    if device.type == "cuda":
        probe = race_probe(batch, files, device, plan.probe_trials)
        figures["probe"] = probe
        summary += (f"; probe: {probe['direct_corrupted']}/{probe['reductions']} reductions corrupted by the "
                    f"decode on the training stream (old code), {probe['fixed_corrupted']} by EncodedBatch.decode")
        if probe["fixed_corrupted"]:
            problems.append(f"the probe: EncodedBatch.decode corrupted {probe['fixed_corrupted']} of "
                            f"{probe['reductions']} reductions still queued on the training stream")  # fmt: skip
    else:
        figures["probe"] = None
        summary += "; probe: CUDA only"
    if problems:
        raise StepFailed("; ".join(problems), figures, summary)
    if device.type == "cuda" and not figures["probe"]["direct_corrupted"]:
        raise Inconclusive("the probe saw no corruption even through the unfixed call (decode_jpeg on the training "
                           "stream): on this GPU and torchvision it cannot see the race, so the passing "
                           "checks above prove little", figures, summary)  # fmt: skip
    return figures, summary


def race_probe(batch, files: list[bytes], device: torch.device, trials: int) -> dict:
    """torchvision #9606's pattern. Tensors the size of the decoded images, filled with 7s; a long
    kernel (``torch.cuda._sleep``) and then one sum per tensor queued on the training stream; the
    tensors freed (their blocks go back to the training stream's pool at once); a decode; a
    synchronisation; how many sums are not 7 x numel. ``direct``: ``decode_jpeg`` called with the
    training stream current (the code before the fix); ``fixed``: :meth:`EncodedBatch.decode`."""
    from torchvision.io import ImageReadMode, decode_jpeg

    views = [batch.data[a:b] for a, b in zip(batch.offsets, batch.offsets[1:])]
    shapes = [(3, height, width) for width, height in map(item_size, files)]
    # Sleep well past the decode: calibrate the sleep's cycles and time one decode.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    cycles_per_ms = 10_000_000 / max(start.elapsed_time(end), 1e-3)
    decode_jpeg(views, mode=ImageReadMode.RGB, device=device)
    torch.cuda.synchronize(device)
    t = time.perf_counter()
    decode_jpeg(views, mode=ImageReadMode.RGB, device=device)
    torch.cuda.synchronize(device)
    sleep_ms = max(200.0, 5000 * (time.perf_counter() - t))

    def corrupted(decode: Callable[[], object]) -> int:
        count = 0
        for _ in range(trials):
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
            tensors = [torch.full(shape, 7, dtype=torch.uint8, device=device) for shape in shapes]
            torch.cuda._sleep(int(cycles_per_ms * sleep_ms))
            sums = [tensor.sum(dtype=torch.int64) for tensor in tensors]
            expected = [7 * tensor.numel() for tensor in tensors]
            del tensors
            images = decode()
            torch.cuda.synchronize(device)
            count += sum(int(s) != e for s, e in zip(sums, expected))
            del images
        return count

    direct = corrupted(lambda: decode_jpeg(views, mode=ImageReadMode.RGB, device=device))
    fixed = corrupted(lambda: batch.decode(device))
    return {"trials": trials, "reductions": trials * len(views), "sleep_ms": round(sleep_ms, 1),
            "direct_corrupted": direct, "fixed_corrupted": fixed}  # fmt: skip


# --- train and eval --------------------------------------------------------------------------------


def step_train(check: Check) -> tuple[dict, str]:
    root, classes = check.data_root()
    run_dir = check.work / "train"
    overrides = [*check.plan.train_overrides, f"data.root={root}", f"data.num_classes={classes}",
                 f"hydra.run.dir={run_dir}"]  # fmt: skip
    log = run_logged(check, "train", ["train.py", *overrides], check.plan.train_timeout)
    results = json.loads((run_dir / "results.json").read_text())
    check.checkpoint = str(run_dir / "last.pt")
    figures = {key: results.get(key) for key in ("arch", "epochs", "global_batch", "amp", "top1_err", "top5_err",
                                                 "train_images_per_s", "val_images_per_s", "n_val_images",
                                                 "skipped_images", "wall_seconds")}  # fmt: skip
    figures["overrides"] = overrides
    figures["generated_data"] = check.args.data_root is None
    summary = (f"tv_v1 {figures['arch']}, {figures['epochs']} epochs: {_num(figures['train_images_per_s'])} img/s "
               f"(last epoch), top-1 err {_num(figures['top1_err'], '.1f')}%")  # fmt: skip
    return figures, summary + (" (chance: generated images)" if figures["generated_data"] else "") + (
        f"; log {log}")


def step_eval(check: Check) -> tuple[dict, str]:
    if check.checkpoint is None:
        raise Skipped("no checkpoint: the train step did not run or failed (--weights names one)")
    root, classes = check.data_root()
    run_dir = check.work / "eval"
    overrides = [f"weights={check.checkpoint}", f"data.root={root}", f"data.num_classes={classes}",
                 *check.plan.eval_overrides, f"results_file={run_dir / 'eval.jsonl'}", f"hydra.run.dir={run_dir}"]
    log = run_logged(check, "eval", ["eval.py", *overrides], check.plan.eval_timeout)
    row = json.loads((run_dir / "eval.jsonl").read_text().splitlines()[-1])
    rate = table_value((check.out / log).read_text(), "img/s")
    figures = {key: row.get(key) for key in ("arch", "top1_err", "top5_err", "n_images", "crops", "amp")}
    figures.update(images_per_s=rate, overrides=overrides)
    summary = (f"{figures['n_images']} images: top-1 err {_num(figures['top1_err'], '.1f')}%, {_num(rate)} img/s; "
               f"log {log}")  # fmt: skip
    return figures, summary


def _num(value, spec: str = ".0f") -> str:
    return "?" if value is None else format(value, spec)


ERROR_LINE = re.compile(r"^(\S+: )?error: |^[\w.]*(Error|Exception)\b")  # train.py's one line, a traceback's last


def run_logged(check: Check, name: str, command: list[str], timeout: float) -> str:
    """Run ``python <command>`` from the repository root in its own session, stdout and stderr to
    ``<out>/<name>.log``; its last lines printed. Past ``timeout`` the whole group is killed. Raises
    :class:`StepFailed` with the command's last error line unless it exits 0."""
    log = check.out / f"{name}.log"
    args = [interpreter(), "-u", *command]  # -u: the log has every line up to a crash
    with open(log, "w") as f:
        f.write("$ " + shlex.join(args) + "\n")
        f.flush()
        proc = subprocess.Popen(args, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # its loader workers too
            proc.wait()
    lines = log.read_text(errors="replace").splitlines()
    print("\n".join(lines[-12:]), flush=True)
    if rc != 0:
        errors = [line for line in lines if ERROR_LINE.match(line)] or [line for line in lines if line.strip()]
        reason = errors[-1].strip() if errors else "no output"
        what = f"timed out after {timeout:.0f} s" if rc is None else f"exited with status {rc}"
        raise StepFailed(f"{command[0]} {what}: {reason} (log {log.name})", summary=f"log {log.name}")
    return log.name


def table_value(text: str, column: str) -> float | None:
    """The value under ``column`` in the first row of the last table printed with ``|`` borders."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.lstrip().startswith("|")]  # fmt: skip
    for header, row in reversed(list(zip(rows, rows[1:]))):
        if column in header:
            try:
                return float(row[header.index(column)])
            except (ValueError, IndexError):
                return None
    return None


# --- benchmark -------------------------------------------------------------------------------------


def step_benchmark(check: Check) -> tuple[dict, str]:
    from benchmarks import gpu

    argv = [*check.plan.bench_args, *shlex.split(check.args.bench_args), "--out", str(check.out / "bench_gpu.json")]
    try:
        result = gpu.main(argv)
    except SystemExit as stop:
        raise StepFailed(f"benchmarks.gpu stopped: {stop.code}") from None
    figures = {key: result.get(key) for key in ("train_images_per_s", "train_time_ratio_to_symmetric",
                                                "compile_speedup", "loop", "loader", "eval_images_per_s",
                                                "eval_10crop_cost", "goal_padding_time_ratio")}  # fmt: skip
    figures["config"], figures["json"] = result["config"], "bench_gpu.json"
    rates, ratios = result["train_images_per_s"], result["train_time_ratio_to_symmetric"]
    variant = "compiled" if "symmetric compiled" in rates else "eager"
    loader = result["loader"]
    summary = (
        f"{result['config']['arch']} {variant}: symmetric {rates[f'symmetric {variant}']:.0f} img/s, time ratio "
        f"asymmetric {ratios[f'asymmetric {variant}']:.3f}, frozen {ratios[f'asymmetric frozen {variant}']:.3f} "
        f"(goal <= {result['goal_padding_time_ratio']}); train.py's loop "
        f"{result['loop']['time_ratio_to_bare_step']:.3f}x the bare step's time; loader "
        + ", ".join(f"{name} {row['images_per_s']:.0f} img/s at {row['cpu_cores_per_1000_images_per_s']:.2f} "
                    f"cores/1k" for name, row in loader.items())
        + f"; eval 1-crop {result['eval_images_per_s']['1-crop']:.0f}, 10-crop "
        f"{result['eval_images_per_s']['10-crop']:.0f} img/s"
    )  # fmt: skip
    return figures, summary


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
    return check.run()


if __name__ == "__main__":
    sys.exit(main())
