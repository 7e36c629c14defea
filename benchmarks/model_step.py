"""What does choosing the padding cost? ResNet-50 train steps and inference on CPU.

    python -m benchmarks.model_step                      # batch 8 at 224
    python -m benchmarks.model_step --batch 32 --threads 16 --out results/bench_16c.json

Seven ResNet-50s with identical weights, channels_last, measured side by side in
one process: torchvision's; ours under ``symmetric`` and ``asymmetric`` (TF 'SAME'
stem, docs/padding.md), the latter also frozen at the input size (every pad static, as
exported); timm's, and timm's with its stem conv and pool swapped for its
TF-'SAME' layers (``Conv2dSame``, ``MaxPool2dSame``); and ours grid-robust (:mod:`resnet.grid`),
switching between ``symmetric`` and ``asymmetric`` every step. Each repeat times every model
in turn (rotating the order, so drift and thermal effects spread evenly), and each
ratio is the median over repeats of the same-repeat ratio. Goal: every ratio <= 1.02.

A train step is forward + cross-entropy + backward + SGD (momentum) step. On a
shared machine, ``--threads 1`` and the ``cpu`` columns (process CPU time) are far
steadier than wall time: other jobs stall multi-threaded steps at every barrier.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from benchmarks import save_result
from resnet import build_model
from resnet.grid import make_grid, set_grid

GOAL = 1.02  # largest acceptable time ratio
CLOCKS = ("wall", "cpu")  # time.perf_counter, time.process_time
# (name, numerator, denominator) of each reported ratio.
RATIOS = (
    ("ours / torchvision", "ours_symmetric", "torchvision"),
    ("ours asymmetric / symmetric", "ours_asymmetric", "ours_symmetric"),
    ("ours asym. frozen / symmetric", "ours_asymmetric_frozen", "ours_symmetric"),
    ("timm same / symmetric", "timm_same", "timm_symmetric"),
    ("ours grid / symmetric", "ours_grid", "ours_symmetric"),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="resnet50", choices=["resnet18", "resnet50"],
                        help="the model of every contender (resnet18: a smoke run)")  # fmt: skip
    parser.add_argument("--batch", type=int, default=8, help="images per step")
    parser.add_argument("--size", type=int, default=224, help="input height and width (px)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per model and mode")
    parser.add_argument("--iters", type=int, default=1, help="timed steps per model per repeat")
    parser.add_argument("--repeats", type=int, default=10, help="interleaved repeats; ratios are their median")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--modes", default="train,infer", help="comma-separated: train, infer")
    parser.add_argument("--out", type=Path, default=Path("results/bench_model_step.json"), help="JSON result path")
    return parser.parse_args(argv)


def timm_same_stem(model: nn.Module) -> nn.Module:
    """timm's ResNet-50 with a TF-'SAME' stem (the timm way of our ``asymmetric``)."""
    from timm.layers import create_conv2d, create_pool2d

    conv = create_conv2d(3, 64, 7, stride=2, padding="same", bias=False)  # -> timm Conv2dSame
    conv.weight = model.conv1.weight
    model.conv1 = conv
    model.maxpool = create_pool2d("max", 3, stride=2, padding="same")  # -> timm MaxPool2dSame, -inf pad
    return model


def make_models(size: int, arch: str = "resnet50") -> dict[str, nn.Module]:
    import timm  # here, not at the top: importing it costs 1.7 s of CPU (pytest collects this file)

    reference = getattr(torchvision.models, arch)()
    models = {
        "torchvision": reference,
        "ours_symmetric": build_model(arch, padding="symmetric"),
        "ours_asymmetric": build_model(arch, padding="asymmetric"),
        # every pad precomputed for this size (resnet.padding.freeze_padding), as exported
        "ours_asymmetric_frozen": build_model(arch, padding="asymmetric", input_size=size),
        "timm_symmetric": timm.create_model(arch),
        "timm_same": timm_same_stem(timm.create_model(arch)),
        # grid-robust (resnet.grid): switchable between symmetric and asymmetric, alternating every step
        "ours_grid": make_grid(build_model(arch, padding="symmetric"), ["symmetric", "asymmetric"]),
    }
    state = reference.state_dict()  # all five share torchvision's key names
    for model in models.values():
        model.load_state_dict(state)
    return {name: model.to(memory_format=torch.channels_last) for name, model in models.items()}


