"""A dataset of whole-batch tensors: the built-in data, sliced a batch at a time.

The DataLoader calls ``__getitems__`` with a batch's indices, so a batch is one index op on a uint8
tensor and the training augmentation one batched op (:func:`data.transforms.random_crop_flip`).
Use it with ``collate_fn=data.batch.pass_batch``.
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

from .batch import Batch
from .transforms import random_crop_flip


class TensorImages(Dataset):
    """``images`` uint8 [N, C, H, W], ``labels`` int64 [N]; ``crop_padding`` > 0 turns on the
    random crop + flip (training), 0 returns the images as they are (evaluation)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, crop_padding: int = 0):
        if images.dtype != torch.uint8 or images.dim() != 4 or len(images) != len(labels):
            raise ValueError(
                f"expected uint8 [N, C, H, W] images and N labels, got {images.dtype} "
                f"{tuple(images.shape)} and {tuple(labels.shape)}"
            )
        self.images = images
        self.labels = labels
        self.crop_padding = crop_padding

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        batch = self.__getitems__([index])
        return batch.images[0], int(batch.labels[0])

    def __getitems__(self, indices: list[int]) -> Batch:
        index = torch.as_tensor(indices, dtype=torch.long)
        images = self.images.index_select(0, index)  # much faster than images[index] on uint8
        if self.crop_padding:
            images = random_crop_flip(images, self.crop_padding)
        return Batch(images, self.labels.index_select(0, index))
