"""Grid-robust training at the demo's budget: which remedy closes the grid gap.

``python -m benchmarks.grid_robust [--candidates a,b,...] [--seeds 0 1] [--epochs 5] [overrides]``
trains the demo's model (``+experiment=demo``: resnet_small, Fashion-MNIST, ``--epochs``, seed per
``--seeds``; pass ``amp=bf16`` for the demo's bf16 on a CPU with AMX) once per candidate through
:func:`resnet.engine.run.train` itself, each candidate a ``grid_bn=`` value or a small patch of
what train.py calls (written out below), then evaluates the trained model under each preset on the
test split (10,000 images) and prints the table; JSON rows go to ``results/grid_robust.json``
(appended per run, one row per candidate and seed).

Candidates (``grid=[symmetric,asymmetric]`` unless said):

* ``symmetric`` / ``asymmetric``: the single-scheme references (the diagonal);
* ``grid``: one preset per step drawn uniformly (:func:`resnet.grid.draw`), every BatchNorm
  shared (``grid_bn=shared``);
* ``grid_bn``: the same steps, BatchNorm running statistics kept per preset
  (``grid_bn=statistics``, train.py's default), each preset evaluated with its own;
* ``grid_bn_affine``: statistics and the affine weight and bias per preset (``grid_bn=affine``, the
  demo's: an offset per preset from the first preset's);
* ``grid_alt`` / ``grid_bn_alt``: the presets in turn (:func:`resnet.grid.alternate`) instead of drawn;
* ``grid_bn_split``: every step runs half the batch under each preset (same images per step,
  same steps), per-grid statistics;
* ``grid_bn_pair``: every step runs the first half of the batch under both presets (equal
  compute per step: as many forwards as the plain run), cross-entropy on both plus the KL
  consistency term; each step trains on half the images;
* ``symmetric_shift``: no grid: a symmetric model whose input moves one pixel up and left on the
  steps where the grid would draw asymmetric. Its stem conv then samples the image where
  asymmetric padding's does (all but the first row and column), so it measures what the grid
  costs as plain augmentation;
* ``grid_bn_consist``: every step runs the whole batch under both presets, cross-entropy on both
  plus a KL consistency term between them (twice the compute per step: NOT equal cost).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

PRESETS = ["symmetric", "asymmetric"]
CANDIDATES = [
    "symmetric",
    "asymmetric",
    "grid",
    "grid_bn",
    "grid_alt",
    "grid_bn_alt",
    "grid_bn_split",
    "grid_bn_consist",
    "grid_bn_pair",
    "grid_bn_affine",
    "grid_bn_affine_stem",
    "grid_bn_affine_p60",
    "symmetric_shift",
]


class SplitGrid(nn.Module):
    """The training forward of ``grid_bn_split``: the batch cut into one part per preset, each
    part run under its preset (its own batch statistics, its own running statistics)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from resnet.grid import set_grid

        outs = []
        for index, part in enumerate(x.tensor_split(len(self.model.grid))):
            set_grid(self.model, index)
            outs.append(self.model(part))
        return torch.cat(outs)


class ShiftedHalf(nn.Module):
    """The training forward of ``symmetric_shift``: on the steps where :func:`resnet.grid.draw`
    gives the second preset, the batch moved one pixel up and left, zeros (the normalised
    padding) in from the bottom and right."""

    def __init__(self, model: nn.Module, seed: int) -> None:
        super().__init__()
        self.model, self.seed, self.steps = model, seed, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from resnet.grid import draw

        if self.training:
            if draw(self.seed, self.steps, 2):
                x = F.pad(x[..., 1:, 1:], (0, 1, 0, 1))
            self.steps += 1
        return self.model(x)


