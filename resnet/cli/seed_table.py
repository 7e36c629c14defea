"""The seed table in one command: ``resnet-seed-table data.root=/data/imagenet`` (docs/evaluation.md).

Every model of a model list (``configs/table/<name>.yaml``; TensorNets issue #25's eleven by default) is
evaluated under each scheme of ``schemes``, with each crop count of ``crops``, exactly as ``eval.py`` would
(one results row each, appended to ``results_file``); then both tables are regenerated from that file into
``out/`` beside the published numbers, and logged to W&B with ``logger=wandb``. A model whose weights cannot
be had becomes a row naming what fills it (the flag, or the ``table.files.<arch>=`` path), never a dropped one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from ..config import ConfigError, compose, padding_overrides
from ..padding import PRESETS, resolve_padding
from .errors import launched_rank
from .hydra_app import hydra_command


@dataclass(frozen=True)
class Entry:
    """One model of the list, its weights= value resolved (``fill`` set: a file it needs is not given)."""

    arch: str
    weights: str
    preset: str
    resize: int
    crop: int
    fill: str | None = None  # what gives the weights when ``weights`` is None


def entries(table: DictConfig) -> list[Entry]:
    """The model list with ``{file}`` replaced by ``table.files.<arch>``."""
    files = table.get("files") or {}
    found = []
    for row in table.models:
        weights, fill = str(row.weights), None
        if "{file}" in weights:
            path = files.get(row.arch)
            if path is None:
                fill = f"table.files.{row.arch}=/path/to/its/file ({weights.split(':')[0]} weights)"
                weights = weights.replace("{file}", f"<table.files.{row.arch}>")
            else:
                weights = weights.replace("{file}", str(path))
        found.append(Entry(row.arch, weights, row.preset, int(row.resize), int(row.crop), fill))
    return found


def _scheme_name(name: object) -> bool:
    """A name :func:`resnet.padding.resolve_padding` reads as written: a preset or ``<preset>+blur(<sites>)``."""
    try:
        return isinstance(name, str) and resolve_padding(name).name == name
    except ValueError:
        return False


def check(cfg: DictConfig) -> None:
    unknown = [s for s in cfg.schemes if not _scheme_name(s)]
    if unknown or not cfg.schemes:
        raise ConfigError(
            f"schemes={list(cfg.schemes)}: each must be a preset ({', '.join(PRESETS)}) or a "
            "blurred one ('symmetric+blur(block_conv)'), e.g. schemes=[symmetric,asymmetric]"
        )
    if not cfg.crops or any(c not in (1, 10) for c in cfg.crops):
        raise ConfigError(f"crops={list(cfg.crops)}: each must be 1 or 10, e.g. crops=[1,10]")


def eval_config(cfg: DictConfig, base: DictConfig, entry: Entry, crops: int) -> DictConfig:
    """One evaluation of the table: ``base`` (configs/eval.yaml under the scheme) with the table's data and settings."""
    ecfg = copy.deepcopy(base)
    with open_dict(ecfg):
        ecfg.data = cfg.data
        ecfg.logger = {"wandb": False}  # the table logs once, at the end
        ecfg.weights, ecfg.crops, ecfg.crop, ecfg.resize = entry.weights, crops, entry.crop, entry.resize
        for key in ("download", "interpolation", "batch_size", "device", "amp", "channels_last", "results_file"):
            ecfg[key] = cfg[key]
    return ecfg


def run(cfg: DictConfig) -> dict:
    """Evaluate the list, write the tables; returns {"rows", "missing", "markdown"}."""
    from ..checkpoint import CheckpointError
    from ..evaluation.protocol import check_logger
    from ..evaluation.run import evaluate_weights
    from ..out_files import writable_file, writable_folder
    from ..report.rows import read_rows
    from ..report.table_files import write_tables
    from ..weights import WeightsError

    check(cfg)
    check_logger(cfg)
    writable_folder(Path(cfg.out), f"out={cfg.out}", "out=results/seed_table")  # before the first evaluation
    path = Path(cfg.results_file).expanduser()  # relative: from the working directory
    writable_file(path, f"results_file={cfg.results_file}", "results_file=results/eval.jsonl")
    models = entries(cfg.table)
    plan = [(e, s, c) for e in models for s in cfg.schemes for c in cfg.crops]
    bases = {scheme: compose("eval", *padding_overrides(scheme)) for scheme in cfg.schemes}  # composing is slow
    rows, missing, failed = [], [], set()
    for number, (entry, scheme, crops) in enumerate(plan, start=1):
        if entry.arch in failed:
            continue
        print(f"[{number}/{len(plan)}] {entry.arch} ({entry.weights}) under {scheme}, {crops}-crop", flush=True)
        fill = entry.fill
        if fill is None:
            try:
                rows.append(evaluate_weights(eval_config(cfg, bases[scheme], entry, crops)))
                if rows[-1]["trained_padding"] != entry.preset:
                    print(
                        f"note: {entry.weights} load with native padding {rows[-1]['trained_padding']}, the list "
                        f"says {entry.preset}: fix its preset in configs/table/{cfg.table.name}.yaml",
                        flush=True,
                    )
                continue
            except (WeightsError, CheckpointError) as err:  # not in the cache, a bad file: the row says so
                fill = str(err)
        failed.add(entry.arch)
        model = {"arch": entry.arch, "weights": entry.weights, "trained_padding": entry.preset}
        protocol = f"resize {entry.resize} → crop {entry.crop}"
        missing.append(model | {"dataset": cfg.data.name, "protocol": protocol, "fix": fill})
        print(f"  missing: {fill}", flush=True)
    if launched_rank() != 0:
        return {"rows": rows, "missing": missing, "markdown": None}
    if not rows:
        raise ConfigError(
            "no model of the table could be evaluated; fill them: "
            + "; ".join(f"{m['arch']}: {m['fix']}" for m in missing)
        )
    markdown = write_tables(path, cfg.out, list(cfg.schemes), reference=True, missing=missing, cross_sources=None)
    print(markdown)
    print(
        f"{len(rows)} evaluations of {len(models) - len(failed)} models, {len(missing)} missing; "
        f"rows in {path}, tables in {cfg.out}/",
        flush=True,
    )
    if cfg.logger.get("wandb"):
        _log_to_wandb(cfg, rows, read_rows(path), missing)
    return {"rows": rows, "missing": missing, "markdown": markdown}


def _log_to_wandb(cfg: DictConfig, rows: list[dict], all_rows: list[dict], missing: list[dict]) -> None:
    import wandb

    from ..report.wandb_log import log_evaluations, start_run

    config = OmegaConf.to_container(cfg, resolve=True)
    run = start_run(cfg.logger, config, group=f"seed table {cfg.table.name}", run_dir=cfg.out, job_type="seed_table")
    log_evaluations(run, rows, all_rows, reference=True, missing=missing)
    charts = {name: Path(cfg.out) / f"{name}.png" for name in ("tensornets", "cross")}
    run.log({f"padding/{name}_chart": wandb.Image(str(path)) for name, path in charts.items()})
    run.finish()


main = hydra_command("seed_table", "resnet-seed-table", run)


if __name__ == "__main__":
    main()
