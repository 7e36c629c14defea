"""Writing a checkpoint: :func:`save_checkpoint`, atomic (a temporary file, flushed, then renamed)
and refusing, before anything is written, an entry ``torch.load(weights_only=True)`` would refuse."""

from __future__ import annotations

import os
import uuid
from collections import OrderedDict
from pathlib import Path

import torch
from torch import nn

from .format import FORMAT
from .load import _unwrap

# What torch.load(weights_only=True) reconstructs without an allow-list. Exact types:
# a subclass (numpy.float64 is a float) is pickled as an object and would be refused.
_PLAIN_TYPES = (str, bytes, int, float, bool, type(None), torch.Size, torch.dtype, torch.device)


def save_checkpoint(path: str | os.PathLike, model: nn.Module, **extra) -> Path:
    """Write ``{"format": FORMAT, "model": state_dict, "meta": model.meta, **extra}`` to ``path`` atomically:
    a crash at any point leaves either the old file or the new one. Raises ``TypeError`` (before writing
    anything) if an entry is not plain data."""
    path = Path(path)
    model = _unwrap(model)
    meta = getattr(model, "meta", None)
    if meta is None:
        raise ValueError("model has no .meta (arch, padding, ...); build it with resnet.build_model")
    reserved = sorted({"format", "model", "meta"} & set(extra))
    if reserved:
        raise ValueError(
            f"extra entries may not be named {', '.join(reserved)}: they hold the layout version, weights and meta"
        )
    checkpoint = {"format": FORMAT, "model": model.state_dict(), "meta": meta.as_dict(), **extra}
    _check_plain(checkpoint, "checkpoint")

    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a process killed mid-write
        stale.unlink(missing_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "xb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if os.name == "posix":  # make the rename itself durable (Windows cannot open a directory for fsync)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return path


def _check_plain(obj: object, where: str) -> None:
    """Raise ``TypeError`` naming the first entry ``weights_only=True`` would refuse."""
    if type(obj) in _PLAIN_TYPES or isinstance(obj, torch.Tensor):
        return
    if type(obj) in (dict, OrderedDict):
        for key, value in obj.items():
            _check_plain(key, f"{where} key")
            _check_plain(value, f"{where}[{key!r}]")
    elif type(obj) in (list, tuple, set):
        for i, value in enumerate(obj):
            _check_plain(value, f"{where}[{i}]")
    else:
        raise TypeError(
            f"{where} is a {type(obj).__module__}.{type(obj).__qualname__}; a checkpoint holds only "
            "tensors, numbers, strings and dicts/lists/tuples of them (save a state_dict(), "
            "a float(...) or a .tolist() instead)"
        )
