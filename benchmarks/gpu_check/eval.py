"""The ``eval`` step: ``eval.py`` on the ``train`` step's ``last.pt`` (or ``--weights``) and the same
folder's val split."""

from __future__ import annotations

import json

from benchmarks.gpu_check.check import Check, Skipped
from benchmarks.gpu_check.train import _num, data_root, run_logged


def step_eval(check: Check) -> tuple[dict, str]:
    if check.checkpoint is None:
        raise Skipped("no checkpoint: the train step did not run or failed (--weights names one)")
    root, classes = data_root(check)
    run_dir = check.work / "eval"
    overrides = [
        f"weights={check.checkpoint}",
        f"data.root={root}",
        f"data.num_classes={classes}",
        *check.plan.eval_overrides,
        f"results_file={run_dir / 'eval.jsonl'}",
        f"hydra.run.dir={run_dir}",
    ]
    log = run_logged(check, "eval", ["eval.py", *overrides], check.plan.eval_timeout)
    row = json.loads((run_dir / "eval.jsonl").read_text().splitlines()[-1])
    rate = table_value((check.out / log).read_text(), "img/s")
    figures = {key: row.get(key) for key in ("arch", "top1_err", "top5_err", "n_images", "crops", "amp")}
    figures.update(images_per_s=rate, overrides=overrides)
    summary = (f"{figures['n_images']} images: top-1 err {_num(figures['top1_err'], '.1f')}%, {_num(rate)} img/s; "
               f"log {log}")  # fmt: skip
    return figures, summary


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
