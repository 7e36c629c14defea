"""The body of ``train.py``: build everything from the config, train, checkpoint, report."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig
from torch import nn

from ..archs import ARCHS, canonical_name
from ..config import ConfigError, scheme_words
from ..evaluation.loop import evaluate, unreadable_share, unreadable_stop
from ..evaluation.tencrop import flip_pair
from ..grid import draw, grid_name, make_grid, set_grid
from ..job import peers
from ..job.checkpointer import AgreedFailure, Checkpointer, CheckpointWriteError, RunFailed, write_failure
from ..job.ending import Fit, LoaderWorkerDied, eval_command, finished_run, handing_over, resume_command
from ..job.latest_run import pick_run_dir
from ..job.lock import own_run_dir
from ..job.peers import PeerLost, lost_peer
from ..job.preempt import Stopped, StopRequest
from ..job.resume import ResumePoint, resume
from ..model import ModelMeta
from ..padding import resolve_padding
from ..report.console import format_table
from ..report.rows import TRAIN_SUMMARY, results_row
from ..report.wandb_log import run_group
from ..runtime.container import volume_advice
from ..runtime.device import Runtime, join_job, runtime_for
from ..runtime.distributed import DistEnv, gather_flat, on_rank0, shutdown
from ..runtime.workers import data_workers
from .loop import EpochStats, ImagesRead, NonFiniteLoss, StepContext, train_one_epoch
from .losses import loss_and_augment
from .optim import build_optimizer, build_scheduler
from .runlog import RunLogger, run_log
from .seeding import epoch_seed, seed_everything, set_rng_state
from .sync_bn import convert_sync_batchnorm
from .totals import TRAIN_METRICS, epoch_line_parts
from .train_config import TrainConfig, train_config

__all__ = ["CheckpointWriteError", "LoaderWorkerDied", "PeerLost", "RunFailed", "train"]


def build_run_model(config: TrainConfig) -> nn.Module:
    """The model of ``config.model`` under the configured padding (with ``grid=``: its first preset,
    the sites made switchable between them, :mod:`resnet.grid`); its meta records what the run
    trains with: the data's preprocessing (where set) and its size, for evaluation."""
    recorded = {
        "preprocessing": config.recorded["data"].get("preprocessing"),
        "eval_size": config.data.val_size or config.data.image_size,
    }
    padding = config.grid[0] if config.grid else config.padding
    model = instantiate(config.model, padding=padding, **{k: v for k, v in recorded.items() if v})
    return make_grid(model, config.grid, bn=config.grid_bn) if config.grid else model


def train(cfg: DictConfig) -> dict:
    """Train as configured; return the results row (also written to results.json). A run dir
    that holds the finished run of this config is left as it is: its results are returned."""
    config = train_config(cfg)  # the boundary: checked once, typed; nothing below reads cfg
    env = join_job(config.device, config.data.workers, timeout=config.dist_timeout)
    lost = None
    heartbeat = peers.Heartbeat(env)  # so that the others can tell this process gone from blocked
    try:
        # rank 0's run dir for everyone (Hydra's timestamp can differ by a second between ranks), and the
        # line saying which run it resumes where resume=true came without a run dir (resnet.job.latest_run)
        run_dir, note = on_rank0(env, lambda: pick_run_dir(config, Path(config.run_dir)), ConfigError)
        if str(run_dir) != config.run_dir:
            config = config.in_run_dir(str(run_dir))  # the run it resumes (the folder-index cache is there too)
        # own_run_dir: a second run into it is refused here, before it writes anything; cleanup: what
        # the run holds beyond its return (loader worker processes), released however it ends
        with own_run_dir(run_dir, env), contextlib.ExitStack() as cleanup:
            done = finished_run(config, env, run_dir)
            if done is not None:  # kept as it was, train.log too
                return done
            cleanup.enter_context(run_log(run_dir, env.is_main))  # what the run prints, also in run_dir/train.log
            if env.is_main:
                print(start_line(config, env, run_dir), flush=True)  # at once: the first batch can take a minute
                if note:
                    print(note, flush=True)
            return _train(config, env, run_dir, cleanup)
    except Exception as err:
        lost = err if isinstance(err, PeerLost) else lost_peer(err, env)
        if lost is None and not isinstance(err, Stopped):  # an error of its own: the others say so, and do not requeue
            peers.record_failure(env, err)
        if lost is None or lost is err:
            raise
        # a peer lost outside the epochs (start-up, the results): no requeue of its own
        run_dir = Path(config.run_dir)
        kept = "its last.pt is intact" if (run_dir / "last.pt").exists() else "no last.pt was written yet"
        raise PeerLost(
            f"{lost} (starting up or finishing); {kept}; to go on: {resume_command(run_dir, env)}",
            lost.census,
        ) from None
    finally:
        heartbeat.close()
        if lost is None:  # a process group that lost a member can hang in its destructor
            shutdown(env)


