"""What the report's tests draw from (issue 49): realistic result rows (several schemes, a long
custom scheme name, several runs of one scheme from a Hydra sweep and a single run, EMA weights),
and the figures a chart function saves, drawn."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.figure

from resnet.padding import PRESETS, Padding

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
LONG_CUSTOM = Padding(stem_conv="same", stem_pool="same", block_conv="same", block_conv_blur=True)


def scheme_padding(scheme: str) -> tuple[str, dict]:
    """(padding_name, padding) of a row evaluated under ``scheme`` ('custom' for LONG_CUSTOM)."""
    if scheme == "custom":
        return "custom", LONG_CUSTOM.as_dict()
    if scheme.endswith("+blur(block_conv)"):
        return scheme, {**PRESETS[scheme.split("+")[0]].as_dict(), "block_conv_blur": True}
    return scheme, PRESETS[scheme].as_dict()


def realistic_rows(top5: bool = True) -> list[dict]:
    """Every run of RUNS under five schemes (one of them a long custom one); made-up errors."""
    template = next(r for r in map(json.loads, FIXTURE.read_text().splitlines()) if r["arch"] == "resnet_tiny")
    rows = []
    schemes = ("symmetric", "asymmetric", "tf_same", "symmetric+blur(block_conv)", "custom")
    for i, (weights, (trained, ema)) in enumerate(RUNS.items()):
        for j, scheme in enumerate(schemes):
            name, padding = scheme_padding(scheme)
            top1 = round(6.5 + 1.7 * i + 2.3 * j + 0.01 * (i * j % 7), 2)
            rows.append({**template, "weights": weights.removesuffix(" (EMA)"), "ema": ema, "trained_padding": trained,
                         "padding_name": name, "padding": padding, "top1_err": top1,
                         "top5_err": round(top1 / 9, 3) if top5 else None})  # fmt: skip
    return rows


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