class BothGrids(nn.Module):
    """The training forward of ``grid_bn_consist``: the whole batch under every preset, the
    outputs stacked [presets, N, classes] for :class:`ConsistencyLoss`."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from resnet.grid import set_grid

        outs = []
        for index in range(len(self.model.grid)):
            set_grid(self.model, index)
            outs.append(self.model(x))
        return torch.stack(outs)


class PairGrids(BothGrids):
    """The training forward of ``grid_bn_pair``: the first half of the batch under every preset
    (as many forwards per step as the plain run; half the images), stacked as :class:`BothGrids`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x[: x.shape[0] // len(self.model.grid)]) if self.training else self.model(x)


class ConsistencyLoss(nn.Module):
    """The run's loss on every preset's outputs (averaged) plus ``weight`` x the KL divergence of
    each preset's predictions from their mean (detached: a target, as in R-Drop / mean teacher)."""

    def __init__(self, loss: nn.Module, weight: float = 1.0) -> None:
        super().__init__()
        self.loss, self.weight = loss, weight

    def forward(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if outputs.dim() == 2:  # validation or a plain forward
            return self.loss(outputs, labels)
        labels = labels[: outputs.shape[1]]  # PairGrids: the half the presets ran on
        ce = sum(self.loss(o, labels) for o in outputs) / len(outputs)
        mean = F.softmax(outputs, dim=-1).mean(0).detach()
        kl = sum(F.kl_div(F.log_softmax(o, dim=-1), mean, reduction="batchmean") for o in outputs) / len(outputs)
        return ce + self.weight * kl


def per_grid_stem(model: nn.Module) -> nn.Module:
    """``grid_bn_affine_stem``: the stem conv's weights per preset too (presets 1.. in
    ``conv1.grid_weight``; every forward indexes the stack of all, as GridBatchNorm2d does)."""
    from resnet.grid import GridConv2d
    from resnet.padding import conv_with_pads

    class StemPerGrid(GridConv2d):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.weight.shape[0]  # grid_weight: presets 1.. stacked along dim 0 (4-D, for channels_last)
            weight = torch.cat((self.weight, self.grid_weight))[self.active * out : (self.active + 1) * out]
            return conv_with_pads(_Weighted(self, weight), x, self.applied_pad(x.shape[-2:]))

    stem = model.conv1
    stem.__class__ = StemPerGrid
    stem.grid_weight = nn.Parameter(torch.cat([stem.weight.detach()] * (len(model.grid) - 1)))
    return model


class _Weighted:
    """A conv's attributes with another weight (what conv_with_pads reads)."""

    def __init__(self, conv: nn.Conv2d, weight: torch.Tensor) -> None:
        self.conv, self.weight = conv, weight

    def __getattr__(self, name: str):
        return getattr(self.conv, name)


@contextlib.contextmanager
def candidate_patches(name: str, captured: dict):
    """What the candidate changes in resnet.engine.run, undone on exit. ``captured['model']``:
    the model the run built (the object trained, for evaluation without reading last.pt)."""
    import resnet.engine.run as run
    from resnet import grid as grid_lib

    saved = {
        key: getattr(run, key)
        for key in ("make_grid", "draw", "wrap_for_training", "loss_and_augment", "build_run_model")
    }
    original_build = run.build_run_model

    def build(cfg):
        captured["model"] = model = original_build(cfg)
        return model

    run.build_run_model = build
    if name.endswith("_stem"):
        original_make = saved["make_grid"]
        run.make_grid = lambda *args, **kwargs: per_grid_stem(original_make(*args, **kwargs))
    if name.endswith("_p60"):  # the second preset (asymmetric) drawn on 60% of the steps
        run.draw = lambda seed, step, count: int(
            torch.rand((), generator=torch.Generator().manual_seed(seed * 1_000_003 + step)) < 0.6
        )
    if name.endswith("_alt"):
        run.draw = grid_lib.alternate
    if name == "symmetric_shift":
        original_wrap = saved["wrap_for_training"]
        run.wrap_for_training = lambda model, *a, **k: original_wrap(ShiftedHalf(model, captured["seed"]), *a, **k)
    if name.endswith(("_split", "_consist", "_pair")):
        wrapper = {"_split": SplitGrid, "_consist": BothGrids, "_pair": PairGrids}["_" + name.rpartition("_")[2]]
        original_wrap = saved["wrap_for_training"]
        run.wrap_for_training = lambda model, *a, **k: original_wrap(wrapper(model), *a, **k)
        run.draw = lambda seed, step, count: 0  # the wrapper sets the presets; before_step is moot
    if name.endswith(("_consist", "_pair")):
        original_loss = saved["loss_and_augment"]

        def loss_and_augment(cfg, classes, device):
            loss, augment = original_loss(cfg, classes, device)
            return ConsistencyLoss(loss), augment

        run.loss_and_augment = loss_and_augment
    try:
        yield
    finally:
        for key, value in saved.items():
            setattr(run, key, value)


def compose_train(overrides: list[str]):
    from resnet.config import compose

    return compose("train", *overrides)


@torch.no_grad()
def top1_err(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, normalize, batch: int = 1000) -> float:
    model.eval()
    wrong = 0
    for x, y in zip(images.split(batch), labels.split(batch)):
        wrong += int((model(normalize(x)).argmax(1) != y).sum())
    return 100.0 * wrong / len(labels)


def evaluate_under_each(model: nn.Module, name: str, test) -> dict[str, float]:
    """Top-1 error % under each preset: a grid model switched (its own statistics with per-grid
    BN), a single-scheme model re-built under the preset (resnet.model.with_padding)."""
    from data import Normalize
    from resnet import with_padding
    from resnet.grid import set_grid

    normalize = Normalize("torch")
    model = model.cpu().eval()
    errors = {}
    for index, preset in enumerate(PRESETS):
        if hasattr(model, "grid"):
            set_grid(model, index)
            errors[preset] = top1_err(model, *test, normalize)
        else:
            errors[preset] = top1_err(with_padding(model, preset), *test, normalize)
    return errors


def train_candidate(name: str, seed: int, epochs: int, work: Path, extra: list[str]) -> dict:
    from resnet.engine.run import train

    norms = "affine" if "_affine" in name else "statistics" if "_bn" in name else "shared"
    scheme = name.partition("_")[0]
    choice = [f"+padding={scheme}"] if scheme in PRESETS else [f"grid=[{','.join(PRESETS)}]", f"grid_bn={norms}"]
    run_dir = work / f"{name}_s{seed}"
    overrides = [
        "+experiment=demo",
        *choice,
        f"seed={seed}",
        f"epochs={epochs}",
        f"run_dir={run_dir}",
        "log_every=1000",
        *extra,
    ]
    captured: dict = {"seed": seed}
    start = time.perf_counter()
    with candidate_patches(name, captured):
        results = train(compose_train(overrides))
    seconds = time.perf_counter() - start
    return {"model": captured["model"], "seconds": seconds, "val_top1_err": results["top1_err"]}


def analyse_per_grid_bn(path: Path, test) -> list[dict]:
    """A per-grid-BN run's ``last.pt`` evaluated under each preset with each preset's own
    statistics, with the presets' statistics averaged (close to what shared statistics hold),
    and with preset 0's statistics everywhere (what a loader that drops the grid keys gives)."""
    from data import Normalize
    from resnet import build_model
    from resnet.checkpoint import load_checkpoint
    from resnet.grid import GridBatchNorm2d, grid_bn_of, make_grid, preset_state_dict, set_grid

    checkpoint = load_checkpoint(path)
    meta, state = checkpoint["meta"], checkpoint["model"]
    model = make_grid(
        build_model(meta["arch"], meta["num_classes"], PRESETS[0], in_chans=1), PRESETS, bn=grid_bn_of(state)
    )
    normalize = Normalize("torch")
    rows = []
    for label in ("own statistics", "statistics averaged over the presets", "preset 0's statistics everywhere"):
        model.load_state_dict(state)
        for bn in (m for m in model.modules() if isinstance(m, GridBatchNorm2d)):
            stats = [bn.statistics(i) for i in range(len(PRESETS))]
            for i, (mean, var, _) in enumerate(stats):
                if label.startswith("statistics averaged"):
                    mean.copy_(torch.stack([s[0] for s in stats]).mean(0)) if i == 0 else mean.copy_(stats[0][0])
                    var.copy_(torch.stack([s[1] for s in stats]).mean(0)) if i == 0 else var.copy_(stats[0][1])
                elif label.startswith("preset 0") and i:
                    mean.copy_(stats[0][0])
                    var.copy_(stats[0][1])
        row = {"checkpoint": str(path), "BN statistics": label}
        for index, preset in enumerate(PRESETS):
            set_grid(model, index)
            row[f"top1_err {preset}"] = round(top1_err(model, *test, normalize), 2)
        rows.append(row)
    # the plain loader's view: preset_state_dict picks each preset's statistics for a plain model
    for index, preset in enumerate(PRESETS):
        plain = build_model(meta["arch"], meta["num_classes"], preset, in_chans=1)
        plain.load_state_dict(preset_state_dict(state, index))
        rows.append(
            {
                "checkpoint": str(path),
                "BN statistics": f"plain {preset} model, preset_state_dict(state, {index})",
                f"top1_err {preset}": round(top1_err(plain, *test, normalize), 2),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", default="grid,grid_bn", help=f"comma-separated, of {', '.join(CANDIDATES)}")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path("/tmp/grid_robust"))
    parser.add_argument("--out", type=Path, default=Path("results/grid_robust.json"))
    parser.add_argument(
        "--analyse", type=Path, help="only evaluate a per-grid-BN run's last.pt (see analyse_per_grid_bn)"
    )
    parser.add_argument("overrides", nargs="*", help="more train.py overrides")
    args = parser.parse_args(argv)
    if args.analyse:
        from data.fashion_mnist import load_fashion_mnist
        from resnet.report.console import format_table

        print(format_table(analyse_per_grid_bn(args.analyse, load_fashion_mnist("test"))))
        return
    names = args.candidates.split(",")
    for name in names:
        if name not in CANDIDATES:
            parser.error(f"unknown candidate {name}; choose from {', '.join(CANDIDATES)}")
    from data.fashion_mnist import load_fashion_mnist

    test = load_fashion_mnist("test")
    rows = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        for name in names:
            print(f"\n=== {name}, seed {seed} ===", flush=True)
            trained = train_candidate(name, seed, args.epochs, args.work, args.overrides)
            errors = evaluate_under_each(trained["model"], name, test)
            row = {
                "candidate": name,
                "seed": seed,
                "epochs": args.epochs,
                **{f"top1_err {p}": round(e, 2) for p, e in errors.items()},
                "train seconds": round(trained["seconds"], 1),
                "date": time.strftime("%Y-%m-%d %H:%M"),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
            with args.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
    from resnet.report.console import format_table

    print("\n" + format_table(rows))


if __name__ == "__main__":
    main()
