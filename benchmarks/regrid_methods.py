"""Re-gridding methods on the demo's asymmetric model, moved to symmetric.

``python -m benchmarks.regrid_methods --weights <run>/last.pt [--only a,b] [--images 1000 5000 15000]``
re-grids the weights (the demo's: ``python train.py +experiment=demo +padding=asymmetric``, or
``python -m benchmarks.grid_robust --candidates asymmetric`` which leaves them in
/tmp/grid_robust/asymmetric_s0/last.pt) to ``symmetric`` by each method below, with
:func:`resnet.regrid.regrid` itself, on the first ``--images`` training images spread evenly over
the split (as ``resnet-regrid`` reads them: every k-th, batches of 64), and prints top-1
error on the test split (10,000 images) under symmetric with the seconds each method took (the
method alone, no image reading). JSON rows: ``results/regrid_methods.json`` (appended).
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import torch

# name: (regrid method, regrid keyword arguments); every distill row runs after BN re-estimation
# unless it says otherwise; each clips the gradient norm at 1 (distill's default) unless it says
# clip 0. The demo's REGRID["distill"] is "distill_feat3": 2 passes, lr 0.05, T 2, features 3.
METHODS = {
    "bn": ("bn", {}),
    "distill": ("distill", {"epochs": 2, "lr": 0.05}),
    "distill_T1": ("distill", {"epochs": 2, "lr": 0.05, "temperature": 1.0}),
    "distill_T4": ("distill", {"epochs": 2, "lr": 0.05, "temperature": 4.0}),
    "distill_lr02": ("distill", {"epochs": 2, "lr": 0.02}),
    "distill_lr10": ("distill", {"epochs": 2, "lr": 0.1}),
    "distill_ep3": ("distill", {"epochs": 3, "lr": 0.05}),
    "distill_ep4": ("distill", {"epochs": 4, "lr": 0.05}),
    "distill_aug2": ("distill", {"epochs": 2, "lr": 0.05, "augment": 2}),
    "distill_aug2_ep3": ("distill", {"epochs": 3, "lr": 0.05, "augment": 2}),
    "distill_feat": ("distill", {"epochs": 2, "lr": 0.05, "features": 1.0}),
    "distill_feat3": ("distill", {"epochs": 2, "lr": 0.05, "features": 3.0}),  # the demo's (configs/regrid.yaml)
    "distill_feat3_noclip": ("distill", {"epochs": 2, "lr": 0.05, "features": 3.0, "clip": 0.0}),
    "distill_feat3_ep1": ("distill", {"epochs": 1, "lr": 0.05, "features": 3.0}),
    "distill_feat3_ep3": ("distill", {"epochs": 3, "lr": 0.05, "features": 3.0}),
    "distill_feat3_aug2": ("distill", {"epochs": 2, "lr": 0.05, "features": 3.0, "augment": 2}),
    "distill_nobn": ("distill_nobn", {"epochs": 2, "lr": 0.05}),
    "grid_bn": ("grid_bn", {}),
}


def sample(count: int, batch: int = 64) -> list[torch.Tensor]:
    """``count`` training images spread evenly over the split, as resnet.detect_cli.read_images picks them."""
    from data.fashion_mnist import load_fashion_mnist

    images, _ = load_fashion_mnist("train")
    step = len(images) / count
    chosen = images[[int(i * step) for i in range(count)]]
    return list(chosen.split(batch))


@torch.no_grad()
def top1_err(model, test, normalize) -> float:
    model.eval()
    images, labels = test
    wrong = sum(int((model(normalize(x)).argmax(1) != y).sum()) for x, y in zip(images.split(1000), labels.split(1000)))
    return 100.0 * wrong / len(labels)


def run_method(name: str, source, batches, normalize, target: str) -> tuple[torch.nn.Module, float]:
    from resnet import with_padding
    from resnet.grid import make_grid, set_grid
    from resnet.regrid import distill, reestimate_bn, regrid

    method, options = METHODS[name]
    start = time.perf_counter()
    if method == "distill_nobn":  # the source's BatchNorm statistics kept
        student = with_padding(copy.deepcopy(source), target).eval()
        distill(student, source, batches, normalize, **options)
    elif method == "grid_bn":  # one model for both grids: the weights shared, BN statistics per grid
        student = make_grid(copy.deepcopy(source), [source.meta.padding_name, target], bn="statistics")
        set_grid(student, 1)
        reestimate_bn(student, batches, normalize)  # the target's statistics only
    else:
        student, _ = regrid(source, target, method, batches, normalize, **options)
    return student, time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", type=Path, default=Path("/tmp/grid_robust/asymmetric_s0/last.pt"))
    parser.add_argument("--target", default="symmetric")
    parser.add_argument("--only", default=",".join(METHODS), help="comma-separated method names")
    parser.add_argument("--images", type=int, nargs="+", default=[15000])
    parser.add_argument("--out", type=Path, default=Path("results/regrid_methods.json"))
    args = parser.parse_args(argv)
    from data import Normalize
    from data.fashion_mnist import load_fashion_mnist
    from resnet import with_padding
    from resnet.checkpoint import load_model
    from resnet.grid import set_grid
    from resnet.report.console import format_table

    source = load_model(args.weights)
    normalize = Normalize("torch")
    test = load_fashion_mnist("test")
    native, moved = top1_err(source, test, normalize), top1_err(with_padding(source, args.target), test, normalize)
    rows = [
        {"method": f"none (native, {source.meta.padding_name})", "images": 0, "seconds": 0.0, "top1_err": native},
        {"method": "none", "images": 0, "seconds": 0.0, "top1_err": moved},
    ]
    print(format_table(rows), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for count in args.images:
        batches = sample(count)
        for name in args.only.split(","):
            before = {k: v.clone() for k, v in source.state_dict().items()}
            student, seconds = run_method(name, source, batches, normalize, args.target)
            assert all(torch.equal(before[k], v) for k, v in source.state_dict().items()), "the teacher changed"
            row = {
                "method": name,
                **METHODS[name][1],
                "images": count,
                "seconds": round(seconds, 1),
                "top1_err": top1_err(student, test, normalize),
            }
            if name == "grid_bn":  # the same model under the source's grid: its own statistics, untouched
                set_grid(student, 0)
                row["top1_err_source_grid"] = top1_err(student, test, normalize)
            rows.append(row)
            print(json.dumps(row), flush=True)
            with args.out.open("a") as f:
                f.write(
                    json.dumps({**row, "weights": str(args.weights), "date": time.strftime("%Y-%m-%d %H:%M")}) + "\n"
                )
    print("\n" + format_table(rows))


if __name__ == "__main__":
    main()
