"""Weights & Biases for evaluations (``eval.py logger=wandb``, the seed table), and the start of every run.

One W&B run per ``eval.py`` call, grouped by the scheme the weights were trained with as their train run is
(:func:`run_group`; ``job_type`` tells them apart), named by :func:`eval_run_name`; its config is the results row
and the training run's id, so the cross matrix is rebuilt from a project's runs (:func:`rows_of_runs`). Each logs
its result rows and the tables of the whole results file (:func:`log_evaluations`). Rank 0 only. The API key is
read by wandb itself (``WANDB_API_KEY`` or ``wandb login``); nothing here writes it anywhere. A run is never lost
to its logger: where online cannot work, :func:`start_run` logs offline, in one line, never waiting on a prompt.
"""

from __future__ import annotations

import json
import netrc
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from .rows import ROW_KEYS
from .tables import cross_matrices, log_to_wandb, scheme_table, wandb_table

MODES = ("online", "offline", "disabled")


def wandb_mode(logger: Mapping) -> str:
    """``$WANDB_MODE``, else ``logger.mode``, else online; one wandb would refuse is a ValueError."""
    mode = os.environ.get("WANDB_MODE") or logger.get("mode") or "online"
    if mode not in MODES:
        raise ValueError(f"unknown W&B mode {mode!r}; choose one of {', '.join(MODES)} (logger.mode=offline)")
    return mode


def run_group(meta, grid: Sequence[str] | None = None) -> str:
    """The W&B group of a model's train and eval runs: the scheme it was trained under, ``meta``'s
    (:class:`resnet.model.ModelMeta`) preset, or ``grid[a,b]`` for ``train.py grid=[a,b]``: the
    eval rows' ``trained_padding``, so that each trained scheme is one group."""
    from ..grid import grid_name

    return grid_name(grid) if grid else meta.padding_name


def display_name(config: Mapping, group: str | None, run_dir: str | Path) -> str:
    """A run's name on the dashboard: the scheme, the model and the run folder (W&B would invent one)."""
    model = config.get("model")
    arch = model.get("arch") if isinstance(model, Mapping) else config.get("arch")  # eval.py's row has its own
    weights = config.get("weights")
    parts = [group, arch, Path(str(run_dir)).name if weights is None else Path(str(weights)).parent.name]
    return " ".join(str(part) for part in parts if part)


def eval_run_name(row: Mapping) -> str:
    """An evaluation's name on the dashboard: what the weights were trained with, what they were
    evaluated with, the model and the run folder of its weights (``eval asymmetric→symmetric
    resnet_small 05-01-42``), and ``10-crop`` / ``EMA`` where so: evaluations of one model differ."""
    weights = Path(str(row["weights"]))
    run = weights.parent.name if weights.suffix == ".pt" else str(row["weights"])  # hub weights: their name
    extras = [f"{row['crops']}-crop" if int(row.get("crops", 1)) > 1 else "", "EMA" if row.get("ema") else ""]
    parts = ["eval", f"{row['trained_padding']}→{row['padding_name']}", row["arch"], run, *extras]
    return " ".join(str(part) for part in parts if part)


def training_run(weights: str | Path) -> str | None:
    """The id of the W&B run that trained ``weights`` (a train.py ``last.pt``), as wandb recorded
    it beside them (``<run dir>/wandb/latest-run`` → ``run-<time>-<id>``); None where none is there
    (published weights, logger=csv, a ``$WANDB_DIR`` elsewhere)."""
    latest = Path(str(weights)).parent / "wandb" / "latest-run"
    if not latest.exists():
        return None
    return latest.resolve().name.rpartition("-")[2] or None


def rows_of_runs(runs: Sequence) -> list[dict]:
    """The results rows back from the dashboard's eval runs (each a ``wandb.apis.public.Run``, or
    anything with its ``config`` and ``job_type``): an eval run's config is its row, so the tables
    and the cross matrix (:func:`resnet.report.tables.cross_matrices`) are rebuilt from a project's
    runs, e.g. ``rows_of_runs(wandb.Api().runs("<entity>/resnet-padding", {"jobType": "eval"}))``."""
    return [
        {key: run.config[key] for key in ROW_KEYS}
        for run in runs
        if run.job_type == "eval" and all(key in run.config for key in ROW_KEYS)
    ]


