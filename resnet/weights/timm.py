"""timm's ResNet family weights: its pretrained configs, the Hugging Face cache, its files.

``weights=timm:resnet50.a1_in1k`` reads the Hugging Face cache (``$HF_HUB_CACHE``) for
``timm/<name>.<tag>`` (or torch.hub's cache for weights timm publishes only by URL) and
evaluates with the pretrained config's crop, crop_pct, interpolation and normalisation;
``weights=timm:/path/model.safetensors`` reads a file and tells the architecture from its
tensors. timm's ResNet uses torchvision's module names; its ResNetV2 is renamed here.
Native preset ``symmetric``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import torch

from ..model import ResNet
from . import torchvision as tv
from .common import (
    LoadedWeights,
    OriginProtocol,
    WeightsError,
    WeightsSpec,
    WeightsUnavailable,
    arch_by_shapes,
    convert_file,
    fetch,
    first_line,
    import_state_dict,
    load_state_dict_file,
    pick_arch,
)

ARCHS = (*tv.ARCHS, "resnext101_32x4d", "resnetv2_50", "resnetv2_101")
FORMS = ("timm:resnet50.a1_in1k", "timm:/path/to/model.safetensors")
EXPECTED = "a timm model name with an optional .tag, or a file path"
# timm's file names on the Hugging Face hub, preferred first (timm/models/_hub.py).
HF_FILES = ("model.safetensors", "pytorch_model.bin")
# mean/std of timm's pretrained configs -> our preprocessing names (data.normalize).
NORMALISATION = {
    ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)): "torch",
    ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)): "tf",
}
# (timm ResNetV2 key pattern, our key): the first pattern that matches renames a key.
_V2_KEYS = (
    (r"^stem\.conv\.", "conv1."),
    (r"^stages\.(\d+)\.blocks\.(\d+)\.norm(\d)\.", lambda m: f"layer{int(m[1]) + 1}.{m[2]}.bn{m[3]}."),
    (r"^stages\.(\d+)\.blocks\.(\d+)\.downsample\.conv\.", lambda m: f"layer{int(m[1]) + 1}.{m[2]}.downsample.0."),
    (r"^stages\.(\d+)\.blocks\.(\d+)\.", lambda m: f"layer{int(m[1]) + 1}.{m[2]}."),
    (r"^norm\.", "final_bn."),
    (r"^head\.fc\.", "fc."),
)


def from_timm(state_dict: Mapping[str, torch.Tensor], arch: str, *, preprocessing: str = "torch") -> ResNet:
    """A timm ``resnet*`` / ``resnext*`` / ``wide_resnet*`` / ``resnetv2_50|101`` state dict, eval mode.

    The timm models of :data:`ARCHS`; variants with another stem or shortcut (``resnet50d``,
    BiT's ``resnetv2_50x1_bit``) are refused. ``arch`` may be a timm model name with its
    pretrained tag (``'resnet50.a1_in1k'``); ResNetV2's is renamed (:func:`to_torch_layout`).
    ``preprocessing``: the weights' normalisation (timm's pretrained config says).
    """
    name = pick_arch(arch.removeprefix("timm/").split(".")[0], ARCHS, "from_timm")
    return import_state_dict(name, to_torch_layout(state_dict), ARCHS, "from_timm", "timm", preprocessing=preprocessing)


def to_torch_layout(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """timm's ResNetV2 layout (``stages.N.blocks.M``) renamed to ours; others unchanged."""
    if not any(key.startswith("stages.") for key in state_dict):
        return dict(state_dict)
    renamed = {_rename_v2(key): value for key, value in state_dict.items()}
    if "fc.weight" in renamed and renamed["fc.weight"].ndim == 4:  # timm's head.fc is a 1x1 conv
        renamed["fc.weight"] = renamed["fc.weight"].flatten(1)
    return renamed


def _rename_v2(key: str) -> str:
    return next((re.sub(pattern, new, key, count=1) for pattern, new in _V2_KEYS if re.match(pattern, key)), key)


def is_published_name(text: str) -> bool:
    return bool(re.fullmatch(r"[a-z0-9_]+(\.[a-z0-9_]+)?", text))


def load(spec: WeightsSpec, arch: str | None, download: bool) -> LoadedWeights:
    if spec.published:
        return published(spec.name, download)
    state_dict = load_state_dict_file(spec.path)
    name = arch or arch_by_shapes(to_torch_layout(state_dict), ARCHS)
    if name is None:
        raise WeightsError(f"{spec.path} fits none of {', '.join(ARCHS)}; name the architecture with model=<arch>")
    return LoadedWeights(convert_file(spec.path, from_timm, state_dict, name), OriginProtocol())


def published(name: str, download: bool = False) -> LoadedWeights:
    """``resnet50.a1_in1k`` -> our model, with the eval protocol of timm's pretrained config."""
    from timm.models import get_pretrained_cfg

    try:
        cfg = get_pretrained_cfg(name)
    except RuntimeError as err:  # timm: "Invalid pretrained tag (...) for resnet50."
        raise WeightsError(f"timm has no weights {name!r}: {err}") from None
    if cfg is None:
        raise WeightsError(f"timm has no weights {name!r}; e.g. resnet50.a1_in1k, resnet50.tv_in1k")
    preprocessing = NORMALISATION.get((tuple(cfg.mean), tuple(cfg.std)))
    if preprocessing is None:
        raise WeightsError(
            f"timm weights {name} normalise with mean {cfg.mean}, std {cfg.std}, which is none of "
            f"{', '.join(NORMALISATION.values())} (data.normalize)"
        )
    origin = OriginProtocol(
        crop=cfg.input_size[-1], crop_pct=cfg.crop_pct, interpolation=cfg.interpolation, preprocessing=preprocessing
    )
    if cfg.hf_hub_id:
        path = _hugging_face_file(cfg.hf_hub_id, cfg.hf_hub_filename, download, f"timm weights {name}")
    elif cfg.url:
        path = fetch(cfg.url, download, f"timm weights {name}")
    else:
        raise WeightsError(f"timm publishes no file for {name}")
    return LoadedWeights(from_timm(load_state_dict_file(path), name, preprocessing=preprocessing), origin)


def _hugging_face_file(repo: str, filename: str | None, download: bool, what: str) -> Path:
    from huggingface_hub import constants, hf_hub_download, try_to_load_from_cache

    files = (filename,) if filename else HF_FILES
    for file in files:
        cached = try_to_load_from_cache(repo, file)
        if isinstance(cached, str):
            return Path(cached)
    if not download:
        raise WeightsUnavailable(
            f"{what} not found in the Hugging Face cache {constants.HF_HUB_CACHE}; pass download=true to fetch "
            f"https://huggingface.co/{repo}, or download {files[0]} and pass weights=timm:/path/to/{files[0]}"
        )
    errors = []
    for file in files:
        try:
            return Path(hf_hub_download(repo, file))
        except Exception as err:  # hub errors differ between versions; each one is reported below
            errors.append(f"{file}: {first_line(err)}")
    raise WeightsUnavailable(f"could not download {what} from https://huggingface.co/{repo} ({'; '.join(errors)})")
