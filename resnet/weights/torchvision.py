"""torchvision's ResNet / ResNeXt / Wide ResNet weights: its enums, its hub cache, its files.

``weights=torchvision:ResNet50_Weights.IMAGENET1K_V1`` reads torch.hub's cache
(``$TORCH_HOME/hub/checkpoints/<file>``, the file name torchvision's URL ends with) and
evaluates with the enum's own transform; ``weights=torchvision:/path/state_dict.pth`` reads
a file and tells the architecture from its tensors. Keys already match ours. Native preset
``symmetric`` (torch pads every conv and pool symmetrically), preprocessing ``torch``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping

import torch

from ..model import ResNet
from .common import (
    LoadedWeights,
    OriginProtocol,
    WeightsError,
    WeightsSpec,
    arch_by_shapes,
    convert_file,
    fetch,
    import_state_dict,
    load_state_dict_file,
    pick_arch,
)

ARCHS = (
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "resnext50_32x4d",
    "resnext101_32x8d",
    "resnext101_64x4d",
    "wide_resnet50_2",
    "wide_resnet101_2",
)
FORMS = ("torchvision:ResNet50_Weights.IMAGENET1K_V1", "torchvision:/path/to/state_dict.pth")
EXPECTED = "a weights enum <Model>_Weights.<TAG> or a file path"


def from_torchvision(state_dict: Mapping[str, torch.Tensor], arch: str) -> ResNet:
    """A torchvision state dict -> our ``arch``, eval mode; ``num_classes`` read from ``fc.weight``."""
    name = pick_arch(arch, ARCHS, "from_torchvision")
    return import_state_dict(name, state_dict, ARCHS, "from_torchvision", "torchvision")


def is_published_name(text: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9_]+_Weights\.[A-Za-z0-9_]+", text))


def load(spec: WeightsSpec, arch: str | None, download: bool) -> LoadedWeights:
    if spec.published:
        return published(spec.name, download)
    state_dict = load_state_dict_file(spec.path)
    name = arch or arch_by_shapes(state_dict, ARCHS)
    if name is None:
        raise WeightsError(f"{spec.path} fits none of {', '.join(ARCHS)}; name the architecture with model=<arch>")
    return LoadedWeights(convert_file(spec.path, from_torchvision, state_dict, name), OriginProtocol())


def published(name: str, download: bool = False) -> LoadedWeights:
    """``ResNet50_Weights.IMAGENET1K_V1`` -> our model, with the enum's eval protocol."""
    from torchvision.models import get_weight

    try:
        weights = get_weight(name)
    except (KeyError, ValueError, AttributeError):
        raise WeightsError(
            f"torchvision has no weights {name!r}; e.g. ResNet50_Weights.IMAGENET1K_V1, "
            "ResNeXt50_32X4D_Weights.IMAGENET1K_V2, Wide_ResNet50_2_Weights.DEFAULT"
        ) from None
    arch = type(weights).__name__.removesuffix("_Weights").lower()  # ResNeXt50_32X4D -> resnext50_32x4d
    path = fetch(weights.url, download, f"torchvision weights {name}")
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
    return LoadedWeights(from_torchvision(load_state_dict_file(path), arch), origin)
