"""How long a stopped run needs: a ResNet-50 ``last.pt`` with its optimizer state and EMA, saved.

    python -m benchmarks.checkpoint_save                 # resnet50, SGD momentum + EMA, 3 saves
    python -m benchmarks.checkpoint_save --arch resnet101 --dir /shared/scratch

A preempted job gets SIGTERM and ``GraceTime`` seconds before SIGKILL (docs/cluster.md). In that
time it finishes its step, saves ``last.pt`` the way training does (:class:`resnet.job.checkpointer.Checkpointer`:
weights, the optimizer's state, the EMA's weights, RNG states, history; a temporary file, fsync,
rename) and requeues. This measures the save, in ``--dir`` (its file system is the one that
matters: a shared one is slower than a local disk), and loading it back.

It also sets the save against train.yaml's ``checkpoint_minutes`` (the most a dead process, a
kill -9 or a lost node can cost): the share of a run's time that saving that often takes, every
process waiting for rank 0's write.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from resnet import build_model
from resnet.checkpoint.training_state import TrainingState
from resnet.engine.optim import scheduler_state
from resnet.engine.seeding import rng_state


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to save (default: a temporary directory)")
    parser.add_argument("--quick", action="store_true", help="resnet18, one save: a smoke run")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    if args.quick:
        args.arch, args.repeats = "resnet18", 1
    return args


def training_state(arch: str) -> tuple[torch.nn.Module, TrainingState]:
    """The model and what Checkpointer saves beside it, after one optimizer step (SGD's momentum
    buffers exist from the first step) and one EMA update."""
    from timm.utils import ModelEmaV3

    model = build_model(arch, num_classes=1000)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=100)
    model(torch.randn(2, 3, 64, 64)).logsumexp(1).mean().backward()
    optimizer.step()
    scheduler.step()
    ema = ModelEmaV3(model, decay=0.9999)
    ema.update(model, step=0)
    state = TrainingState(
        epoch=1,
        step=1,
        optimizer=optimizer.state_dict(),
        scheduler=scheduler_state(scheduler),
        rng=[rng_state()],
        config={},
        layout={"world_size": 1},
        ema=ema.module.state_dict(),
    )
    return model, state


def default_checkpoint_minutes() -> float:
    """train.yaml's ``checkpoint_minutes``."""
    from omegaconf import OmegaConf

    from resnet.config import config_dir

    return float(OmegaConf.load(config_dir() / "train.yaml").checkpoint_minutes)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    model, state = training_state(args.arch)
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        path = Path(folder) / "last.pt"
        saves, loads = [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            state.save(path, model)
            saves.append(time.perf_counter() - start)
            start = time.perf_counter()
            TrainingState.read(path)
            loads.append(time.perf_counter() - start)
        size = path.stat().st_size
    minutes = default_checkpoint_minutes()
    save_s = statistics.median(saves)
    result = {"arch": args.arch, "bytes": size, "save_s": save_s, "load_s": statistics.median(loads),
              "repeats": args.repeats, "dir": str(args.dir or tempfile.gettempdir()),
              "checkpoint_minutes": minutes, "save_share": save_s / (60 * minutes + save_s)}  # fmt: skip
    print(
        f"{args.arch} last.pt ({size / 2**20:.0f} MiB: weights, SGD momentum, EMA) in {result['dir']}: "
        f"save {result['save_s']:.2f} s, load {result['load_s']:.2f} s (median of {args.repeats}); "
        f"saved every checkpoint_minutes={minutes:g}, the saves take {result['save_share']:.2%} of the run"
    )
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
