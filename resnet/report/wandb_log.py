"""Weights & Biases for evaluations: ``eval.py logger=wandb`` and the seed table.

One W&B run per ``eval.py`` call (grouped by the scheme the weights were trained with, so a
project page shows each training grid's evaluations together), one per seed table. Each logs
its result rows as a ``wandb.Table`` and the tables regenerated from the whole results file
(:func:`resnet.report.tables.log_to_wandb`). Rank 0 only. The API key is read by wandb itself
(``WANDB_API_KEY`` or ``wandb login``); nothing here writes it anywhere.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from .rows import ROW_KEYS
from .tables import cross_matrices, log_to_wandb, scheme_table, wandb_table

MODES = ("online", "offline", "disabled")


def wandb_mode(logger: Mapping) -> str:
    """``$WANDB_MODE``, else ``logger.mode``, else online; one wandb would refuse is a ValueError."""
    mode = os.environ.get("WANDB_MODE") or logger.get("mode") or "online"
    if mode not in MODES:
        raise ValueError(f"unknown W&B mode {mode!r}; choose one of {', '.join(MODES)} (logger.mode=offline)")
    return mode


def start_run(logger: Mapping, config: Mapping, group: str, run_dir: str | Path, job_type: str | None = None):
    """``wandb.init`` from a ``configs/logger/wandb.yaml`` node (:func:`wandb_mode`)."""
    import wandb

    mode = wandb_mode(logger)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    return wandb.init(
        project=logger.get("project", "resnet-padding"),
        entity=logger.get("entity"),
        group=logger.get("group") or group,
        tags=list(logger.get("tags") or []),
        job_type=job_type,
        config=dict(config),
        dir=str(run_dir),
        mode=mode,
    )


def table_cell(value):
    """A value as a ``wandb.Table`` cell: dicts and lists (a row's padding) as JSON text."""
    return json.dumps(value) if isinstance(value, (dict, list)) else value


def log_evaluations(run, rows: Sequence[Mapping], all_rows: Sequence[Mapping], reference: bool = False,
                    missing: Sequence[Mapping] = ()) -> None:
    """``rows`` (this run's) as ``eval/rows``; the scheme table and cross matrix of ``all_rows``
    (the whole results file) as ``padding/tensornets`` and ``padding/cross``."""
    columns = list(ROW_KEYS)
    run.log({"eval/rows": wandb_table(columns, [{c: table_cell(r[c]) for c in columns} for r in rows])})
    if len(rows) == 1:
        run.summary.update({k: v for k, v in rows[0].items() if isinstance(v, (int, float, str))})
    if all_rows:
        log_to_wandb(run, scheme_table(all_rows), cross_matrices(all_rows, weights_sources=None), reference, missing)
