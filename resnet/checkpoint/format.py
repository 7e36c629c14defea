"""What every checkpoint holds (:data:`FORMAT`, the meta's entries and types), and :func:`_checked`: the checks
a dict passes, each failure one :class:`CheckpointError` line, before :mod:`.read` or :mod:`.load` returns it."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..archs import canonical_name
from .errors import SHOWN_KEYS, CheckpointError, describe, printable

# The checkpoint layout save_checkpoint writes, and the newest this code reads. A checkpoint
# without a "format" entry (written before it was recorded) has layout 1. Raise it when a
# change would make older code misread a new checkpoint; teach load_checkpoint the old ones.
FORMAT = 1
# The meta entries build_model needs, and the type of every entry that may be there
# (input_size: eval_size's name in early checkpoints).
_META_REQUIRED = ("arch", "num_classes", "padding")
_META_TYPES = {
    "arch": str,
    "num_classes": int,
    "padding": (dict, str),
    "padding_name": str,
    "preprocessing": str,
    "eval_size": int,
    "input_size": int,
    "bn_eps": (float, int),
    "in_chans": int,
    "source": str,
    "overrides": dict,
}
_MALFORMED = "the file is corrupt or was not written by save_checkpoint: pass another checkpoint"


def _checked(checkpoint: object, where: object) -> dict:
    """``checkpoint`` (a shallow copy) if it is one :func:`save_checkpoint` wrote, in a format this code reads."""
    if not isinstance(checkpoint, dict):
        raise CheckpointError(
            f"{where} holds {describe(checkpoint)}, not a checkpoint; pass a file written by "
            "resnet.checkpoint.save_checkpoint (train.py's <run dir>/last.pt)"
        )
    version = checkpoint.get("format", 1)  # refuse a layout this code does not know: a newer one would be misread
    if type(version) is not int or version < 1:
        raise CheckpointError(
            f"{where} records format {version!r}, not a layout version (an int from 1); the file is corrupt or "
            "not a checkpoint of this project: pass another checkpoint"
        )
    if version > FORMAT:
        raise CheckpointError(
            f"{where} is checkpoint format {version}, newer than the format {FORMAT} this version reads; "
            "upgrade this package (git pull, or pip install -U resnet-padding) to load it"
        )
    if "meta" not in checkpoint and checkpoint and all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
        raise CheckpointError(
            f"{where} is a bare state dict ({len(checkpoint)} tensors, no meta naming its architecture), not a "
            "checkpoint; build its model and call resnet.checkpoint.load_weights(model, state_dict, path), or "
            f"pass weights=torchvision:{where} (or timm:) to eval.py if torchvision or timm wrote it"
        )
    absent = [key for key in ("model", "meta") if key not in checkpoint]
    if absent:
        keys = ", ".join(printable(str(key)) for key in list(checkpoint)[:SHOWN_KEYS]) or "none"
        raise CheckpointError(
            f"{where} is a dict without {' and '.join(map(repr, absent))} (its keys: {keys}), not a checkpoint; "
            "pass a file written by resnet.checkpoint.save_checkpoint (train.py's <run dir>/last.pt)"
        )
    _check_state_dict(checkpoint["model"], where)
    return {**checkpoint, "meta": _checked_meta(checkpoint["meta"], where)}  # a copy: the caller's stays as it was


def _checked_meta(meta: object, where: object) -> dict:
    """``meta`` with its types checked and its architecture name made canonical."""
    if not isinstance(meta, dict):
        raise CheckpointError(f"{where} has a malformed meta ({describe(meta)}, not a dict); {_MALFORMED}")
    absent = [key for key in _META_REQUIRED if key not in meta]
    if absent:
        raise CheckpointError(f"{where} has a malformed meta (no {', '.join(absent)}); {_MALFORMED}")
    for key, types in _META_TYPES.items():
        value = meta.get(key)
        if key in meta and (not isinstance(value, types) or (isinstance(value, bool) and types is int)):
            wanted = " or ".join(t.__name__ for t in types) if isinstance(types, tuple) else types.__name__
            article = "an" if wanted[0] in "aeiou" else "a"
            raise CheckpointError(
                f"{where} has a malformed meta ({key} is {describe(value)}, not {article} {wanted}); {_MALFORMED}"
            )
    for key in ("num_classes", "eval_size", "input_size", "in_chans"):
        if key in meta and meta[key] < 1:
            raise CheckpointError(f"{where} has a malformed meta ({key} is {meta[key]}); {_MALFORMED}")
    arch = _canonical_or_none(meta["arch"])
    if arch is None:
        raise CheckpointError(
            f"{where} records architecture {meta['arch']!r}, which this version does not know (see "
            "resnet.list_archs()); upgrade this package if a newer version wrote it"
        )
    return {**meta, "arch": arch}


def _check_state_dict(state_dict: object, where: object) -> None:
    """A dict of tensors under string keys, as ``nn.Module.state_dict()`` gives."""
    if not isinstance(state_dict, Mapping):
        raise CheckpointError(f"{where} holds {describe(state_dict)} where the weights belong, not a state dict")
    for key, value in state_dict.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"{where} has {describe(value)} under {key!r} in its weights, where a tensor belongs; "
                "the file is corrupt: pass another checkpoint"
            )


def _canonical_or_none(arch: str | None) -> str | None:
    try:
        return canonical_name(arch) if isinstance(arch, str) else None
    except ValueError:
        return None
