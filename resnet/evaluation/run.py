"""The body of ``eval.py``: load the weights, choose the protocol, evaluate, append one row."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torch import nn
from tqdm import tqdm

from ..engine.distributed import DistEnv, all_reduce_sum, init_distributed, shutdown
from ..engine.loop import StepContext, topk_correct
from ..engine.run import AMP_DTYPES, ConfigError, check_data_config
from ..engine.runlog import format_table, git_commit
from ..model import ModelMeta
from ..padding import Padding, resolve_padding
from .hub import OriginProtocol, WeightsError
from .loader import EvalData, EvalProtocol, PaddedBatch, build_eval_loader, eval_dir, resize_shorter
from .results import append_row
from .sources import LoadedWeights, WeightsSpec, load_weights, parse_weights, with_padding
from .tencrop import average_crops, centre_crop, ten_crop

REPO_ROOT = Path(__file__).resolve().parents[2]  # relative results files live here, whatever the cwd


def evaluate_weights(cfg: DictConfig) -> dict:
    """Evaluate ``cfg.weights`` as configured (``configs/eval.yaml``); rank 0 appends the
    results row to ``cfg.results_file`` and prints the summary. Returns the row."""
    spec = parse_weights(cfg.weights)
    _check_config(cfg)
    env = init_distributed(cfg.device)
    try:
        return _evaluate(cfg, spec, env)
    finally:
        shutdown(env)


def padding_override(cfg: DictConfig) -> dict | None:
    """``+padding=<preset>`` / ``+padding.<site>=<scheme>`` add a ``padding`` node; without
    one the weights' native padding applies."""
    node = cfg.get("padding")
    return None if node is None else OmegaConf.to_container(node, resolve=True)


def _check_config(cfg: DictConfig) -> None:
    if cfg.batch_size <= 0:
        raise ConfigError(f"batch_size must be positive, got {cfg.batch_size}")
    if cfg.crops not in (1, 10):
        raise ConfigError(f"crops must be 1 (centre crop) or 10 (corners + centre and flips), got {cfg.crops}")
    if cfg.amp not in AMP_DTYPES:
        raise ConfigError(f"unknown amp {cfg.amp!r}; choose one of {', '.join(AMP_DTYPES)}")
    try:
        resolve_padding(padding_override(cfg))  # unknown preset / site / scheme fails before any loading
    except (ValueError, TypeError) as err:
        raise ConfigError(str(err)) from None
    check_data_config(cfg.data)
    if cfg.data.name != "fashion_mnist":
        try:
            eval_dir(cfg.data.name, cfg.data.root)  # a wrong data.root fails before any download
        except FileNotFoundError as err:
            raise ConfigError(str(err)) from None


def resolve_protocol(cfg: DictConfig, meta: ModelMeta, origin: OriginProtocol) -> EvalProtocol:
    """Each setting: the config's when given, else the weights' origin's, else the default.

    crop: model.meta.input_size (224; 299 for the *_v2 models, as TensorNets).
    resize: the origin's (torchvision's 232 -> 224) while crop and crop_pct are the
    origin's too; else floor(crop / crop_pct), timm's rule (0.875: 256 -> 224, 341 -> 299).
    """
    crop = cfg.crop or origin.crop or meta.input_size
    crop_pct = cfg.crop_pct or origin.crop_pct or cfg.data.crop_pct
    if cfg.resize:
        resize = cfg.resize
    elif origin.resize and cfg.crop is None and cfg.crop_pct is None:
        resize = origin.resize
    else:
        resize = math.floor(crop / crop_pct)
    return EvalProtocol(
        crops=cfg.crops,
        crop=crop,
        resize=resize,
        interpolation=cfg.interpolation or origin.interpolation or cfg.data.interpolation,
        preprocessing=cfg.preprocessing or origin.preprocessing or meta.preprocessing,
    )


