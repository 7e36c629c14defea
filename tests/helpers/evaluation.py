"""eval.py's body in this process on the real configs, and the overrides of a run on a folder."""

from __future__ import annotations

from pathlib import Path

from resnet.evaluation.run import evaluate_weights
from tests.helpers.compose import compose_config


def compose_eval(*overrides: str):
    return compose_config("eval", *overrides)


def folder_overrides(root: Path, weights: str | Path, results: Path, *extra: str) -> list[str]:
    return [
        f"weights={weights}",
        "data=imagefolder",
        f"data.root={root}",
        "data.num_classes=3",
        "data.workers=0",
        "batch_size=3",
        "device=cpu",
        f"results_file={results}",
        *extra,
    ]


def run_eval(*overrides: str) -> dict:
    return evaluate_weights(compose_eval(*overrides))
