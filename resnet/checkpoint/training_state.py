"""What a train.py checkpoint (``last.pt``) holds beyond the weights and meta of every checkpoint: one
definition of its keys, written by :class:`~resnet.job.checkpointer.Checkpointer` and checked once by
:meth:`TrainingState.read`; the few keys evaluation reads of a file that may hold weights only; and
which ``last.pt`` a ``resume=`` names (:func:`find_resume`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
from torch import nn

from .errors import CheckpointError, describe
from .read import load_checkpoint, recorded_grid
from .save import save_checkpoint

# the keys without which a file holds weights only; each with the type it must have
REQUIRED = {"optimizer": dict, "scheduler": dict, "epoch": int, "step": int}
# the keys every training checkpoint has; the others are written only where they hold something
ALWAYS = (*REQUIRED, "rng", "history", "config", "layout")


def saved_at(epochs_done: int, batches: int | None = None) -> str:
    """Where a save was taken, in the numbering the progress bar and the epoch lines use (from 1):
    ``after epoch 2`` at an epoch's end, ``after batch 27 of epoch 3`` in the middle of one."""
    return f"after epoch {epochs_done}" if batches is None else f"after batch {batches} of epoch {epochs_done + 1}"


@dataclass
class TrainingState:
    epoch: int  # epochs done (the epoch a mid-epoch save was in, less one)
    step: int  # optimizer steps done
    optimizer: dict
    scheduler: dict
    rng: list[dict]  # every rank's generator states (resnet.engine.seeding.rng_state), by rank
    history: list[dict] = field(default_factory=list)  # one row per epoch done
    config: dict | None = None  # the run's resolved config: what a resume compares
    layout: dict | None = None  # world size and batch order: what a mid-epoch resume needs again
    grid: list[str] | None = None  # the presets a grid model trains for (meta holds the first)
    scaler: dict | None = None  # fp16's GradScaler
    ema: dict | None = None  # the EMA weights
    # an epoch saved mid-way: every rank's totals of it (EpochStats.state); epoch_partial is rank
    # 0's, which older files hold alone
    epoch_partial: dict | None = None
    epoch_partial_ranks: list[dict] | None = None
    # what every weights file holds (resnet.checkpoint), filled in by read()
    model: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def save(self, path: Path, model: nn.Module) -> Path:
        """Write ``model``'s weights and meta with this state to ``path``, atomically. The
        optional keys are written only where they hold something."""
        entries = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("model", "meta")}
        return save_checkpoint(path, model, **{k: v for k, v in entries.items() if k in ALWAYS or v is not None})

    @classmethod
    def read(cls, path: Path, map_location: torch.device | str = "cpu") -> TrainingState:
        """The training state of the checkpoint at ``path``: a file :func:`resnet.checkpoint.load_checkpoint`
        reads, with the keys a resume needs, of their types. Every problem is one ``CheckpointError`` line."""
        checkpoint = load_checkpoint(path, map_location=map_location)
        missing = [k for k in REQUIRED if k not in checkpoint]
        if missing:
            raise CheckpointError(
                f"{path} is not a training checkpoint (no {', '.join(missing)}), only weights: evaluate it with "
                f"eval.py weights={path}, or resume from the last.pt of a train.py run"
            )
        for key, kind in REQUIRED.items():
            value = checkpoint[key]
            if not isinstance(value, kind) or (kind is int and (isinstance(value, bool) or value < 0)):
                raise CheckpointError(
                    f"{path} has a malformed {key} entry ({describe(value)}); the file is corrupt: pass another "
                    "checkpoint"
                )
        rng = checkpoint.get("rng")
        if not isinstance(rng, list) or not rng or not all(isinstance(r, dict) for r in rng):
            raise CheckpointError(
                f"{path} has a malformed rng entry ({describe(rng)}); the file is corrupt: pass another checkpoint"
            )
        known = {f.name for f in fields(cls)} - {"rng", "history"}
        return cls(**{k: v for k, v in checkpoint.items() if k in known},
                   rng=rng, history=list(checkpoint.get("history") or []))  # fmt: skip

    def rng_of(self, rank: int) -> dict:
        """``rank``'s generator states (the last rank's where the file has fewer)."""
        return self.rng[min(rank, len(self.rng) - 1)]

    def partial_of(self, rank: int) -> dict | None:
        """``rank``'s totals of the epoch this state was saved in, where it was saved mid-epoch."""
        if self.epoch_partial is not None and self.epoch_partial_ranks:
            return self.epoch_partial_ranks[rank]
        return self.epoch_partial  # older files: rank 0's totals alone

    def recorded(self) -> dict:
        """The config it was trained with, and the world size it ran at."""
        recorded = dict(self.config or {})
        if self.layout and "world_size" in self.layout:
            recorded["world_size"] = self.layout["world_size"]
        return recorded

    def grid_layout(self) -> tuple[list[str], str]:
        """The grid presets its weights were trained for, and their BatchNorm layout, read from the
        weights (:func:`resnet.checkpoint.recorded_grid`)."""
        return recorded_grid({"grid": self.grid, "model": self.model})

    @staticmethod
    def ema_of(checkpoint: Mapping) -> dict | None:
        """The EMA weights train.py keeps beside the weights (``ema_decay`` > 0); None where the file
        has none (weights only, or a run without EMA)."""
        ema = checkpoint.get("ema")
        return ema if isinstance(ema, dict) else None

    @staticmethod
    def validated_at(checkpoint: Mapping) -> dict:
        """The ``crop`` (px), ``crop_pct`` and ``interpolation`` the run validated at, from the config
        it recorded; each None where the file has none (weights only: a re-gridded file, an import)."""
        data = (checkpoint.get("config") or {}).get("data") or {}
        return {
            "crop": data.get("val_size") or data.get("image_size"),
            "crop_pct": data.get("crop_pct"),
            "interpolation": data.get("interpolation"),
        }


def find_resume(resume: bool | str, run_dir: Path) -> Path | None:
    """``resume``: false, true (``run_dir/last.pt`` if it exists) or a path that must exist."""
    if resume is False or resume is None or str(resume).lower() == "false":
        return None
    if resume is True or str(resume).lower() == "true":
        path = run_dir / "last.pt"
        return path if path.exists() else None
    path = Path(str(resume))
    if path.is_dir():
        path = path / "last.pt"
    if not path.is_file():
        raise FileNotFoundError(f"resume={resume}: no checkpoint there; pass a last.pt path or resume=true")
    return path