def start_line(config: TrainConfig, env: DistEnv, run_dir: Path) -> str:
    """What this run trains, where, and into which folder: the first line it prints."""
    arch = config.model["arch"]
    padding = resolve_padding(config.padding, native=ARCHS[canonical_name(arch)].native_padding)
    scheme = grid_name(config.grid) if config.grid else f"padding {scheme_words(padding.name)}"
    if config.padding is None and not config.grid:
        scheme += " (its native padding)"
    processes = f", {env.world_size} processes" if env.world_size > 1 else ""
    line = (
        f"training {arch} with {scheme} on {config.data.name} for {config.epochs} "
        f"epoch{'s' if config.epochs != 1 else ''} ({env.device}{processes}); run folder {run_dir}"
    )
    advice = volume_advice(run_dir)
    return line if advice is None else f"{line}\nnote: {advice}"


def make_loaders(config: TrainConfig, env: DistEnv):
    """The run's loaders (:func:`data.build_loaders`), ``data.workers=auto`` counted for this node; a
    dataset whose classes are not ``data.num_classes`` is one line. Folder indexes are cached beside
    the data, else in the run dir."""
    from data import build_loaders  # imported here so that composing configs stays fast
    from data.gpu_decode import check_decode

    data = replace(config.data, workers=data_workers(config.data.workers, env.local_world_size))
    try:  # a wrong folder layout (no val/, an empty class folder, val classes != train classes)
        check_decode(data.decode, env.device)  # decode=gpu needs a CUDA device to decode on
        loaders = build_loaders(
            data,
            config.batch_size,
            rank=env.rank,
            world_size=env.world_size,
            seed=config.seed,
            cache_dir=Path(config.run_dir),
            val_images=config.val_images,
            processes_per_node=env.local_world_size,
        )
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(str(err)) from None
    if len(loaders.train) == 0:  # the last short batch is dropped (a batch of one breaks BatchNorm)
        share = len(loaders.train.sampler)
        each = f", {share:,} per process" if env.world_size > 1 else ""
        raise ConfigError(
            f"{data.name} has {len(loaders.train.dataset):,} training images{each}: fewer than batch_size="
            f"{config.batch_size}, so an epoch would train no step; pass batch_size={share} or less"
        )
    if loaders.num_classes != config.num_classes:
        raise ConfigError(
            f"data.num_classes={config.num_classes} but {data.name} has {loaders.num_classes} classes; "
            f"pass data.num_classes={loaders.num_classes}"
        )
    return loaders


def wrap_for_training(model: nn.Module, env: DistEnv, use_compile: bool, graphs: int = 1) -> nn.Module:
    """The module the training steps call: DDP around the model, then ``torch.compile`` around
    DDP, so that dynamo splits the graph at DDP's bucket boundaries and each bucket's all-reduce
    overlaps the rest of the backward (DDP around a compiled model waits for the whole backward).
    ``gradient_as_bucket_view``: the gradients live in DDP's buckets, saving a copy and its memory.
    ``graphs``: how many graphs the run's steps need (:func:`compiled_graphs`). Checkpoints and
    evaluation use ``model`` itself."""
    wrapped = model
    if env.distributed:
        device_ids = [env.device.index] if env.device.type == "cuda" else None
        wrapped = nn.parallel.DistributedDataParallel(model, device_ids=device_ids, gradient_as_bucket_view=True)
    if not use_compile:
        return wrapped
    allow_recompiles(graphs)
    return torch.compile(wrapped)


def compiled_graphs(grid: list[str] | None) -> int:
    """The graphs dynamo compiles for the training step: one per grid preset (its pads are guards),
    and each once more with the batch and image dimensions dynamic, at the first short batch or
    new progressive size (the loop marks the batch dimension dynamic; tests/models/test_recompiles.py)."""
    return 2 * (len(grid) if grid else 1)