def _evaluate(cfg: DictConfig, spec: WeightsSpec, env: DistEnv) -> dict:
    from data import Normalize  # imported here so that composing configs stays fast

    arch = cfg.model.arch if cfg.get("model") else None
    loaded = _load_once(spec, arch, cfg.download, env)
    model, trained_padding = loaded.model, loaded.model.meta.padding_name
    override = padding_override(cfg)
    if override is not None:  # sites left out keep the weights' own scheme
        model = with_padding(model, resolve_padding(override, native=Padding(**model.meta.padding)))
    meta = model.meta
    protocol = resolve_protocol(cfg, meta, loaded.origin)
    # batch_size counts network inputs, so that one setting fits memory in both protocols.
    images_per_step = max(cfg.batch_size // protocol.crops, 1)
    try:  # a wrong folder layout (an empty class folder, val classes != train classes)
        data = build_eval_loader(
            cfg.data.name, cfg.data.get("root"), protocol, images_per_step, cfg.data.workers, env.rank, env.world_size
        )
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(str(err)) from None
    _check_fit(model, data)

    channels_last = env.device.type == "cuda" if cfg.channels_last == "auto" else bool(cfg.channels_last)
    if env.device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    model = model.to(env.device, memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    ctx = StepContext(
        env=env,
        normalize=Normalize(protocol.preprocessing).to(env.device),
        amp_dtype=AMP_DTYPES[cfg.amp],
        channels_last=channels_last,
    )
    result = evaluate_protocol(model, data, protocol, ctx)
    row = {
        "arch": meta.arch,
        "weights": spec.text,
        "weights_source": spec.source,
        "trained_padding": trained_padding,
        "padding_name": meta.padding_name,
        "padding": meta.padding,
        "input_size": protocol.crop,
        "resize": protocol.resize,
        "crop": protocol.crop,
        "interpolation": protocol.interpolation,
        "preprocessing": protocol.preprocessing,
        "crops": protocol.crops,
        "dataset": cfg.data.name,
        "top1_err": result["top1_err"],
        "top5_err": result["top5_err"],
        "n_images": result["n_images"],
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
    }
    if env.is_main:
        path = append_row(results_path(cfg.results_file), row)
        print(summary(row, result, path), flush=True)
    return row


def _load_once(spec: WeightsSpec, arch: str | None, download: bool, env: DistEnv) -> LoadedWeights:
    """Every process loads the weights; a download happens once, on rank 0, the others then
    read its cached copy (or raise rank 0's error instead of waiting forever)."""
    if not (env.distributed and download and spec.published):
        return _load(spec, arch, download)
    loaded, error = None, [None]
    if env.is_main:
        try:
            loaded = _load(spec, arch, download=True)
        except WeightsError as err:
            error = [str(err)]
    dist.broadcast_object_list(error, src=0)
    if error[0] is not None:
        raise WeightsError(error[0])
    return loaded if env.is_main else _load(spec, arch, download=False)


def _load(spec: WeightsSpec, arch: str | None, download: bool) -> LoadedWeights:
    try:
        return load_weights(spec, arch, download)
    except WeightsError:
        raise
    except ValueError as err:  # e.g. a file that would unpickle code, refused by load_checkpoint
        raise WeightsError(f"weights={spec.text}: {str(err).splitlines()[0]}") from None


def _check_fit(model: nn.Module, data: EvalData) -> None:
    classes, in_chans = model.meta.num_classes, model.conv1.in_channels
    if classes not in (data.num_classes, data.num_classes + 1):  # +1: TF-slim's background class
        raise ConfigError(f"the weights have {classes} classes but the dataset has {data.num_classes}")
    if in_chans != data.in_chans:
        raise ConfigError(f"the weights take {in_chans}-channel images but the dataset has {data.in_chans} channels")


def network_input(
    images: torch.Tensor, protocol: EvalProtocol, sizes: torch.Tensor | None = None, resize: int | None = None
) -> torch.Tensor:
    """A batch from the loader -> [N * crops, C, crop, crop], the crops of an image adjacent.

    ``resize``: the shorter side to resize to first, for data the loader did not resize.
    """
    if resize is not None:
        images = resize_shorter(images, resize, protocol.interpolation)
    if protocol.crops == 1:
        return centre_crop(images, protocol.crop)  # a no-op where the loader already cropped
    return ten_crop(images, protocol.crop, sizes).flatten(0, 1)


def count_hits(scores: torch.Tensor, labels: torch.Tensor, num_classes: int) -> list[int]:
    """Top-1 and top-5 hits; a head with one class more than the data (TF-slim's 1001)
    has its first class, background, left out."""
    if scores.shape[1] == num_classes + 1:
        scores = scores[:, 1:]
    return topk_correct(scores, labels, (1, 5))


def error_percent(hits: float, n: int) -> float:
    return 100.0 * (1.0 - hits / n)


@torch.no_grad()
def evaluate_protocol(model: nn.Module, data: EvalData, protocol: EvalProtocol, ctx: StepContext) -> dict:
    """Top-1 / top-5 error (%) of ``model`` over the whole split, every image counted once
    over all processes (sums all-reduced), one forward per batch of ``N * crops`` crops."""
    model.eval()
    sums = torch.zeros(4, dtype=torch.float64, device=ctx.env.device)  # top1 hits, top5 hits, images, skipped
    skipped_paths: list[str] = []
    start = time.perf_counter()
    desc = "eval 10-crop" if protocol.crops == 10 else "eval"
    for batch in tqdm(data.loader, desc=desc, disable=not (ctx.progress and ctx.env.is_main), leave=False):
        images, labels, skipped = batch[0], batch[1], int(batch[2])
        sums[3] += skipped
        skipped_paths += list(batch[3])[: max(5 - len(skipped_paths), 0)]  # the first few, for the report
        if labels.numel() == 0:  # every image of the batch was unreadable
            continue
        non_blocking = ctx.env.device.type == "cuda"
        images = images.to(ctx.env.device, non_blocking=non_blocking)
        labels = labels.to(ctx.env.device, non_blocking=non_blocking)
        sizes = batch.sizes if isinstance(batch, PaddedBatch) else None
        x = ctx.normalize(network_input(images, protocol, sizes, data.device_resize))
        if ctx.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with ctx.autocast():
            logits = model(x)
        top1, top5 = count_hits(average_crops(logits.float(), protocol.crops), labels, data.num_classes)
        sums[0] += top1
        sums[1] += top5
        sums[2] += labels.shape[0]
    sums = all_reduce_sum(sums, ctx.env)
    n, skipped = int(sums[2].item()), int(sums[3].item())
    if skipped and ctx.env.is_main:
        print(f"skipped {skipped} unreadable image(s), e.g. {'; '.join(skipped_paths)}", flush=True)
    if n == 0:
        raise RuntimeError(f"no image of the {data.size} could be evaluated")
    seconds = time.perf_counter() - start
    return {
        "top1_err": error_percent(sums[0].item(), n),
        "top5_err": error_percent(sums[1].item(), n),
        "n_images": n,
        "skipped_images": skipped,
        "images_per_s": n / seconds if seconds else 0.0,
    }


def results_path(value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else REPO_ROOT / path


def summary(row: dict, result: dict, path: Path) -> str:
    table = {
        "arch": row["arch"],
        "weights": row["weights"],
        "trained": row["trained_padding"],
        "padding": row["padding_name"],
        "protocol": f"{row['resize']}->{row['crop']} {row['interpolation']} {row['preprocessing']}",
        "crops": row["crops"],
        "dataset": row["dataset"],
        "top1_err %": row["top1_err"],
        "top5_err %": row["top5_err"],
        "images": row["n_images"],
        "img/s": result["images_per_s"],
    }
    return "\n" + format_table([table]) + f"\nappended to {path}"
