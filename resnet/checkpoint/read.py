"""Reading a file: :func:`read_torch_file` (any torch file, without running pickled code) and
:func:`load_checkpoint` (a checkpoint, checked by :mod:`.format`); :func:`recorded_grid`, what a
checkpoint read says of its grid."""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch

from ..grid import grid_bn_of
from .errors import CheckpointError, check_before_reading, unreadable
from .format import _checked


def read_torch_file(path: str | os.PathLike, map_location: str | torch.device = "cpu", mmap: bool = False) -> object:
    """``torch.load(path, weights_only=True)``, so nothing in the file runs; any failure is one
    :class:`CheckpointError` line saying what the file is and what to do (:mod:`resnet.checkpoint.errors`).
    ``mmap``: the tensors are mapped, not read, until used (a reader of the config alone reads kilobytes)."""
    if isinstance(path, (str, os.PathLike)):
        check_before_reading(path)
    try:
        return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as err:  # on corrupt input: RuntimeError, EOFError, UnpicklingError, KeyError, ...
        raise CheckpointError(unreadable(path, err)) from None


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu", mmap: bool = False) -> dict:
    """A checkpoint :func:`save_checkpoint` wrote, read without running pickled code and checked
    (:mod:`.format`); ``checkpoint["meta"]["arch"]`` is the canonical name, equal to a model's ``meta.arch``."""
    return _checked(read_torch_file(path, map_location, mmap), path)


def recorded_grid(checkpoint: Mapping) -> tuple[list[str], str]:
    """A train.py checkpoint's grid: the presets its weights were trained for (``grid=[...]``; [] for
    none) and what its BatchNorms keep per preset (:data:`resnet.grid.GRID_BN`), read from the
    weights themselves. The one reading of it, for eval and resume."""
    presets = list(checkpoint.get("grid") or [])
    return presets, grid_bn_of(checkpoint.get("model") or {}) if presets else "shared"