def allow_recompiles(graphs: int) -> None:
    """Raise dynamo's graphs-per-frame limit (8) to ``graphs`` where it is lower: past the limit
    dynamo runs the frame eagerly, with one warning, for the rest of the run."""
    import torch._dynamo

    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, graphs)


@dataclass
class Training:
    """What a run trains, built once from the config: the model (placed on the device, not
    wrapped), its data, and everything that updates it."""

    model: nn.Module
    meta: ModelMeta
    runtime: Runtime
    loaders: object  # data.Loaders
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler | None  # fp16 only
    ema: nn.Module | None  # timm's ModelEmaV3
    loss_fn: nn.Module
    augment: object  # resnet.engine.losses.BatchAugment, or None
    grid: list[str] | None  # grid=: the presets each step draws from (resnet/grid.py)
    steps_per_epoch: int  # optimizer steps an epoch, as the schedule is planned (max_steps_per_epoch applied)


def build_training(config: TrainConfig, env: DistEnv, cleanup: contextlib.ExitStack) -> Training:
    runtime = runtime_for(env, config.amp, config.channels_last, config.deterministic)
    model = build_run_model(config)
    grid = list(model.grid) if hasattr(model, "grid") else None
    meta = model.meta
    loaders = cleanup.enter_context(make_loaders(config, env))
    model = runtime.place(model)
    if config.sync_bn and env.distributed:
        model = convert_sync_batchnorm(model, env)
    steps_per_epoch = len(loaders.train)
    if config.max_steps_per_epoch:
        steps_per_epoch = min(steps_per_epoch, config.max_steps_per_epoch)
    optimizer = build_optimizer(config.optim, model, config.batch_size * env.world_size)
    scheduler = build_scheduler(config.sched, optimizer, steps_per_epoch, config.epochs)
    scaler = torch.amp.GradScaler(env.device.type) if runtime.amp_dtype is torch.float16 else None
    ema = None
    if config.ema_decay:
        from timm.utils import ModelEmaV3

        ema = ModelEmaV3(model, decay=config.ema_decay**config.ema_every)  # ema_decay is per step
    loss_fn, augment = loss_and_augment(config.loss, loaders.num_classes, env.device)
    return Training(
        model, meta, runtime, loaders, optimizer, scheduler, scaler, ema, loss_fn, augment, grid, steps_per_epoch
    )


def _step_context(config: TrainConfig, training: Training, env: DistEnv, stop: StopRequest) -> StepContext:
    """What every training step reads: the run's settings, the built parts, the stop request."""
    from data import Normalize

    def grid_draw(step: int) -> None:
        set_grid(training.model, draw(config.seed, step, len(training.grid)))

    return StepContext(
        runtime=training.runtime,
        normalize=Normalize(training.meta.preprocessing).to(env.device),
        augment=training.augment,
        loss_fn=training.loss_fn,
        scaler=training.scaler,
        grad_clip=config.grad_clip,
        on_nonfinite=config.on_nonfinite,
        ema=training.ema,
        ema_every=config.ema_every,
        freeze_bn=config.freeze_bn,
        log_every=config.log_every,
        max_steps=config.max_steps_per_epoch,
        checkpoint_every=config.checkpoint_every,
        stop=stop,
        before_step=grid_draw if training.grid else None,
    )


def _train(config: TrainConfig, env: DistEnv, run_dir: Path, cleanup: contextlib.ExitStack) -> dict:
    wall_start = time.perf_counter()
    seed_everything(config.seed + env.rank)
    training = build_training(config, env, cleanup)
    from data.identity import train_identity

    layout = {
        "world_size": env.world_size,
        "batch_size": config.batch_size,
        **training.loaders.order_depends_on,
        **train_identity(training.loaders.train.dataset),
    }  # the set trained on: a resume on another is refused
    start = resume(config, training, env, run_dir, layout)
    train_model = wrap_for_training(training.model, env, config.compile, compiled_graphs(training.grid))
    stop = StopRequest(env).install()
    ctx = _step_context(config, training, env, stop)
    saver = Checkpointer(run_dir / "last.pt", training, env, config.recorded, layout, start.history)
    ctx.save_due = saver.due_every(config.checkpoint_minutes)
    ctx.check_unreadable = unreadable_limit(config, saver)
    group = run_group(training.meta, training.grid)
    logger = RunLogger(run_dir, env.is_main, config.logger, config.recorded, group=group, resumed_epoch=start.epoch)
    with handing_over(stop, saver, run_dir, env) as fit:
        fit.fill_from(_fit(config, env, training, train_model, ctx, saver, logger, start))
    results = _results(config, env, training, fit, run_dir, time.perf_counter() - wall_start)
    logger.finish(results, saver.path, log_checkpoint=bool(config.logger.get("log_checkpoint")))
    if env.is_main:
        ema = " (their EMA: add ema=true)" if training.ema is not None else ""
        footer = f"results: {run_dir / 'results.json'}; weights: {saver.path}\n"
        print(_summary(results, f"{footer}evaluate them: {eval_command(config, saver.path)}{ema}"))
    return results


