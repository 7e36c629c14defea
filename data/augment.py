"""The recipes' extra augmentation, from the libraries that define it.

* :func:`auto_augment`: a policy on each training crop, after the random-resized crop and flip:
  ``ta_wide``, torchvision's ``TrivialAugmentWide`` (the V2 recipe), or timm's RandAugment from
  its string (``rand-m6-mstd0.5-inc1``: "ResNet strikes back" A3); :class:`Augmented` runs both.
* :func:`random_erasing`: timm's ``RandomErasing`` on the normalised batch, on the device.
* :func:`train_size`: progressive resizing, FFCV's rule.

Reproducibility: a sample's draws come from its seed alone (:class:`data.samplers.EpochSampler`
seeds torch's generator per sample). timm's RandAugment also draws from Python's ``random`` and
numpy's global generator; :class:`Augmented` seeds both from torch's draw for that sample and puts
them back after, so the policy is as reproducible as the crop, in workers and in the main process.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import torch

POLICIES = ("ta_wide", "rand-m<magnitude>[-mstd<std>][-inc1] (timm's RandAugment string)")


def auto_augment(name: str, size: int, interpolation: str = "bilinear") -> Callable[[torch.Tensor], torch.Tensor]:
    """The policy ``name`` (see :data:`POLICIES`) for crops of side ``size``."""
    if name == "ta_wide":
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms.v2 import TrivialAugmentWide

        return TrivialAugmentWide(interpolation=InterpolationMode(interpolation))
    if name.startswith("rand-"):
        from timm.data.auto_augment import rand_augment_transform
        from timm.data.transforms import str_to_pil_interp
        from torchvision.transforms.v2.functional import pil_to_tensor, to_pil_image

        # PIL's filter, as timm's create_transform passes it: PIL refuses the name ("Unknown resampling
        # filter (bicubic)") in every rotate, shear and translate, and each such image was skipped
        hparams = {
            "translate_const": int(size * 0.45),
            "img_mean": (124, 116, 104),  # timm's, for ImageNet
            "interpolation": str_to_pil_interp(interpolation),
        }
        try:
            policy = rand_augment_transform(name, hparams)
        except (AssertionError, ValueError, KeyError) as err:
            raise ValueError(
                f"data.auto_augment={name} is not a RandAugment string timm reads ({err}); "
                "e.g. data.auto_augment=rand-m6-mstd0.5-inc1"
            ) from None
        return lambda image: pil_to_tensor(policy(to_pil_image(image)))
    raise ValueError(f"unknown data.auto_augment={name!r}; choose {' or '.join(POLICIES)}, or null for none")


class Augmented:
    """``crop`` (file bytes -> uint8 [3, H, W]) then ``policy`` on the crop."""

    def __init__(self, crop, policy_name: str):
        self.crop = crop
        self.policy_name = policy_name
        self.policy = auto_augment(policy_name, crop.size, crop.interpolation)

    @property
    def size(self) -> int:
        return self.crop.size

    def set_size(self, size: int) -> None:
        self.crop.set_size(size)

    def share_size(self) -> None:
        self.crop.share_size()

    def __call__(self, data: bytes) -> torch.Tensor:
        image = self.crop(data)
        seed = int(torch.randint(2**31 - 1, ()))  # from the sample's own seed
        py_state, np_state = random.getstate(), np.random.get_state()
        random.seed(seed)
        np.random.seed(seed)
        try:
            return self.policy(image)
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)

    def __repr__(self) -> str:
        return f"{self.crop!r} + auto_augment({self.policy_name})"


def random_erasing(probability: float, device: torch.device):
    """timm's ``RandomErasing`` for normalised batches on ``device`` (mode ``pixel``: normal noise)."""
    from timm.data.random_erasing import RandomErasing

    return RandomErasing(probability=probability, mode="pixel", device=str(device))


def train_size(epoch: int, start_size: int, end_size: int, start_epoch: int, end_epoch: int, step: int = 32) -> int:
    """The training crop of ``epoch`` (0-based) under progressive resizing: ``start_size`` up to
    ``start_epoch``, ``end_size`` from ``end_epoch`` on, and in between the linear interpolation
    rounded to a multiple of ``step`` (FFCV's ResNet-50 schedule: 160 -> 192 px)."""
    if epoch <= start_epoch:
        return start_size
    if epoch >= end_epoch:
        return end_size
    size = start_size + (end_size - start_size) * (epoch - start_epoch) / (end_epoch - start_epoch)
    return int(round(size / step)) * step
