"""What checking ``max_unreadable`` as an epoch goes costs a training step.

    python -m benchmarks.unreadable_check              # 2 gloo processes, 2,000 steps each way
    python -m benchmarks.unreadable_check --quick      # a smoke run

Before every step each process's counts of the files it could and could not read ride on the
host all-reduce the loop already makes (the step's agreement: data or not, a stop or not), two
numbers more in one tensor, and the run's policy (:func:`resnet.engine.run.unreadable_limit`) looks
at the sums. This times, side by side in one run of two gloo processes, that all-reduce (the loop's
own ``all_reduce_host``, the votes and flags it sends) with and without the two numbers, and the
policy's call, against the step time of a small model on the CPU
(``resnet_tiny``, batch 32 at 32 px: a step far shorter than an ImageNet one, so the share is an
upper bound). Goal: at most 1 % of the step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from benchmarks import print_ratios, save_result

GOAL = 0.01  # the check's share of a step


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000, help="all-reduces timed each way, alternating")
    parser.add_argument("--quick", action="store_true", help="smoke run: 100 steps")
    parser.add_argument("--out", type=Path, default=Path("results/bench_unreadable_check.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.steps = 100
    return args


def _worker(rank: int, steps: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    from types import SimpleNamespace

    from resnet.job.signals import PRECEDENCE
    from resnet.runtime.distributed import all_reduce_host

    env = SimpleNamespace(distributed=True, host_group=None)  # the loop's call, over the default gloo group
    votes = [0.0] * (len(PRECEDENCE) + 1)  # a count per stop signal and one for another, as StopRequest.votes
    without, with_counts = [0.0, 0.0, *votes], [0.0, 0.0, 3.0, 50.0, *votes]  # data?, save due?, (files)
    times: dict[str, list[float]] = {"without the counts": [], "with the counts": []}
    for step in range(steps + 20):  # the first 20 warm the group up
        for name, values in (("without the counts", without), ("with the counts", with_counts)):
            dist.barrier()
            start = time.perf_counter()
            all_reduce_host(values, env)
            if step >= 20:
                times[name].append(time.perf_counter() - start)
    if rank == 0:
        Path(out).write_text(json.dumps({name: statistics.median(t) for name, t in times.items()}))
    dist.destroy_process_group()


def policy_seconds(calls: int) -> float:
    """One call of the run's policy on counts under its threshold (what every step of a healthy run asks)."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from resnet.engine.loop import ImagesRead
    from resnet.engine.run import unreadable_limit

    check = unreadable_limit(OmegaConf.create({"max_unreadable": 0.05, "max_unreadable_after": 10_000}),
                             SimpleNamespace(kept="", env=None))  # fmt: skip
    files = ImagesRead(3, 50_000, [])
    start = time.perf_counter()
    for _ in range(calls):
        check(0, files)
    return (time.perf_counter() - start) / calls


def step_seconds(steps: int) -> float:
    """A training step of resnet_tiny on the CPU, batch 32 at 32 px (forward, backward, SGD)."""
    from resnet import build_model

    model = build_model("resnet_tiny", num_classes=10, in_chans=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    images, labels = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    times = []
    for step in range(steps + 3):
        start = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step >= 3:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> dict:
    import socket
    import tempfile

    args = parse_args(argv)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "reduce.json"
        mp.spawn(_worker, args=(args.steps, port, str(out)), nprocs=2, join=True)
        reduce = json.loads(out.read_text())
    step = step_seconds(max(args.steps // 100, 5))
    policy = policy_seconds(args.steps * 10)
    extra = max(reduce["with the counts"] - reduce["without the counts"], 0.0) + policy
    result = {
        "config": {"steps": args.steps},
        "env": {"torch": torch.__version__, "cpus": os.cpu_count(), "loadavg": os.getloadavg()},
        "us": {
            "all-reduce, without the counts": reduce["without the counts"] * 1e6,
            "all-reduce, with the counts": reduce["with the counts"] * 1e6,
            "policy call": policy * 1e6,
            "resnet_tiny step": step * 1e6,
        },  # fmt: skip
        "ratios": {
            "all-reduce with / without the counts": reduce["with the counts"] / reduce["without the counts"],
            "check / step": extra / step,
        },
        "goals": {"check / step": f"<= {GOAL}"},
    }
    for label, value in result["us"].items():
        print(f"{label:<40}{value:>12.1f} us")
    print_ratios(result, 40, 4)
    save_result(result, args.out)
    return result


if __name__ == "__main__":
    main()