def _fit(
    config: TrainConfig,
    env: DistEnv,
    training: Training,
    train_model: nn.Module,
    ctx: StepContext,
    saver: Checkpointer,
    logger: RunLogger,
    start: ResumePoint,
) -> Fit:
    """The epochs from ``start``: train, validate every ``eval_every`` epochs and at the last, log,
    save ``last.pt`` at every epoch's end (and mid-epoch, through ``train_one_epoch``)."""
    last_epoch = config.epochs if not config.stop_after else min(config.epochs, start.epoch + config.stop_after)
    if start.epoch >= last_epoch and start.partial is None:  # every epoch saved, results.json not written yet
        return Fit.from_history(last_epoch, saver.history)
    fit = Fit(last_epoch, history=saver.history, trained_to=start.epoch)  # the history the checkpoints hold
    if ctx.stop.agreed():  # a stop signal during start-up: nothing trained, nothing new to save
        return fit
    global_step = start.step
    for epoch in range(start.epoch, fit.epochs):
        resumed = EpochStats.from_state(start.partial) if start.partial is not None and epoch == start.epoch else None
        if resumed is None:
            seed_everything(epoch_seed(config.seed, epoch, env.rank))
        else:  # where the interrupted run was, to the generator state
            set_rng_state(start.rng)
        steps_before = resumed.steps if resumed is not None else 0  # resumed is updated in place
        training.loaders.set_epoch(epoch, start_step=resumed.batches if resumed is not None else 0)
        stats = train_one_epoch(
            train_model,
            training.loaders.train,
            training.optimizer,
            training.scheduler,
            ctx,
            epoch,
            global_step,
            resume=resumed,
            checkpoint=lambda step, s, e=epoch: saver.save(e, step, s.state()),
        )
        if stats.interrupted:
            break
        _check_skipped(config, stats, epoch, saver)  # (max_unreadable: train_one_epoch checks, ctx.check_unreadable)
        global_step += stats.steps - steps_before
        fit.train = stats.metrics
        row = _epoch_row(epoch, global_step, stats)
        if epoch == fit.epochs - 1 or (epoch + 1) % config.eval_every == 0:
            fit.val, fit.ema_val = _validate(config, training, ctx, row, epoch, saver)
        fit.history.append(row)
        _log_epoch(logger, stats, row, epoch, saver, env)
        if env.is_main:
            _print_epoch(row, training.loaders.val_split_size)
        saver.save(epoch + 1, global_step)
        fit.trained_to = epoch + 1
        if ctx.stop.agreed():
            break
    return fit


def _log_epoch(logger: RunLogger, stats: EpochStats, row: dict, epoch: int, saver: Checkpointer, env: DistEnv) -> None:
    """steps.csv and metrics.csv (rank 0), before the epoch's checkpoint: a resume drops rows past
    the checkpoint's epoch. A write that fails (a full disk) ends the run on every rank in one line,
    the epoch unsaved: the resume trains it again and writes its rows then."""

    def write() -> None:
        try:
            logger.log_steps(stats.history, epoch + 1)  # 1-based, as the epoch line and metrics.csv
            logger.log_epoch(row)
        except OSError as err:
            raise RunFailed(write_failure(err.filename or "the run logs", err, saver.kept)) from err

    on_rank0(env, write, RunFailed)  # only rank 0 writes; every rank learns whether it worked


