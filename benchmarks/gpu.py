"""The GPU benchmark: what a ResNet-50 run gets from one GPU, and what feeding it costs the CPU.

    python -m benchmarks.gpu                          # one CUDA device; results/bench_gpu.json
    python -m benchmarks.gpu --batch 128 --workers 8
    python -m benchmarks.gpu --device cpu --quick     # smoke run of every measurement (what the tests run)

Four measurements, each side by side in this one process, each repeat rotating the order:

* ``train``: ResNet-50 (``--arch``) training steps (forward, cross-entropy, backward, SGD with momentum), bf16
  autocast, channels_last, under ``symmetric``, ``asymmetric`` (TF 'SAME' stem) and ``asymmetric``
  frozen at the input size (every pad static), each eager and through ``torch.compile``.
  Images/s, and each scheme's ratio to symmetric (the padding's cost; goal <= 1.02x the time).
* ``loop``: the same symmetric eager steps through ``train.py``'s own epoch loop
  (:func:`resnet.engine.loop.train_one_epoch`: uint8 batches normalised on the device, the
  loss-finite check read every ``log_every`` steps, the EMA every 32 steps), against the bare
  step above: what the loop adds (goal: close to 1.0x the time). DDP needs two GPUs and is left out.
* ``loader``: training batches ready on the device, from generated ImageNet-sized JPEGs
  (500x375, ~110 kB) through a DataLoader with ``--workers`` processes: ``data.decode=cpu``
  (decode, crop, resize in the workers; the crop's window only, data/roi.py) against
  ``data.decode=gpu`` (workers send bytes; nvJPEG decodes the batch, data/gpu_decode.py).
  Images/s and the CPU cores busy (this process and its workers, CPU seconds / wall
  second), so CPU cores per 1,000 images/s: what sizes a node's CPUs.
* ``eval``: 1-crop against 10-crop evaluation (resize-256 batches cropped on the device, bf16),
  images/s of the model and the crops.

Every figure is a median over ``--repeats``; CUDA timings synchronise before reading the clock.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision

from benchmarks import save_result
from benchmarks.input_pipeline import write_jpegs
from data import Normalize
from resnet import build_model
from resnet.evaluation.tencrop import average_crops, centre_crop, ten_crop

SCHEMES = ("symmetric", "asymmetric", "asymmetric frozen")
GOAL = 1.02  # padding: largest acceptable time ratio to symmetric


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (the benchmark), or cpu for a smoke run")
    parser.add_argument("--arch", default="resnet50", help="model (resnet.list_archs())")
    parser.add_argument("--batch", type=int, default=256, help="training and evaluation batch")
    parser.add_argument("--size", type=int, default=224, help="training crop and evaluation crop (px)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats; figures are medians")
    parser.add_argument("--workers", type=int, default=min(len(os.sched_getaffinity(0)), 16),
                        help="loader worker processes")  # fmt: skip
    parser.add_argument("--images", type=int, default=2048, help="generated JPEGs for the loader measurement")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out (minutes of compiling)")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny batches and steps, no compile")
    parser.add_argument("--out", type=Path, default=Path("results/bench_gpu.json"), help="JSON result path")
    args = parser.parse_args(argv)
    if args.quick:
        args.arch, args.batch, args.size, args.steps, args.repeats, args.workers, args.images = (
            "resnet_tiny",
            4,
            16,
            1,
            1,
            1,
            16,
        )
        args.no_compile = True
    return args


def timed(fn: Callable[[], int], device: torch.device) -> tuple[float, float]:
    """(items/s, CPU cores busy) of one call: ``fn`` returns how many items it produced; busy =
    CPU seconds of this process and its workers over the wall seconds."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    cpu, wall = _cpu_seconds(), time.perf_counter()
    n = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    wall = time.perf_counter() - wall
    return n / wall, (_cpu_seconds() - cpu) / wall


def _cpu_seconds() -> float:
    """CPU seconds of this process and every process under it: live ones (the loader's persistent
    workers, read from /proc) and those already waited for (getrusage)."""
    own, done = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + done.ru_utime + done.ru_stime + _live_descendants_cpu_seconds()


def _live_descendants_cpu_seconds() -> float:
    """utime + stime of the running descendants of this process (Linux /proc; 0 elsewhere)."""
    stats: dict[int, tuple[int, float]] = {}  # pid -> (parent pid, CPU seconds)
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone since the listing
            continue
        stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    mine, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, (parent, _) in stats.items() if parent in frontier} - mine
        mine |= frontier
    return sum(stats[pid][1] for pid in mine)


