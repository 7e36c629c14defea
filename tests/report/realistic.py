"""What the report's tests draw from: realistic result rows (issue 49: several schemes, a long
per-site scheme, several runs of one scheme from a Hydra sweep and a single run, EMA weights), the
results files a user may hand ``resnet-tables`` (issue 54: one model, one scheme per model, many
models, per-site names, a seed sweep), and the figures a chart function saves, drawn."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import matplotlib.figure

from resnet.padding import Padding, resolve_padding

FIXTURE = Path(__file__).parents[1] / "fixtures" / "eval_rows.jsonl"
SWEEP = "multirun/2026-11-28/12-18-10"
RUNS = {  # weights -> (trained with, EMA)
    f"{SWEEP}/0/last.pt": ("symmetric", False),
    f"{SWEEP}/1/last.pt": ("symmetric", False),
    "outputs/2026-11-28/12-18-10/last.pt": ("symmetric", False),
    "outputs/2026-11-28/12-18-10/last.pt (EMA)": ("symmetric", True),
    "outputs/2026-11-27/09-01-33/last.pt": ("asymmetric", False),
    "outputs/2026-11-27/10-44-02/last.pt": ("symmetric+blur(block_conv)", False),
    "outputs/2026-11-26/23-59-59/last.pt": ("grid[symmetric,asymmetric]", False),
}
# a per-site scheme far from every preset: its name is the longest label a chart gets
LONG_PER_SITE = Padding(stem_conv="same", stem_pool="valid", stem_pool_value="zero", block_conv="fixed",
                        block_conv_blur=True)  # fmt: skip
LONGER_PER_SITE = Padding(stem_conv="fixed", stem_pool="valid", stem_pool_value="zero", block_conv="same",
                          stem_conv_blur=True, block_conv_blur=True)  # fmt: skip


def evaluation(weights: str, trained: str, scheme: str, top1: float, top5: bool = True, **fields) -> dict:
    """A resnet_tiny checkpoint's row as eval.py writes it: ``weights`` trained under ``trained``,
    evaluated under ``scheme`` (any :attr:`resnet.padding.Padding.name`); ``fields`` replace others."""
    padding = resolve_padding(scheme)
    return {**_template(), "weights": weights, "trained_padding": trained, "padding_name": padding.name,
            "padding": padding.as_dict(), "top1_err": top1, "top5_err": round(top1 / 9, 3) if top5 else None,
            **fields}  # fmt: skip


@cache
def _template() -> dict:
    return next(r for r in map(json.loads, FIXTURE.read_text().splitlines()) if r["arch"] == "resnet_tiny")


def realistic_rows(top5: bool = True) -> list[dict]:
    """Every run of RUNS under five schemes (one of them LONG_PER_SITE); made-up errors."""
    rows = []
    schemes = ("symmetric", "asymmetric", "tf_same", "symmetric+blur(block_conv)", LONG_PER_SITE.name)
    for i, (weights, (trained, ema)) in enumerate(RUNS.items()):
        for j, scheme in enumerate(schemes):
            top1 = round(6.5 + 1.7 * i + 2.3 * j + 0.01 * (i * j % 7), 2)
            rows.append(evaluation(weights.removesuffix(" (EMA)"), trained, scheme, top1, top5, ema=ema))
    return rows


def one_model() -> list[dict]:
    """A first run: one checkpoint, evaluated under its own scheme."""
    return [evaluation("outputs/2026-11-28/12-18-10/last.pt", "symmetric", "symmetric", 7.25)]


def one_scheme_per_model() -> list[dict]:
    """Each model evaluated once, under its own scheme: nothing crossed, no model under two schemes."""
    return [
        evaluation("outputs/2026-11-28/12-18-10/last.pt", "symmetric", "symmetric", 7.25),
        evaluation("outputs/2026-11-28/13-02-44/last.pt", "asymmetric", "asymmetric", 7.02),
        evaluation("outputs/2026-11-28/14-40-10/last.pt", "grid[symmetric,asymmetric]", "symmetric", 7.2),
    ]


MANY_ARCHS = ("resnet_tiny", "resnet_small", "resnet18", "resnet50")


def many_models() -> list[dict]:
    """Four architectures, each trained under symmetric and under asymmetric, evaluated under both."""
    rows = []
    for i, arch in enumerate(MANY_ARCHS):
        for j, trained in enumerate(("symmetric", "asymmetric")):
            for scheme in ("symmetric", "asymmetric"):
                top1 = round(20 - 3 * i + 0.4 * j + (2.5 if scheme != trained else 0), 2)
                rows.append(evaluation(f"outputs/{arch}/{trained}/last.pt", trained, scheme, top1, arch=arch))
    return rows


def per_site_names() -> list[dict]:
    """Models trained under long per-site schemes, each evaluated under every one of them."""
    schemes = ("symmetric", LONG_PER_SITE.name, LONGER_PER_SITE.name)
    return [evaluation(f"runs/per-site-{i}/last.pt", trained, scheme, round(7 + i + 1.5 * j, 2))
            for i, trained in enumerate(schemes) for j, scheme in enumerate(schemes)]  # fmt: skip


SEEDS = (0, 1, 2)


def seed_sweep(root: Path) -> list[dict]:
    """``python train.py -m +padding=symmetric,asymmetric seed=0,1,2`` run in ``root``: each job's
    folder (its ``last.pt``, Hydra's ``.hydra/config.yaml`` with its seed) and its rows, every job
    under both schemes, the weights relative to ``root``, as eval.py there writes them."""
    rows = []
    for job, (trained, seed) in enumerate((t, s) for t in ("symmetric", "asymmetric") for s in SEEDS):
        folder = root / SWEEP / str(job)
        (folder / ".hydra").mkdir(parents=True)
        (folder / "last.pt").write_bytes(b"weights")
        (folder / ".hydra" / "config.yaml").write_text(f"seed: {seed}\nepochs: 8\n")
        for scheme in ("symmetric", "asymmetric"):
            top1 = round(7 + 0.1 * seed + (5 if scheme != trained else 0), 2)
            rows.append(evaluation(f"{SWEEP}/{job}/last.pt", trained, scheme, top1))
    return rows


def equal_errors() -> list[dict]:
    """A short run's: every model's top-1 the same under every scheme (every Δ top-1 is 0), its top-5 not."""
    schemes = ("symmetric", "asymmetric", LONG_PER_SITE.name)
    return [evaluation(f"runs/short-{i}/last.pt", trained, scheme, 94.0, top5=False, top5_err=40.0 + i + j)
            for i, trained in enumerate(schemes) for j, scheme in enumerate(schemes)]  # fmt: skip


CASES = {"one model": one_model, "one scheme per model": one_scheme_per_model, "many models": many_models,
         "per-site names": per_site_names, "all runs": realistic_rows, "equal errors": equal_errors}  # fmt: skip


def drawn(monkeypatch, plot) -> list[matplotlib.figure.Figure]:
    """The figures ``plot`` saves, drawn (the charts close theirs; their artists stay)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figures, save = [], matplotlib.figure.Figure.savefig

    def savefig(fig, *args, **kwargs):
        figures.append((fig, kwargs.get("dpi", fig.dpi)))
        save(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    plot()
    for fig, dpi in figures:
        FigureCanvasAgg(fig)  # closing took its canvas
        fig.set_dpi(dpi)  # as saved
        fig.canvas.draw()
    return [fig for fig, _ in figures]
