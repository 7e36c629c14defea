"""Seeding and RNG snapshots (plain data, so that a checkpoint keeps them: what it holds is
:mod:`resnet.checkpoint.training_state`, as is which checkpoint a run resumes from)."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def epoch_seed(seed: int, epoch: int, rank: int) -> int:
    """Every epoch's randomness is a function of (seed, epoch, rank) alone, so a run
    resumed at an epoch boundary repeats exactly what the uninterrupted run did."""
    return seed + 1_000_003 * epoch + 7919 * rank


def rng_state() -> dict:
    """Python, numpy, torch and CUDA generator states as plain data (weights_only-safe)."""
    np_state = np.random.get_state()
    state = {
        "python": _to_plain(random.getstate()),
        "numpy": {
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(_to_tuple(state["python"]))
    n = state["numpy"]
    np.random.set_state(
        ("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _to_plain(obj):
    return [_to_plain(x) for x in obj] if isinstance(obj, tuple) else obj


def _to_tuple(obj):
    return tuple(_to_tuple(x) for x in obj) if isinstance(obj, list) else obj