def check_equal(models: dict[str, nn.Module], x: torch.Tensor) -> None:
    """Same weights, same grid -> same logits: the benchmark compares like with like."""
    with torch.inference_mode():
        logits = {name: model.eval()(x) for name, model in models.items()}
    pairs = [("ours_symmetric", "torchvision"), ("timm_symmetric", "torchvision"), ("ours_grid", "torchvision")]
    pairs += [("ours_asymmetric", "timm_same"), ("ours_asymmetric_frozen", "timm_same")]
    for a, b in pairs:
        if not torch.allclose(logits[a], logits[b], atol=1e-3, rtol=1e-3):
            raise RuntimeError(f"{a} and {b} disagree; the comparison would be meaningless")


def make_steps(models: dict[str, nn.Module], x: torch.Tensor, y: torch.Tensor, mode: str) -> dict[str, Callable]:
    def train_step(model: nn.Module, opt: torch.optim.Optimizer) -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    def infer_step(model: nn.Module) -> None:
        with torch.inference_mode():
            model(x)

    def switching(model: nn.Module, step: Callable[[], None]) -> Callable[[], None]:
        calls = iter(range(10**9))
        return lambda: (set_grid(model, next(calls) % len(model.grid)), step())[1]

    steps = {}
    for name, model in models.items():
        if mode == "train":
            opt = torch.optim.SGD(model.train().parameters(), lr=1e-3, momentum=0.9)
            steps[name] = lambda model=model, opt=opt: train_step(model, opt)
        else:
            model.eval()
            steps[name] = lambda model=model: infer_step(model)
        if hasattr(model, "grid"):  # a grid model runs each step under the next preset
            steps[name] = switching(model, steps[name])
    return steps


def time_steps(steps: dict[str, Callable], warmup: int, iters: int, repeats: int) -> dict[str, dict[str, list]]:
    """Seconds per step of each model, one entry per repeat, by wall clock and by the
    process's CPU time (which, at one thread, hardly moves when other jobs share the CPU)."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    times: dict[str, dict[str, list]] = {clock: {name: [] for name in steps} for clock in CLOCKS}
    names = list(steps)
    for repeat in range(repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for name in order:
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(iters):
                steps[name]()
            times["wall"][name].append((time.perf_counter() - wall) / iters)
            times["cpu"][name].append((time.process_time() - cpu) / iters)
    return times


def paired_ratio(times: dict[str, list[float]], num: str, den: str) -> float:
    return statistics.median(a / b for a, b in zip(times[num], times[den]))


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    models = make_models(args.size, args.arch)
    x = torch.randn(args.batch, 3, args.size, args.size).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch,))
    check_equal(models, x[:2])

    result = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "env": {
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "timm": version("timm"),
            "threads": torch.get_num_threads(),
            "cpu": platform.processor() or platform.machine(),
            "memory_format": "channels_last",
            "loadavg_start": os.getloadavg(),  # other jobs on the machine make timings noisy
        },
        "goal": GOAL,
        "modes": {},
    }
    for mode in args.modes.split(","):
        print(f"timing {mode} steps of {len(models)} models...", flush=True)
        times = time_steps(make_steps(models, x, y, mode), args.warmup, args.iters, args.repeats)
        for clock in CLOCKS:
            result["modes"][f"{mode} {clock}"] = {
                "median_ms": {name: 1e3 * statistics.median(t) for name, t in times[clock].items()},
                "times_s": times[clock],
                "ratios": {label: paired_ratio(times[clock], num, den) for label, num, den in RATIOS},
            }
    result["env"]["loadavg_end"] = os.getloadavg()
    print_table(result)
    save_result(result, args.out)
    return result


def print_table(result: dict) -> None:
    modes = list(result["modes"])
    config = result["config"]
    print(
        f"\n{config['arch']}, batch {config['batch']} at {config['size']}px, channels_last, "
        f"{result['env']['threads']} threads, median of {config['repeats']} repeats, "
        f"load average {result['env']['loadavg_start'][0]:.1f} -> {result['env']['loadavg_end'][0]:.1f}\n"
    )
    print(f"{'ms per step':<30}" + "".join(f"{mode:>14}" for mode in modes))
    for name in result["modes"][modes[0]]["median_ms"]:
        print(f"{name:<30}" + "".join(f"{result['modes'][m]['median_ms'][name]:>14.1f}" for m in modes))
    print(f"\n{'ratio':<30}" + "".join(f"{mode:>14}" for mode in modes) + f"{'goal':>10}")
    for label, _, _ in RATIOS:
        ratios = [result["modes"][mode]["ratios"][label] for mode in modes]
        cells = "".join(f"{r:.3f}{'  ' if r <= result['goal'] else ' !'}".rjust(14) for r in ratios)
        print(f"{label:<30}{cells}{'<= ' + str(result['goal']):>10}")
    print()


if __name__ == "__main__":
    main()
