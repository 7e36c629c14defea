"""The evaluation protocol as ``eval.py`` reads it from a config (weights, crop and resize, padding, checks),
shared with every command that reads weights as it does (detection, re-gridding, export, the seed table).

Every bad value is a :class:`resnet.config.ConfigError`, one line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

from ..config import ConfigError, padding_from_config
from ..grid import use_preset_norms
from ..model import ModelMeta, with_padding
from ..runtime.distributed import DistEnv
from ..weights import LoadedWeights, OriginProtocol, WeightsError, WeightsSpec, load_weights, parse_weights
from .loader import EvalData, EvalProtocol


def weights_spec(cfg: DictConfig) -> WeightsSpec:
    """``cfg.weights`` parsed; missing, one line saying which forms to give."""
    if OmegaConf.is_missing(cfg, "weights"):
        raise ConfigError(
            "say which weights: weights=/path/to/last.pt, or any form configs/eval.yaml lists "
            "(torchvision:ResNet50_Weights.IMAGENET1K_V1, timm:resnet50.a1_in1k, keras:ResNet50 ...)"
        )
    return parse_weights(cfg.weights)


def resolve_protocol(cfg: DictConfig, meta: ModelMeta, origin: OriginProtocol, crops: int = 0) -> EvalProtocol:
    """Each setting: the config's when given, else the weights' origin's, else the default
    (``crops``: this many, not the config's).

    crop: model.meta.eval_size (224; 299 for the *_v2 models, as TensorNets).
    resize: the origin's (torchvision's 232 -> 224) while crop and crop_pct are the
    origin's too; else floor(crop / crop_pct), timm's rule (0.875: 256 -> 224, 341 -> 299).
    """
    crop = cfg.crop or origin.crop or meta.eval_size
    crop_pct = cfg.crop_pct or origin.crop_pct or cfg.data.crop_pct
    if cfg.resize:
        resize = cfg.resize
    elif origin.resize and cfg.crop is None and cfg.crop_pct is None:
        resize = origin.resize
    else:
        resize = math.floor(crop / crop_pct)
    return EvalProtocol(
        crops=crops or cfg.crops,
        crop=crop,
        resize=resize,
        interpolation=cfg.interpolation or origin.interpolation or cfg.data.interpolation,
        preprocessing=cfg.preprocessing or origin.preprocessing or meta.preprocessing,
    )


def single_crop_protocol(cfg: DictConfig, meta: ModelMeta, origin: OriginProtocol) -> EvalProtocol:
    """eval.py's protocol for these weights, single centre crop."""
    try:
        return resolve_protocol(cfg, meta, origin, crops=1)  # detection and re-gridding score centre crops
    except ValueError as err:  # crop larger than resize, an unknown interpolation
        raise ConfigError(str(err)) from None


def padded_as_configured(cfg: DictConfig, model, preset_norms: Mapping = MappingProxyType({})):
    """``model`` under ``+padding=`` / ``+padding.<site>=`` when given; sites left out keep the
    weights' own scheme. ``preset_norms``: a per-grid-BN checkpoint's BatchNorm entries by preset
    (:attr:`resnet.weights.LoadedWeights.preset_norms`), the chosen preset's put in."""
    override = padding_from_config(cfg)
    if override is None:
        return model
    try:
        padded = use_preset_norms(with_padding(model, override), preset_norms)
    except (ValueError, TypeError) as err:
        raise ConfigError(str(err)) from None
    if preset_norms and padded.meta.padding_name not in preset_norms:
        print(
            f"note: {padded.meta.padding_name} is not one of the presets these weights were trained for "
            f"({', '.join(preset_norms)}): its BatchNorm is {model.meta.padding_name}'s",
            flush=True,
        )
    return padded


def check_fit(meta: ModelMeta, data: EvalData) -> None:
    """The weights' head and input channels fit the data (a head one class larger: TF-slim's background)."""
    if meta.num_classes not in (data.num_classes, data.num_classes + 1):  # +1: TF-slim's background class
        raise ConfigError(f"the weights have {meta.num_classes} classes but the dataset has {data.num_classes}")
    if meta.in_chans != data.in_chans:
        raise ConfigError(
            f"the weights take {meta.in_chans}-channel images but the dataset has {data.in_chans} channels"
        )


def check_logger(cfg: DictConfig) -> None:
    """A W&B mode wandb would refuse fails before any work, in one line."""
    from ..report.wandb_log import wandb_mode

    if cfg.get("logger") and cfg.logger.get("wandb"):
        try:
            wandb_mode(cfg.logger)
        except ValueError as err:
            raise ConfigError(str(err)) from None


def load_once(cfg: DictConfig, spec: WeightsSpec, env: DistEnv | None = None) -> LoadedWeights:
    """``spec`` loaded as ``cfg`` says (``model.arch`` when given, ``download``, ``ema``: a
    checkpoint's EMA weights, files only: nothing to download). In a job (``env``) every process
    loads the weights; a download happens once, on rank 0, the others then read its cached copy
    (or raise rank 0's error instead of waiting forever)."""
    arch, download = cfg.model.arch if cfg.get("model") else None, cfg.download
    if env is None or cfg.ema or not (env.distributed and download and spec.published):
        return load_weights(spec, arch, download, ema=cfg.ema)
    loaded, error = None, [None]
    if env.is_main:
        try:
            loaded = load_weights(spec, arch, download=True)
        except WeightsError as err:
            error = [str(err)]
    dist.broadcast_object_list(error, src=0)
    if error[0] is not None:
        raise WeightsError(error[0])
    return loaded if env.is_main else load_weights(spec, arch, download=False)