def interleave(contenders: dict[str, Callable[[], int]], repeats: int, device) -> dict[str, list[tuple]]:
    for fn in contenders.values():  # warm-up: compilation, cuDNN autotuning, page cache
        fn()
    runs: dict[str, list[tuple]] = {name: [] for name in contenders}
    names = list(contenders)
    for repeat in range(repeats):
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            runs[name].append(timed(contenders[name], device))
    return runs


def median_rate(runs: list[tuple]) -> float:
    return statistics.median(rate for rate, _ in runs)


def train_contenders(args, device) -> dict[str, Callable[[], int]]:
    x = torch.randn(args.batch, 3, args.size, args.size, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch,), device=device)
    dtype = torch.bfloat16
    contenders = {}
    for scheme in SCHEMES:
        padding = scheme.split()[0]
        extra = {"input_size": args.size} if scheme.endswith("frozen") else {}
        torch.manual_seed(0)
        model = build_model(args.arch, padding=padding, **extra).to(device, memory_format=torch.channels_last)
        variants = {"eager": model} | ({} if args.no_compile else {"compiled": torch.compile(model)})
        for variant, net in variants.items():
            opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

            def step(net=net, opt=opt) -> int:
                for _ in range(args.steps):
                    opt.zero_grad(set_to_none=True)
                    with torch.autocast(device.type, dtype=dtype):
                        loss = F.cross_entropy(net(x), y)
                    loss.backward()
                    opt.step()
                return args.steps * args.batch

            contenders[f"{scheme} {variant}"] = step
    contenders["symmetric loop"] = loop_contender(args, device)
    return contenders