def start_run(
    logger: Mapping,
    config: Mapping,
    group: str | None,
    run_dir: str | Path,
    job_type: str = "train",
    name: str | None = None,
):
    """``wandb.init`` from a ``configs/logger/wandb.yaml`` node (:func:`wandb_mode`), offline
    where online cannot work (:func:`offline_reason`); its files under :func:`wandb_dir`. ``name``:
    the run's name where the logger node gives none (default :func:`display_name`)."""
    import wandb

    if os.environ.get("WANDB_MODE") == "":  # set but empty counts as unset: wandb would fail on it
        del os.environ["WANDB_MODE"]
    mode = wandb_mode(logger)
    reason = offline_reason() if mode == "online" else None
    folder = wandb_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    init = dict(
        project=logger["project"],  # configs/logger/wandb.yaml declares it
        entity=logger.get("entity"),
        group=logger.get("group") or group,
        name=logger.get("name") or name or display_name(config, group, run_dir),
        tags=list(logger.get("tags") or []),
        job_type=job_type,
        config=dict(config),
        dir=str(folder),
    )
    if reason is None:
        try:
            return wandb.init(**init, mode=mode)
        except wandb.errors.Error as err:  # the key refused, the server gone mid-way: keep the run
            reason = f"W&B refused the online run ({str(err).splitlines()[0] if str(err) else type(err).__name__})"
    # this line says it all: wandb's own dozen lines about the offline run are silenced
    run = wandb.init(**init, mode="offline", settings=wandb.Settings(silent=True))
    synced = Path(run.dir).parent  # <dir>/wandb/offline-run-<time>-<id>/files
    print(
        f"W&B: {reason}: logging offline to {synced}; upload it later with `wandb sync {synced}`",
        file=sys.stderr,
        flush=True,
    )
    return run


def wandb_dir(run_dir: str | Path) -> Path:
    """Where wandb writes a run: ``$WANDB_DIR`` when set (a volume that outlives a container),
    else the run's own folder."""
    return Path(os.environ.get("WANDB_DIR") or run_dir)


def offline_reason() -> str | None:
    """Why an online run cannot work here, or None: no API key (``WANDB_API_KEY``, or the netrc
    entry ``wandb login`` writes), or no connection to the W&B server within 3 seconds."""
    base = urlsplit(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")
    host = base.hostname or "api.wandb.ai"
    if not os.environ.get("WANDB_API_KEY") and not _netrc_has(host):
        return "no API key (set WANDB_API_KEY or run `wandb login`)"
    port = base.port or (80 if base.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as err:
        return f"no connection to {host}:{port} ({err.strerror or err})"
    return None


def _netrc_has(host: str) -> bool:
    """Whether the netrc file wandb reads (``$NETRC``, else ``~/.netrc``) holds a password for ``host``."""
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    try:
        entry = netrc.netrc(str(path)).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(entry and entry[2])


def table_cell(value):
    """A value as a ``wandb.Table`` cell: dicts and lists (a row's padding) as JSON text."""
    return json.dumps(value) if isinstance(value, (dict, list)) else value


def log_evaluations(
    run, rows: Sequence[Mapping], all_rows: Sequence[Mapping], reference: bool = False, missing: Sequence[Mapping] = ()
) -> None:
    """``rows`` (this run's) as ``eval/rows``; the scheme table and cross matrix of ``all_rows``
    (the whole results file) as ``padding/tensornets`` and ``padding/cross``."""
    columns = list(ROW_KEYS)
    run.log({"eval/rows": wandb_table(columns, [{c: table_cell(r[c]) for c in columns} for r in rows])})
    if len(rows) == 1:
        run.summary.update({k: v for k, v in rows[0].items() if isinstance(v, (int, float, str))})
    if all_rows:
        log_to_wandb(run, scheme_table(all_rows), cross_matrices(all_rows, weights_sources=None), reference, missing)
