"""The body of ``eval.py``: load the weights, choose the protocol (:mod:`.protocol`), evaluate, append one row."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from omegaconf import DictConfig

from ..config import ConfigError, check_run_config, scheme_words
from ..model import ModelMeta
from ..out_files import writable_file
from ..report.console import images_cell, summary
from ..report.rows import EVAL_SUMMARY, ROW_KEYS, append_row, results_row
from ..runtime.device import join_job, runtime_for
from ..runtime.distributed import DistEnv, shutdown
from ..weights import WeightsSpec, check_has_ema
from .loader import CROP_COUNTS, check_root, open_eval_data
from .loop import Evaluation, evaluate
from .protocol import (
    check_fit,
    check_logger,
    load_once,
    padded_as_configured,
    resolve_protocol,
    weights_spec,
)
from .tencrop import protocol_view


def evaluate_weights(cfg: DictConfig, trained_data: bool = False) -> dict:
    """Evaluate ``cfg.weights`` as configured (``configs/eval.yaml``); rank 0 appends the
    results row to ``cfg.results_file`` and prints the summary. Returns the row. ``trained_data``:
    ``cfg.data`` is the data the weights were trained on, not one the user named (the start line
    says so)."""
    spec = weights_spec(cfg)
    if cfg.ema:
        check_has_ema(spec)  # before any work
    if cfg.crops not in CROP_COUNTS:
        raise ConfigError(
            f"crops must be 1 (centre crop), 2 (centre and its flip) or 10 (corners + centre and "
            f"flips), got {cfg.crops}"
        )
    check_run_config(cfg)
    check_logger(cfg)
    results = Path(cfg.results_file).expanduser()  # relative: from the working directory
    writable_file(results, f"results_file={cfg.results_file}", "results_file=results/eval.jsonl")
    check_root(cfg.data.name, cfg.data.root)  # a wrong data.root fails before the weights load
    env = join_job(cfg.device, cfg.data.workers)
    try:
        return _evaluate(cfg, spec, env, trained_data, results)
    finally:
        shutdown(env)


def _evaluate(cfg: DictConfig, spec: WeightsSpec, env: DistEnv, trained_data: bool, results: Path) -> dict:
    from data import Normalize  # imported here so that composing configs stays fast

    loaded = load_once(cfg, spec, env)
    model, trained_padding = loaded.model, loaded.trained_for or loaded.model.meta.padding_name
    model = padded_as_configured(cfg, model, loaded.preset_norms)
    meta = model.meta
    protocol = resolve_protocol(cfg, meta, loaded.origin)
    # batch_size counts network inputs, so that one setting fits memory in both protocols.
    images_per_step = max(cfg.batch_size // protocol.crops, 1)
    data = open_eval_data(
        cfg.data, protocol, images_per_step, env, real_labels=cfg.data.get("real_labels"), take=cfg.get("val_images")
    )
    check_fit(meta, data)
    if env.is_main:
        print(start_line(spec, meta, trained_padding, cfg.data.name, trained_data), flush=True)
        if data.note:
            print(f"note: {data.note}", flush=True)

    runtime = runtime_for(env, cfg.amp, cfg.channels_last)  # cuDNN's fastest kernels: the sizes are fixed
    result = evaluate(
        runtime.place(model),
        data.loader,
        runtime,
        Normalize(protocol.preprocessing).to(env.device),
        view=protocol_view(protocol, data.device_resize),
        crops=protocol.crops,
        num_classes=data.num_classes,
        labels_as=data.labels,
        desc="eval 10-crop" if protocol.crops == 10 else "eval",
        log_every=cfg.log_every,
    )
    # More than max_unreadable of the images could not be read (a mount gone, shards swapped): the errors would be
    # another set's; one line, no row. The counts are summed over the processes: every one stops, rank 0 says so.
    stop = result.unreadable_stop(cfg.max_unreadable)
    if stop is not None:
        raise ConfigError(
            f"{cfg.data.name} {stop}; no row appended. Restore the data, or pass a higher max_unreadable "
            "(1: never stop)"
        )
    if result.n_images == 0:
        raise RuntimeError(f"no image of the {data.size} could be evaluated")
    row = results_row(
        meta,
        cfg.data.name,
        cfg.amp,
        {"top1_err": result.top1_err, "top5_err": result.top5_err},
        weights=spec.text,
        weights_source=spec.source,
        ema=bool(cfg.ema),
        trained_padding=trained_padding,
        input_size=protocol.crop,
        **asdict(protocol),  # resize, crop, interpolation, preprocessing, crops
        n_images=result.n_images,
        skipped_images=result.skipped_images,
    )
    row = {key: row[key] for key in ROW_KEYS}  # the order of every eval.py row
    if env.is_main:
        path = _append(results, row)
        _report(row, result, path, data.split_size, cfg.max_unreadable)
        if cfg.get("logger") and cfg.logger.get("wandb"):
            _log_to_wandb(cfg, row, path)
    return row


def _append(path: Path, row: dict) -> Path:
    """Append ``row`` to the results file; where that fails now (checked writable at the start: a
    disk filled since, the mount gone), the row goes to a file of its own, named in the one line
    that ends the run, so that no evaluation is lost."""
    try:
        return append_row(path, row)
    except OSError as err:
        kept = Path(tempfile.gettempdir()) / f"eval-row-{os.getpid()}-{int(time.time())}.jsonl"
        try:
            append_row(kept, row)
        except OSError:
            raise ConfigError(
                f"cannot append the results row to {path} ({err.strerror or err}), nor keep it in {kept.parent}; "
                f"the row: {json.dumps(row)}"
            ) from None
        raise ConfigError(
            f"cannot append the results row to {path} ({err.strerror or err}); it is kept in {kept}: once there is "
            f"room, cat {kept} >> {path}"
        ) from None


def start_line(spec: WeightsSpec, meta: ModelMeta, trained: str, dataset: str, trained_data: bool) -> str:
    """What this evaluation runs: which weights, trained with which scheme, under which, on which data."""
    source = " (the data they were trained on; data=<name> for another)" if trained_data else ""
    return (
        f"evaluating {spec.text}: {meta.arch} trained with {trained}, under padding {scheme_words(meta.padding_name)}, "
        f"on {dataset}{source}"
    )


def _log_to_wandb(cfg: DictConfig, row: dict, path: Path) -> None:
    """One W&B run per evaluation, in the group of the scheme the weights were trained with (their
    training runs' group, :func:`resnet.report.wandb_log.run_group`); ``trained_run``: the id of the
    run that trained the weights where wandb recorded it. It logs the row, and the tables regenerated
    from the whole results file."""
    from hydra.core.hydra_config import HydraConfig

    from ..report.rows import read_rows
    from ..report.wandb_log import eval_run_name, log_evaluations, start_run, training_run

    # its files in eval.py's own run folder (results/eval/<date>/<time>/, beside Hydra's record), as train.py's
    folder = Path(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else path.parent
    config = {**row, "trained_run": training_run(row["weights"])}
    run = start_run(cfg.logger, config, row["trained_padding"], folder, job_type="eval", name=eval_run_name(row))
    log_evaluations(run, [row], read_rows(path), reference=True)
    run.finish()


def _report(row: dict, result: Evaluation, path: Path, split_size: int | None, limit: float) -> None:
    """The summary table; where files could not be read (under ``max_unreadable``), a line first saying
    on how many of the set's images the errors are, and its images cell says so too."""
    scored, skipped = row["n_images"], row["skipped_images"]
    if skipped:
        print(
            f"top-1 err {row['top1_err']:.2f}% on {scored:,} of {scored + skipped:,} images: {skipped:,} unreadable "
            f"(max_unreadable={limit:g}), e.g. {'; '.join(result.skipped_examples[:2])}",
            flush=True,
        )
    protocol = f"{row['resize']}->{row['crop']} {row['interpolation']} {row['preprocessing']}"
    record = {**row, "protocol": protocol, "images_per_s": result.images_per_s}
    record["n_images"] = images_cell(scored, skipped, split_size)
    print(summary(record, EVAL_SUMMARY, f"appended to {path}"), flush=True)