def loader_contenders(args, device, root: Path, stack: contextlib.ExitStack) -> dict[str, Callable[[], int]]:
    from data import build_loaders
    from resnet.config import data_config

    contenders = {}
    for decode in ("cpu", "gpu"):  # on a CPU smoke run, decode=gpu's batches decode on the CPU
        data = data_config("imagefolder", root=str(root), workers=args.workers, image_size=args.size, decode=decode)
        loaders = stack.enter_context(build_loaders(data, batch_size=args.batch))

        # At least 20 batches per worker, the pipeline's steady state rather than its filling
        # (workers x prefetch batches come at once): as many passes over the images as that takes.
        passes = -(-20 * args.workers // max(len(loaders.train), 1))

        def epoch(loaders=loaders, passes=passes) -> int:
            count = 0
            for n in range(passes):
                loaders.set_epoch(n)
                for batch in loaders.train:
                    images = batch.images.decode(device) if hasattr(batch.images, "decode") else batch.images.to(device)
                    count += images.shape[0]
            return count

        contenders[f"decode={decode}"] = epoch
    return contenders


def loop_contender(args, device) -> Callable[[], int]:
    """``args.steps`` steps of ``train.py``'s epoch loop (EMA every 32 steps, as ``tv_v2``)."""
    from timm.utils import ModelEmaV3

    from resnet.engine.loop import StepContext, train_one_epoch
    from resnet.runtime.device import Runtime
    from resnet.runtime.distributed import DistEnv

    runtime = Runtime(DistEnv(0, 1, 0, device), amp_dtype=torch.bfloat16, channels_last=True)
    torch.manual_seed(0)
    model = runtime.place(build_model(args.arch, padding="symmetric"))
    images = torch.randint(0, 256, (args.batch, 3, args.size, args.size), dtype=torch.uint8, device=device)
    batches = [(images, torch.randint(0, 1000, (args.batch,), device=device))] * args.steps
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    ctx = StepContext(
        runtime=runtime,
        normalize=Normalize(model.meta.preprocessing).to(device),
        loss_fn=torch.nn.CrossEntropyLoss(),
        ema=ModelEmaV3(model, decay=0.9999**32),
        ema_every=32,
        log_every=50,
        on_nonfinite="stop",
        progress=False,
    )
    epochs = iter(range(1_000_000))

    def run() -> int:
        step = train_one_epoch(model, batches, optimizer, scheduler, ctx, epoch=next(epochs), global_step=0)
        return step.images

    return run


def eval_contenders(args, device) -> dict[str, Callable[[], int]]:
    resize = int(args.size / 0.875)
    images = torch.randint(0, 256, (args.batch, 3, resize, resize), dtype=torch.uint8, device=device)
    torch.manual_seed(0)
    model = build_model(args.arch, padding="symmetric").to(device, memory_format=torch.channels_last).eval()
    normalize = Normalize(model.meta.preprocessing).to(device)  # uint8 -> float, as the eval loop does

    def run(crops: int) -> int:
        with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16):
            for _ in range(args.steps):
                views = centre_crop(images, args.size) if crops == 1 else ten_crop(images, args.size).flatten(0, 1)
                x = normalize(views).contiguous(memory_format=torch.channels_last)
                logits = model(x)
                if crops > 1:
                    logits = average_crops(logits.float(), crops)
        return args.steps * args.batch

    return {"1-crop": lambda: run(1), "10-crop": lambda: run(10)}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(
            "python -m benchmarks.gpu measures a CUDA device and this machine has none: run it on a GPU "
            "machine, or pass --device cpu --quick for a smoke run"
        )
    torch.backends.cudnn.benchmark = True  # as train.py runs (deterministic=false): cuDNN's fastest kernels
    result: dict = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "env": {
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "cpu_cores": len(os.sched_getaffinity(0)),
        },
        "goal_padding_time_ratio": GOAL,
    }
    print(f"train: {args.arch}, batch {args.batch} at {args.size} px, bf16, channels_last...", flush=True)
    train = interleave(train_contenders(args, device), args.repeats, device)
    rates = {name: median_rate(runs) for name, runs in train.items()}
    loop_rate = rates.pop("symmetric loop")
    result["loop"] = {"images_per_s": loop_rate, "time_ratio_to_bare_step": rates["symmetric eager"] / loop_rate}
    result["train_images_per_s"] = rates
    result["train_time_ratio_to_symmetric"] = {
        name: rates[f"symmetric {name.split()[-1]}"] / rate for name, rate in rates.items()
    }
    if not args.no_compile:
        result["compile_speedup"] = {s: rates[f"{s} compiled"] / rates[f"{s} eager"] for s in SCHEMES}

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        per_class = args.images // 2
        for split, count in (("train", per_class), ("val", 2)):
            for c in range(2):
                write_jpegs(root / split / f"class{c}", count, 500, 375, seed=c, grain=40)
        print(f"loader: {args.images} JPEGs (500x375, ~110 kB), {args.workers} workers...", flush=True)
        with contextlib.ExitStack() as stack:  # the loaders' workers stop with it
            loader = interleave(loader_contenders(args, device, root, stack), args.repeats, device)
    result["loader"] = {
        name: {
            "images_per_s": median_rate(runs),
            "cpu_cores_busy": statistics.median(busy for _, busy in runs),
            "cpu_cores_per_1000_images_per_s": statistics.median(1000 * busy / rate for rate, busy in runs),
        }
        for name, runs in loader.items()
    }

    print(f"eval: 1-crop vs 10-crop, batch {args.batch}...", flush=True)
    evals = interleave(eval_contenders(args, device), args.repeats, device)
    result["eval_images_per_s"] = {name: median_rate(runs) for name, runs in evals.items()}
    result["eval_10crop_cost"] = result["eval_images_per_s"]["1-crop"] / result["eval_images_per_s"]["10-crop"]
    print_table(result)
    save_result(result, args.out)
    return result


def print_table(result: dict) -> None:
    env = result["env"]
    print(f"\n{env['device']}, torch {env['torch']}, {env['cpu_cores']} CPU cores\n")
    print(f"{'train (images/s)':<32}{'rate':>10}{'time / symmetric':>18}")
    for name, rate in result["train_images_per_s"].items():
        print(f"{name:<32}{rate:>10.0f}{result['train_time_ratio_to_symmetric'][name]:>18.3f}")
    loop = result["loop"]
    print(
        f"{'symmetric, train.py loop':<32}{loop['images_per_s']:>10.0f}{'':>18}"
        f"   {loop['time_ratio_to_bare_step']:.3f}x the bare step's time"
    )
    print(f"\n{'loader':<32}{'images/s':>10}{'cores busy':>12}{'cores per 1k img/s':>20}")
    for name, row in result["loader"].items():
        print(f"{name:<32}{row['images_per_s']:>10.0f}{row['cpu_cores_busy']:>12.1f}"
              f"{row['cpu_cores_per_1000_images_per_s']:>20.2f}")  # fmt: skip
    print(f"\n{'eval (images/s)':<32}{'rate':>10}")
    for name, rate in result["eval_images_per_s"].items():
        print(f"{name:<32}{rate:>10.0f}")
    print(f"10-crop costs {result['eval_10crop_cost']:.1f}x the time of 1-crop\n")


if __name__ == "__main__":
    main()