def _check_skipped(config: TrainConfig, stats: EpochStats, epoch: int, saver: Checkpointer) -> None:
    """``on_nonfinite=skip``: an epoch that skipped more than ``max_skipped`` of its steps did not
    train; stop before it is saved (the last checkpoint holds the epoch before)."""
    tried = stats.steps + stats.skipped_steps
    if config.on_nonfinite != "skip" or not tried or stats.skipped_steps <= config.max_skipped * tried:
        return
    raise NonFiniteLoss(
        f"on_nonfinite=skip skipped {stats.skipped_steps} of the {tried} steps of epoch {epoch + 1} "
        f"({stats.skipped_steps / tried:.0%}, more than max_skipped={config.max_skipped:g}): the run is not "
        f"training; {saver.kept}. Resume from it with a lower LR (resume=true optim.lr=<lower>), set grad_clip=1.0, "
        "or raise max_skipped"
    )


def unreadable_limit(config: TrainConfig, saver: Checkpointer) -> Callable[[int, ImagesRead], None]:
    """The run's ``StepContext.check_unreadable``: more than ``max_unreadable`` of the images an epoch
    read could not be read (a class folder gone, a failing disk, a bad mount), so it would train on
    other data than the run's: stop, keeping what :attr:`Checkpointer.kept` says. The loop asks before
    every step, on the epoch's files so far summed over the processes, from ``max_unreadable_after``
    of them on (a few bad files early stop nothing; a bad mount stops within the epoch's first minute,
    every process at the same step), and at the epoch's end on all of them, before it is saved."""
    limit, after = config.max_unreadable, config.max_unreadable_after

    def check(epoch: int, files: ImagesRead) -> None:
        if files.unreadable <= limit * files.read or (not files.ended and files.read < after):
            return
        if files.ended:  # its examples are every process's already
            stop = unreadable_stop(files.unreadable, files.read, limit, files.examples)
        else:  # every process is here, at the same step: the same line on each
            examples = gather_flat(files.examples, saver.env)
            stop = (
                f"could not read {files.unreadable:,} of the first {files.read:,} images it read "
                f"({unreadable_share(files.unreadable, files.read, limit)} so far, more than max_unreadable="
                f"{limit:g}; checked from max_unreadable_after={after:,} images on), e.g. {'; '.join(examples[:2])}"
            )
        raise AgreedFailure(
            f"epoch {epoch + 1} {stop}; {saver.kept}. Restore the data and run again with resume=true, or pass "
            "a higher max_unreadable"
        )

    return check


def _epoch_row(epoch: int, step: int, stats: EpochStats) -> dict:
    """The epoch's row: its train metrics as ``train_<name>`` (resnet/engine/totals.py), then its counts."""
    return {
        "epoch": epoch + 1,
        "step": step,
        **{f"train_{k}": v for k, v in stats.metrics.items()},
        "lr": stats.lr,
        "skipped_images": stats.skipped_images,
        "skipped_examples": "; ".join(stats.skipped_paths),
        "skipped_steps": stats.skipped_steps,
        "empty_steps": stats.empty_steps,
        "unused_images": stats.unused_images,
        "epoch_seconds": stats.seconds,
    }


def _validate(
    config: TrainConfig, training: Training, ctx: StepContext, row: dict, epoch: int, saver: Checkpointer
) -> tuple[dict, dict]:
    """The model's (and its EMA's) val metrics, added to the epoch's ``row`` as ``val_*``/``ema_*``. A
    validation that could not read more than ``max_unreadable`` of its images scored other data than
    the run's: the run stops before the epoch is saved, every process with the same line (the counts
    are summed over the processes; rank 0's examples: those of every rank)."""
    # eval_flip: each val image and its mirror image, softmax averaged (FFCV's test-time flip)
    protocol = {"view": lambda images, sizes: flip_pair(images), "crops": 2} if config.eval_flip else {}
    protocol["log_every"] = config.log_every  # a progress line every log_every batches in a log
    if training.grid:  # validated under the grid's first preset, the one its meta records
        set_grid(training.model, 0)
        if training.ema is not None:
            set_grid(training.ema.module, 0)
    loaders, runtime = training.loaders, training.runtime
    share = f" ({val_share(loaders)})" if val_share(loaders) else ""  # val_images=N: "N of <all> images"
    result = evaluate(training.model, loaders.val, runtime, ctx.normalize, desc=f"val{share}", **protocol)
    if result.unreadable_stop(config.max_unreadable) is not None:
        examples = gather_flat(result.skipped_examples, saver.env)
        raise AgreedFailure(
            f"the validation after epoch {epoch + 1} {result.unreadable_stop(config.max_unreadable, examples)}; "
            f"{saver.kept}. Restore the val data and run again with resume=true, or pass a higher max_unreadable"
        )
    val = result.metrics()
    row.update({f"val_{k}": v for k, v in val.items()})
    ema_val = {}
    if training.ema is not None:
        ema_val = evaluate(
            training.ema.module, loaders.val, runtime, ctx.normalize, desc=f"val EMA{share}", **protocol
        ).metrics()
        row.update({f"ema_{k}": v for k, v in ema_val.items()})
    return val, ema_val


