"""Published weights on disk: where each hub keeps them, fetched only when asked.

Nothing here touches the network unless ``download=True``. Without it a file
that is not in its hub's cache raises :class:`WeightsUnavailable` with one line
saying where the file goes and how to fetch it; with it, a failed download
raises the same, naming the URL.

* torchvision: ``torch.hub``'s cache, ``$TORCH_HOME/hub/checkpoints/<file>``
  (default ``~/.cache/torch``), the file name that torchvision's URL ends with;
* timm: the Hugging Face cache (``$HF_HUB_CACHE``) for ``timm/<name>.<tag>``, or
  torch.hub's cache for weights timm publishes only by URL;
* Keras: ``$KERAS_HOME/models/<name>_weights_tf_dim_ordering_tf_kernels.h5``
  (default ``~/.keras``), where ``keras.applications`` keeps them.
"""

from __future__ import annotations

import inspect
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch

KERAS_URL = "https://storage.googleapis.com/tensorflow/keras-applications/resnet/"
# timm's file names on the Hugging Face hub, preferred first (timm/models/_hub.py).
HF_FILES = ("model.safetensors", "pytorch_model.bin")
# mean/std of timm's pretrained configs -> our preprocessing names (data.normalize).
TIMM_NORMALISATION = {
    ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)): "torch",
    ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)): "tf",
}


class WeightsError(ValueError):
    """A weights= value that cannot be used; the message is one line saying what to do."""


class WeightsUnavailable(WeightsError):
    """The weights are not on disk (and download was not asked for, or failed)."""


@dataclass(frozen=True)
class OriginProtocol:
    """How the weights' publisher evaluates them; None where it says nothing."""

    crop: int | None = None
    resize: int | None = None
    crop_pct: float | None = None
    interpolation: str | None = None
    preprocessing: str | None = None


def fetch(url: str, file: Path, download: bool, what: str) -> Path:
    """``file`` if it is there; else download ``url`` to it when allowed, else say how."""
    if file.is_file():
        return file
    if not download:
        raise WeightsUnavailable(
            f"{what} not found at {file}; pass download=true to fetch {url}, or put that file there"
        )
    file.parent.mkdir(parents=True, exist_ok=True)
    hash_prefix = re.search(r"-([a-f0-9]{6,})\.", file.name)  # torch.hub's convention: name-<sha256 prefix>.pth
    try:
        torch.hub.download_url_to_file(url, str(file), hash_prefix=hash_prefix[1] if hash_prefix else None)
    except (OSError, RuntimeError) as err:  # URLError is an OSError; a hash mismatch a RuntimeError
        raise WeightsUnavailable(
            f"could not download {what} from {url} ({_first_line(err)}); fetch it elsewhere and put it at {file}"
        ) from None
    return file


def torch_hub_file(url: str) -> Path:
    """Where ``torch.hub.load_state_dict_from_url`` caches ``url``."""
    return Path(torch.hub.get_dir()) / "checkpoints" / Path(urlparse(url).path).name


def torchvision_weights(name: str, download: bool = False) -> tuple[dict[str, torch.Tensor], str, OriginProtocol]:
    """``ResNet50_Weights.IMAGENET1K_V1`` -> (state dict, our arch name, its eval protocol)."""
    from torchvision.models import get_weight

    try:
        weights = get_weight(name)
    except (KeyError, ValueError, AttributeError):
        raise WeightsError(
            f"torchvision has no weights {name!r}; e.g. ResNet50_Weights.IMAGENET1K_V1, "
            "ResNeXt50_32X4D_Weights.IMAGENET1K_V2, Wide_ResNet50_2_Weights.DEFAULT"
        ) from None
    arch = type(weights).__name__.removesuffix("_Weights").lower()  # ResNeXt50_32X4D -> resnext50_32x4d
    path = fetch(weights.url, torch_hub_file(weights.url), download, f"torchvision weights {name}")
    # weights.transforms is partial(ImageClassification, crop_size=224, ...): its keywords
    # over the class's own defaults (resize_size=256, bilinear) are the published protocol.
    defaults = inspect.signature(weights.transforms.func).parameters
    transform = {key: p.default for key, p in defaults.items()} | weights.transforms.keywords
    origin = OriginProtocol(
        crop=transform["crop_size"],
        resize=transform["resize_size"],
        interpolation=transform["interpolation"].value,
        preprocessing="torch",
    )
    return load_state_dict_file(path), arch, origin


def timm_weights(name: str, download: bool = False) -> tuple[dict[str, torch.Tensor], OriginProtocol]:
    """``resnet50.a1_in1k`` -> (state dict, its eval protocol) from timm's pretrained config."""
    from timm.models import get_pretrained_cfg

    try:
        cfg = get_pretrained_cfg(name)
    except RuntimeError as err:  # timm: "Invalid pretrained tag (...) for resnet50."
        raise WeightsError(f"timm has no weights {name!r}: {err}") from None
    if cfg is None:
        raise WeightsError(f"timm has no weights {name!r}; e.g. resnet50.a1_in1k, resnet50.tv_in1k")
    preprocessing = TIMM_NORMALISATION.get((tuple(cfg.mean), tuple(cfg.std)))
    if preprocessing is None:
        raise WeightsError(
            f"timm weights {name} normalise with mean {cfg.mean}, std {cfg.std}, which is none of "
            f"{', '.join(TIMM_NORMALISATION.values())} (data.normalize)"
        )
    origin = OriginProtocol(
        crop=cfg.input_size[-1], crop_pct=cfg.crop_pct, interpolation=cfg.interpolation, preprocessing=preprocessing
    )
    if cfg.hf_hub_id:
        path = _hugging_face_file(cfg.hf_hub_id, cfg.hf_hub_filename, download, f"timm weights {name}")
    elif cfg.url:
        path = fetch(cfg.url, torch_hub_file(cfg.url), download, f"timm weights {name}")
    else:
        raise WeightsError(f"timm publishes no file for {name}")
    return load_state_dict_file(path), origin


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
            errors.append(f"{file}: {_first_line(err)}")
    raise WeightsUnavailable(f"could not download {what} from https://huggingface.co/{repo} ({'; '.join(errors)})")


def keras_file(name: str, download: bool = False) -> Path:
    """``ResNet50V2`` -> the ``keras.applications`` weights file (with the top), from Keras's cache."""
    file_name = f"{name.lower()}_weights_tf_dim_ordering_tf_kernels.h5"  # keras/src/applications/resnet.py
    cache = Path(os.environ.get("KERAS_HOME", "~/.keras")).expanduser() / "models"
    return fetch(KERAS_URL + file_name, cache / file_name, download, f"Keras {name} weights")


def load_state_dict_file(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """A state dict from ``.safetensors`` or a torch file, loaded without running pickled code."""
    path = Path(path)
    if not path.is_file():
        raise WeightsUnavailable(f"no weights file at {path}")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(path)
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "meta" in state and "model" in state:
        raise WeightsError(f"{path} is one of our checkpoints; pass it as weights={path} (no source prefix)")
    if not (isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values())):
        raise WeightsError(f"{path} does not hold a state dict (a dict of tensors)")
    return state


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
