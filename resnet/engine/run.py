"""The body of ``train.py``: build everything from the config, train, checkpoint, report."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import nn

from data.testsets import TEST_SETS

from ..checkpoint import CheckpointError, load_weights, save_checkpoint
from ..checkpoint.errors import error_line
from ..config import ConfigError, check_run_config, padding_from_config
from ..distributed import DistEnv, gather_objects, shutdown
from ..evaluation.loop import evaluate
from ..evaluation.tencrop import flip_pair
from ..grid import draw, grid_paddings, make_grid, set_grid
from ..report.console import format_table
from ..report.rows import git_commit, library_versions
from ..runtime import join_job, runtime_for
from ..workers import data_workers
from .lock import own_run_dir
from .loop import EpochStats, StepContext, train_one_epoch
from .optim import build_optimizer, build_scheduler, load_scheduler_state, scheduler_state
from .preempt import Stopped, StopRequest
from .runlog import RunLogger
from .state import epoch_seed, find_resume, load_training_state, rng_state, seed_everything, set_rng_state
from .sync_bn import convert_sync_batchnorm

SUMMARY_COLUMNS = {
    "arch": "arch",
    "padding": "padding_name",
    "dataset": "dataset",
    "epochs": "epochs",
    "weights": "weights",
    "amp": "amp",
    "top1_err %": "top1_err",
    "top5_err %": "top5_err",
    "val images": "n_val_images",
    "train img/s": "train_images_per_s",
    "wall s": "wall_seconds",
}


class RunFailed(RuntimeError):
    """The run cannot go on, for a reason outside the config; one line says what is kept and what to do."""


class CheckpointWriteError(RunFailed):
    """``last.pt`` could not be written (a full disk, a quota); the previous one is intact."""


class LoaderWorkerDied(RunFailed):
    """A DataLoader worker process died (the kernel's OOM killer, most often)."""


def build_run_model(cfg: DictConfig) -> nn.Module:
    """The model of ``cfg.model`` under the configured padding (with ``grid=``: its first preset,
    the sites made switchable between them, :mod:`resnet.grid`); its meta records what the run
    trains with: the data's preprocessing (where set) and its size, for evaluation."""
    recorded = {"preprocessing": cfg.data.get("preprocessing"),
                "eval_size": cfg.data.get("val_size") or cfg.data.get("image_size")}
    grid = list(cfg.grid) if cfg.get("grid") else None
    padding = grid[0] if grid else padding_from_config(cfg)
    model = instantiate(cfg.model, padding=padding, **{k: v for k, v in recorded.items() if v})
    return make_grid(model, grid) if grid else model


def shared_run_dir(cfg: DictConfig, env: DistEnv) -> Path:
    """Rank 0's run dir for everyone: Hydra's timestamp can differ by a second between ranks."""
    run_dir = [str(cfg.run_dir)]
    if env.distributed:
        dist.broadcast_object_list(run_dir, src=0)
    return Path(run_dir[0])


def _check_config(cfg: DictConfig) -> None:
    if cfg.data.name in TEST_SETS:
        raise ConfigError(f"data={cfg.data.name} is a test set, evaluation only: train with data=imagenet, then "
                          f"python eval.py weights=<run dir>/last.pt data={cfg.data.name} data.root=...")
    check_run_config(cfg)
    if cfg.epochs <= 0:
        raise ConfigError(f"epochs must be positive, got {cfg.epochs}")
    if cfg.checkpoint_every < 0:
        raise ConfigError(f"checkpoint_every must be 0 (epoch ends only) or a step count, got {cfg.checkpoint_every}")
    if cfg.on_nonfinite not in ("stop", "skip"):
        raise ConfigError(f"unknown on_nonfinite {cfg.on_nonfinite!r}; choose stop or skip")
    for name in ("mixup", "cutmix"):
        if cfg[name] < 0:
            raise ConfigError(f"{name}={cfg[name]}: its Beta alpha must be 0 (off) or positive, e.g. {name}=0.2")
    if not 0 <= cfg.label_smoothing < 1:
        raise ConfigError(f"label_smoothing={cfg.label_smoothing} must be in [0, 1), e.g. label_smoothing=0.1")
    if (cfg.mixup or cfg.cutmix) and cfg.batch_size < 2:
        raise ConfigError(f"mixup and cutmix mix the images of a batch with each other; batch_size={cfg.batch_size} "
                          "has nothing to mix: pass batch_size=2 or more, or mixup=0 cutmix=0")
    if cfg.loss not in LOSSES:
        raise ConfigError(f"unknown loss {cfg.loss!r}; choose one of {', '.join(LOSSES)} (loss=ce)")
    if not 0 <= cfg.random_erasing <= 1:
        raise ConfigError(f"random_erasing={cfg.random_erasing} is a probability: between 0 and 1, e.g. 0.25")
    if cfg.ema_decay and not 0 < cfg.ema_decay < 1:
        raise ConfigError(f"ema_decay={cfg.ema_decay} must be in (0, 1), e.g. ema_decay=0.9999, or 0 for no EMA")
    if cfg.get("grid"):
        if cfg.get("padding") is not None:
            raise ConfigError("grid= and +padding= both choose the padding: drop +padding (the model is built "
                              "under the grid's first preset)")
        try:
            grid_paddings(list(cfg.grid))
        except ValueError as err:
            raise ConfigError(str(err).splitlines()[0]) from None
    if OmegaConf.is_missing(cfg.data, "num_classes"):
        raise ConfigError(f"data={cfg.data.name} needs data.num_classes=<the number of class folders>")


def train(cfg: DictConfig) -> dict:
    """Train as configured; return the results row (also written to results.json)."""
    _check_config(cfg)
    env = join_job(cfg)
    try:
        run_dir = shared_run_dir(cfg, env)
        # own_run_dir: a second run into it is refused here, before it writes anything; cleanup: what
        # the run holds beyond its return (loader worker processes), released however it ends
        with own_run_dir(run_dir, env), contextlib.ExitStack() as cleanup:
            return _train(cfg, env, run_dir, cleanup)
    finally:
        shutdown(env)


def make_loaders(data_cfg: DictConfig, batch_size: int, env: DistEnv, seed: int):
    from data import build_loaders  # imported here so that composing configs stays fast
    from data.gpu_decode import check_decode

    try:  # a wrong folder layout (no val/, an empty class folder, val classes != train classes)
        check_decode(data_cfg.get("decode") or "cpu", env.device)  # decode=gpu needs a CUDA device to decode on
        loaders = build_loaders(
            data_cfg.name,
            data_cfg.get("root"),
            batch_size=batch_size,
            workers=data_workers(data_cfg, env.local_world_size),
            rank=env.rank,
            world_size=env.world_size,
            seed=seed,
            image_size=data_cfg.image_size,
            crop_pct=data_cfg.crop_pct,
            interpolation=data_cfg.interpolation,
            augment=data_cfg.augment,
            val_size=data_cfg.get("val_size"),
            auto_augment=data_cfg.get("auto_augment"),
            repeated_aug=data_cfg.get("repeated_aug") or 0,
            progressive=_plain(data_cfg.get("progressive_resize")),
            decode=data_cfg.get("decode") or "cpu",
        )
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(str(err)) from None
    if loaders.num_classes != data_cfg.num_classes:
        raise ConfigError(
            f"data.num_classes={data_cfg.num_classes} but {data_cfg.name} has {loaders.num_classes} classes; "
            f"pass data.num_classes={loaders.num_classes}"
        )
    return loaders


def wrap_for_training(model: nn.Module, env: DistEnv, use_compile: bool) -> nn.Module:
    """The module the training steps call: DDP around the model, then ``torch.compile`` around
    DDP, so that dynamo splits the graph at DDP's bucket boundaries and each bucket's all-reduce
    overlaps the rest of the backward (DDP around a compiled model waits for the whole backward).
    ``gradient_as_bucket_view``: the gradients live in DDP's buckets, saving a copy and its memory.
    Checkpoints and evaluation use ``model`` itself."""
    wrapped = model
    if env.distributed:
        device_ids = [env.device.index] if env.device.type == "cuda" else None
        wrapped = nn.parallel.DistributedDataParallel(model, device_ids=device_ids, gradient_as_bucket_view=True)
    return torch.compile(wrapped) if use_compile else wrapped


def _train(cfg: DictConfig, env: DistEnv, run_dir: Path, cleanup: contextlib.ExitStack) -> dict:
    from data import Normalize
    wall_start = time.perf_counter()
    seed_everything(cfg.seed + env.rank)
    runtime = runtime_for(cfg, env)
    model = build_run_model(cfg)
    grid = list(model.grid) if hasattr(model, "grid") else None  # grid=: each step's preset drawn (resnet/grid.py)
    meta = model.meta
    loaders = cleanup.enter_context(make_loaders(cfg.data, cfg.batch_size, env, cfg.seed))
    model = runtime.place(model)
    if cfg.sync_bn and env.distributed:
        model = convert_sync_batchnorm(model, env)

    global_batch = cfg.batch_size * env.world_size
    steps_per_epoch = len(loaders.train)
    if cfg.max_steps_per_epoch:
        steps_per_epoch = min(steps_per_epoch, cfg.max_steps_per_epoch)
    optimizer = build_optimizer(cfg.optim, model, global_batch)
    scheduler = build_scheduler(cfg.sched, optimizer, steps_per_epoch, cfg.epochs)
    scaler = torch.amp.GradScaler(env.device.type) if runtime.amp_dtype is torch.float16 else None
    ema = None
    if cfg.ema_decay:
        from timm.utils import ModelEmaV3

        ema = ModelEmaV3(model, decay=cfg.ema_decay)
    loss_fn, batch_augment = _loss_and_augment(cfg, loaders.num_classes, env.device)

    start_epoch, global_step, history, partial, resume_rng = 0, 0, [], None, None
    layout = {"world_size": env.world_size, "batch_size": cfg.batch_size, **loaders.order_depends_on}
    try:  # a missing path, a weights-only file, a file that would unpickle code: one line
        resume_path = find_resume(cfg.resume, run_dir)
        state = load_training_state(resume_path, torch.device("cpu")) if resume_path is not None else None
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(str(err).splitlines()[0]) from None
    if state is not None:
        partial = state.get("epoch_partial")
        if partial is not None and state.get("layout") != layout:
            raise ConfigError(
                f"{resume_path} was saved mid-epoch with {state.get('layout')}; resuming there needs the same "
                f"(now {layout}): launch it as before, or resume from an epoch-end checkpoint"
            )
        if partial is not None and state.get("epoch_partial_ranks"):  # older files: rank 0's totals alone
            partial = state["epoch_partial_ranks"][env.rank]  # this rank's own loss sum and skipped images
        recorded = state.get("config") or {}
        for group in ("optim", "sched"):  # another optimizer's state would load, then fail at its first step
            was, now = (recorded.get(group) or {}).get("name"), cfg[group].name
            if was is not None and was != now:
                raise ConfigError(
                    f"{resume_path} was trained with {group}.name={was}, this run has {now}: pass the {group}= it "
                    "was trained with, or start over with resume=false"
                )
        try:  # another architecture, missing keys: one line naming both and the fix
            load_weights(model, state["model"], resume_path, arch=state["meta"]["arch"])  # not wrapped yet
        except CheckpointError as err:
            raise ConfigError(str(err)) from None
        try:
            optimizer.load_state_dict(state["optimizer"])
            load_scheduler_state(scheduler, state["scheduler"])
            if scaler is not None and "scaler" in state:
                scaler.load_state_dict(state["scaler"])
            if ema is not None and "ema" in state:
                load_weights(ema.module, state["ema"], f"{resume_path} (its EMA weights)")
        except (ValueError, KeyError, TypeError) as err:
            raise ConfigError(
                f"{resume_path} was saved with another optimizer or schedule ({error_line(err)}); resume with the "
                "optim= and sched= it was trained with (its config is in the checkpoint), or start over: resume=false"
            ) from None
        resume_rng = state["rng"][min(env.rank, len(state["rng"]) - 1)]
        start_epoch, global_step, history = state["epoch"], state["step"], list(state.get("history", []))
        if env.is_main:
            where = f"epoch {start_epoch}" + (f", batch {partial['batches']}" if partial else "")
            print(f"resumed from {resume_path} after {where} (step {global_step})")

    train_model = wrap_for_training(model, env, cfg.compile)

    stop = StopRequest(env).install()
    ctx = StepContext(
        runtime=runtime,
        normalize=Normalize(meta.preprocessing).to(env.device),
        augment=batch_augment,
        loss_fn=loss_fn,
        scaler=scaler,
        grad_clip=cfg.grad_clip,
        on_nonfinite=cfg.on_nonfinite,
        ema=ema,
        freeze_bn=cfg.freeze_bn,
        log_every=cfg.log_every,
        max_steps=cfg.max_steps_per_epoch,
        checkpoint_every=cfg.checkpoint_every,
        stop=stop,
        before_step=(lambda step: set_grid(model, draw(cfg.seed, step, len(grid)))) if grid else None,
    )
    config = OmegaConf.to_container(cfg, resolve=True)
    logger = RunLogger(run_dir, env.is_main, cfg.logger, config, group=meta.padding_name, resumed_epoch=start_epoch)
    checkpoint = run_dir / "last.pt"

    kept = "the previous last.pt is intact" if checkpoint.exists() else "no last.pt was written before"

    def save(epoch_done: int, step: int, epoch_partial: dict | None = None) -> None:
        """``last.pt`` on rank 0; a collective (every rank's RNG state, then whether the write
        worked), so every rank calls it, and every rank stops when it failed."""
        nonlocal kept
        rng = gather_objects(rng_state(), env)  # every rank's, on rank 0
        partials = gather_objects(epoch_partial, env) if epoch_partial is not None else None  # likewise
        failed = None
        if env.is_main:
            extra = {"scaler": scaler.state_dict()} if scaler is not None else {}
            if ema is not None:
                extra["ema"] = ema.module.state_dict()
            if partials is not None:
                extra["epoch_partial"], extra["epoch_partial_ranks"] = partials[0], partials
            if grid:
                extra["grid"] = grid  # the presets these weights were trained for; meta: the first
            try:
                save_checkpoint(
                    checkpoint, model, optimizer=optimizer.state_dict(), scheduler=scheduler_state(scheduler),
                    epoch=epoch_done, step=step, rng=rng, history=history, config=config, layout=layout, **extra,
                )
                kept = f"last.pt of epoch {epoch_done}, step {step} is intact"
            except (OSError, RuntimeError) as err:  # a full disk, a quota, a lost mount (torch's writer: RuntimeError)
                failed = (f"could not write {checkpoint} ({_write_error(err)}); {kept}: free space or pass another "
                          "hydra.run.dir, then run again with resume=true")
        failed = gather_objects(failed, env)[0]  # also the barrier: nobody runs ahead of the write
        if failed:
            raise CheckpointWriteError(failed)

    val: dict = {}
    ema_val: dict = {}
    # eval_flip: each val image and its mirror image, softmax averaged (FFCV's test-time flip)
    val_protocol = {"view": lambda images, sizes: flip_pair(images), "crops": 2} if cfg.get("eval_flip") else {}
    val_protocol["log_every"] = cfg.log_every  # a progress line every log_every batches in a log
    train_rate = 0.0
    last_epoch = cfg.epochs if not cfg.stop_after else min(cfg.epochs, start_epoch + cfg.stop_after)
    try:
        for epoch in range(start_epoch, last_epoch):
            resume = EpochStats.from_state(partial) if partial is not None and epoch == start_epoch else None
            if resume is None:
                seed_everything(epoch_seed(cfg.seed, epoch, env.rank))
            else:  # where the interrupted run was, to the generator state
                set_rng_state(resume_rng)
            steps_before = resume.steps if resume is not None else 0  # resume is updated in place
            loaders.set_epoch(epoch, start_step=resume.batches if resume is not None else 0)
            stats = train_one_epoch(
                train_model, loaders.train, optimizer, scheduler, ctx, epoch, global_step, resume=resume,
                checkpoint=lambda step, s, e=epoch: save(e, step, s.state()),
            )
            if stats.interrupted:
                break
            global_step += stats.steps - steps_before
            train_rate = stats.images_per_s
            last = epoch == last_epoch - 1
            row = {"epoch": epoch + 1, "step": global_step, "train_loss": stats.loss, "lr": stats.lr,
                   "train_images_per_s": stats.images_per_s, "skipped_images": stats.skipped_images,
                   "skipped_examples": "; ".join(stats.skipped_paths),
                   "skipped_steps": stats.skipped_steps, "empty_steps": stats.empty_steps,
                   "unused_images": stats.unused_images, "epoch_seconds": stats.seconds}
            if last or (epoch + 1) % cfg.eval_every == 0:
                if grid:  # validated under the grid's first preset, the one its meta records
                    set_grid(model, 0)
                    if ema is not None:
                        set_grid(ema.module, 0)
                val = evaluate(model, loaders.val, runtime, ctx.normalize, desc="val", **val_protocol).metrics()
                row.update({f"val_{k}": v for k, v in val.items()})
                if ema is not None:
                    ema_val = evaluate(ema.module, loaders.val, runtime, ctx.normalize, desc="val EMA",
                                       **val_protocol).metrics()
                    row.update({f"ema_{k}": v for k, v in ema_val.items()})
            history.append(row)
            logger.log_steps(stats.history, epoch)
            logger.log_epoch(row)  # before the checkpoint; a resume drops rows past the checkpoint's epoch
            if env.is_main:
                _print_epoch(row)
            save(epoch + 1, global_step)
            if stop.agreed():
                break
    except RuntimeError as err:
        stop.restore()
        if "DataLoader worker" not in str(err):  # torch's words for a dead worker (data.dataloader)
            raise
        raise LoaderWorkerDied(
            f"{str(err).splitlines()[0].rstrip('. ')}; {kept}: a worker that dies unasked was most often killed "
            "for memory: lower data.workers or batch_size, then run again with resume=true"
        ) from None
    except BaseException:
        stop.restore()
        raise
    if stop.requested:  # last.pt holds where every rank stopped
        done = stop.hand_over()
        raise Stopped(f"stopped by {stop.name}: saved {checkpoint}; {done}",
                      requeued=done.startswith(("requeued", "handed")))
    stop.restore()

    results = {
        "arch": meta.arch,
        "padding_name": meta.padding_name,
        "padding": meta.padding.as_dict(),
        "grid": grid,  # None, or the presets trained for (validated under the first)
        "preprocessing": meta.preprocessing,
        "dataset": cfg.data.name,
        "epochs": last_epoch,
        "global_batch": global_batch,
        "world_size": env.world_size,
        "amp": cfg.amp,
        "top1_err": val.get("top1_err"),
        "top5_err": val.get("top5_err"),
        "ema_decay": cfg.ema_decay,
        "ema_top1_err": ema_val.get("top1_err"),  # None without EMA
        "ema_top5_err": ema_val.get("top5_err"),
        "n_val_images": val.get("n_images"),
        "skipped_images": sum(int(r.get("skipped_images") or 0) for r in history),  # training, every epoch
        "val_skipped_images": val.get("skipped_images"),
        "train_images_per_s": train_rate,
        "val_images_per_s": val.get("images_per_s"),
        "wall_seconds": time.perf_counter() - wall_start,
        "versions": library_versions(),
        "git_commit": git_commit(),
        "run_dir": str(run_dir),
    }
    logger.finish(results, checkpoint, log_checkpoint=bool(cfg.logger.get("log_checkpoint")))
    if env.is_main:
        print(_summary(results, f"results: {results['run_dir']}/results.json"))
    return results


def _summary(results: dict, footer: str) -> str:
    """The closing table: one row for the trained weights, and one for their EMA when kept."""
    rows = [{**results, "weights": "model"}]
    if results["ema_top1_err"] is not None:
        rows.append({**results, "weights": f"EMA {results['ema_decay']:g}", "top1_err": results["ema_top1_err"],
                     "top5_err": results["ema_top5_err"]})
    table = [{heading: row[key] for heading, key in SUMMARY_COLUMNS.items()} for row in rows]
    return "\n" + format_table(table) + "\n" + footer


def _write_error(err: BaseException) -> str:
    """The operating system's reason (``No space left on device``) where the chain holds one: torch's
    zip writer reports a failed write as its own RuntimeError, raised while handling the OSError."""
    seen = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    return error_line(err)


def _plain(node):
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


LOSSES = ("ce", "bce")


def _loss_and_augment(cfg: DictConfig, num_classes: int, device: torch.device):
    """The loss, and the batch augmentation on the device (timm's RandomErasing, then timm's
    Mixup/CutMix), as the config names them.

    ``loss=ce``: cross-entropy with ``label_smoothing`` (torch's; timm's SoftTargetCrossEntropy on
    mixed targets). ``loss=bce``: timm's BinaryCrossEntropy ("ResNet strikes back"), targets binarised
    at ``bce_target_threshold`` when set."""
    mixing = bool(cfg.mixup or cfg.cutmix)
    if cfg.loss == "bce":
        from timm.loss import BinaryCrossEntropy  # timm is imported only where used: ~2 s per process

        loss_fn = BinaryCrossEntropy(smoothing=0.0 if mixing else cfg.label_smoothing,
                                     target_threshold=cfg.get("bce_target_threshold"))
    elif mixing:
        from timm.loss import SoftTargetCrossEntropy

        loss_fn = SoftTargetCrossEntropy()
    else:
        loss_fn = nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    erasing = mixup = None
    if cfg.get("random_erasing"):
        from data.augment import random_erasing

        erasing = random_erasing(cfg.random_erasing, device)
    if mixing:
        from .mixup import AnyBatchMixup

        mixup = AnyBatchMixup(mixup_alpha=cfg.mixup, cutmix_alpha=cfg.cutmix, label_smoothing=cfg.label_smoothing,
                              num_classes=num_classes)
    return loss_fn, (BatchAugment(erasing, mixup) if erasing or mixup else None)


@dataclass(frozen=True)
class BatchAugment:
    """The device-side batch augmentation: random erasing of the images, then mixup/cutmix of
    images and targets (either may be None)."""

    erasing: Callable[[torch.Tensor], torch.Tensor] | None = None
    mixup: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.erasing is not None:
            x = self.erasing(x)
        return self.mixup(x, y) if self.mixup is not None else (x, y)


def _print_epoch(row: dict) -> None:
    parts = [f"epoch {row['epoch']}", f"loss {row['train_loss']:.4f}", f"{row['train_images_per_s']:.0f} img/s"]
    if "val_top1_err" in row:
        parts += [f"val top-1 err {row['val_top1_err']:.2f}%", f"top-5 err {row['val_top5_err']:.2f}%"]
    if "ema_top1_err" in row:
        parts.append(f"EMA top-1 err {row['ema_top1_err']:.2f}%")
    if row["skipped_images"]:
        parts.append(f"skipped {row['skipped_images']} unreadable images, e.g. {row['skipped_examples']}")
    if row["empty_steps"]:
        parts.append(f"{row['empty_steps']} steps skipped on every process (one read no image; "
                     f"{row['unused_images']} readable images of those steps unused)")
    print(" | ".join(parts), flush=True)