def _results(
    config: TrainConfig, env: DistEnv, training: Training, fit: Fit, run_dir: Path, wall_seconds: float
) -> dict:
    val = fit.val
    return results_row(
        training.meta,
        config.data.name,
        config.amp,
        val,
        grid=training.grid,  # None, or the presets trained for (validated under the first)
        preprocessing=training.meta.preprocessing,
        epochs=fit.epochs,
        global_batch=config.batch_size * env.world_size,
        world_size=env.world_size,
        ema_decay=config.ema_decay,
        ema_top1_err=fit.ema_val.get("top1_err"),  # None without EMA
        ema_top5_err=fit.ema_val.get("top5_err"),
        n_val_images=val.get("n_images"),
        # n_val_images less: val_images=N, skips
        val_split_images=training.loaders.val_split_size or training.loaders.val_size,
        skipped_images=sum(int(r.get("skipped_images") or 0) for r in fit.history),  # training, every epoch
        val_skipped_images=val.get("skipped_images"),
        # the last epoch's train metrics (train_loss, train_images_per_s, ...): None where its row lacks one
        **{f"train_{k}": fit.train.get(k) for k in TRAIN_METRICS},
        val_images_per_s=val.get("images_per_s"),
        wall_seconds=wall_seconds,
        run_dir=str(run_dir),
    )


def _summary(results: dict, footer: str) -> str:
    """The closing table: one row for the trained weights, and one for their EMA when kept."""
    shown = dict(results)
    if results.get("val_split_images") and results["n_val_images"] != results["val_split_images"]:
        shown["n_val_images"] = f"{results['n_val_images']:,} of {results['val_split_images']:,}"  # val_images=N
    rows = [{**shown, "weights": "model"}]
    if results["ema_top1_err"] is not None:
        ema = {"top1_err": results["ema_top1_err"], "top5_err": results["ema_top5_err"]}
        rows.append({**shown, "weights": f"EMA {results['ema_decay']:g}", **ema})
    columns = dict(TRAIN_SUMMARY)
    if results.get("skipped_images") or results.get("val_skipped_images"):  # unreadable images, counted, not hidden
        columns["skipped (train / val)"] = "skipped"
        for row in rows:
            row["skipped"] = f"{results.get('skipped_images') or 0:,} / {results.get('val_skipped_images') or 0:,}"
    table = [{heading: row[key] for heading, key in columns.items()} for row in rows]
    return "\n" + format_table(table) + "\n" + footer


def val_share(loaders) -> str | None:
    """``1,000 of 10,000 images`` where validation scores part of the val split (``val_images=N``), else None."""
    if not loaders.val_split_size or loaders.val_size == loaders.val_split_size:
        return None
    return f"{loaders.val_size:,} of {loaders.val_split_size:,} images"


def _print_epoch(row: dict, split: int = 0) -> None:
    """The epoch's line; ``split``: the val split's images, said beside the errors where fewer were scored."""
    parts = [f"epoch {row['epoch']}", *epoch_line_parts(row)]
    if "val_top1_err" in row:
        parts += [f"val top-1 err {row['val_top1_err']:.2f}%", f"top-5 err {row['val_top5_err']:.2f}%"]
        if split and row.get("val_n_images") != split:
            parts[-1] += f" (on {row['val_n_images']:,} of the {split:,} val images)"
    if "ema_top1_err" in row:
        parts.append(f"EMA top-1 err {row['ema_top1_err']:.2f}%")
    if row["skipped_images"]:
        parts.append(f"skipped {row['skipped_images']} unreadable images, e.g. {row['skipped_examples']}")
    if row["empty_steps"]:
        parts.append(
            f"{row['empty_steps']} steps skipped on every process (one read no image; "
            f"{row['unused_images']} readable images of those steps unused)"
        )
    print(" | ".join(parts), flush=True)
