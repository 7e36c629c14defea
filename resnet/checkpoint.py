"""Checkpoints that carry their padding scheme and load without running pickled code.

A checkpoint is a plain dict: ``model`` (the state dict), ``meta`` (``model.meta``:
architecture, padding per site, preprocessing, ...) and whatever the caller adds
(optimizer state, epoch, ...). Only plain containers, tensors, numbers and strings
are written, so :func:`load_checkpoint` can use ``torch.load(weights_only=True)``,
which refuses any pickled object instead of constructing it.

State-dict keys never depend on the padding (``resnet.blocks``), so weights trained
under one scheme run under another: ``resnet.with_padding(load_model(path), "symmetric")``.
"""

from __future__ import annotations

import os
import pickle
import uuid
from collections import OrderedDict
from pathlib import Path

import torch
from torch import nn

from .model import ResNet, build_model

# What torch.load(weights_only=True) reconstructs without an allow-list. Exact types:
# a subclass (numpy.float64 is a float) is pickled as an object and would be refused.
_PLAIN_TYPES = (str, bytes, int, float, bool, type(None), torch.Size, torch.dtype, torch.device)
# Meta fields that are Arch fields too: the recorded value wins over the table row (a run's
# preprocessing, an importer's BN epsilon, a row changed since); build_model keeps what differs.
_ARCH_FIELDS = ("preprocessing", "eval_size", "bn_eps")


def save_checkpoint(path: str | os.PathLike, model: nn.Module, **extra) -> Path:
    """Write ``{"model": state_dict, "meta": model.meta, **extra}`` to ``path`` atomically.

    The dict goes to a temporary file next to ``path``, is flushed to disk, then renamed
    over ``path``: a crash at any point leaves either the old file or the new one.
    Raises ``TypeError`` (before writing anything) if an entry is not plain data.
    """
    path = Path(path)
    model = _unwrap(model)
    meta = getattr(model, "meta", None)
    if meta is None:
        raise ValueError("model has no .meta (arch, padding, ...); build it with resnet.build_model")
    reserved = sorted({"model", "meta"} & set(extra))
    if reserved:
        raise ValueError(f"extra entries may not be named {', '.join(reserved)}: they hold the weights and meta")
    checkpoint = {"model": model.state_dict(), "meta": meta.as_dict(), **extra}
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
    _fsync_dir(path.parent)  # make the rename itself durable
    return path


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint with ``torch.load(weights_only=True)``; refuse pickled objects.

    A file that would construct arbitrary objects (and so could run code) is rejected
    before anything in it is executed.
    """
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        raise ValueError(
            f"refusing to load {path}: it contains pickled objects, not only tensors and plain data, "
            "and unpickling them could run arbitrary code. If you trust the file, re-save its "
            "weights with resnet.checkpoint.save_checkpoint."
            f"\n(torch.load said: {str(err).splitlines()[0]})"
        ) from None
    if not isinstance(checkpoint, dict):
        raise ValueError(f"{path} holds a {type(checkpoint).__name__}, not a checkpoint dict")
    return checkpoint


def load_model(path: str | os.PathLike, input_size: int | tuple[int, int] | None = None) -> ResNet:
    """Rebuild the recorded model under its recorded padding, load its weights, eval mode.

    ``input_size`` freezes every pad for that size (see ``build_model``). To run the same
    weights under another scheme: ``resnet.with_padding(load_model(path), scheme)``.
    """
    return model_from_checkpoint(load_checkpoint(path), input_size, where=path)


def model_from_checkpoint(
    checkpoint: dict, input_size: int | tuple[int, int] | None = None, where: object = "the checkpoint"
) -> ResNet:
    """The model a checkpoint dict (:func:`load_checkpoint`) records, in eval mode."""
    if "model" not in checkpoint or "meta" not in checkpoint:
        raise ValueError(f"{where} has no 'model' and 'meta' entries; was it written by save_checkpoint?")
    recorded, state = checkpoint["meta"], checkpoint["model"]
    if "eval_size" not in recorded and "input_size" in recorded:  # the name before eval_size
        recorded = {**recorded, "eval_size": recorded["input_size"]}
    overrides = {**recorded.get("overrides", {}), **{k: recorded[k] for k in _ARCH_FIELDS if k in recorded}}
    model = build_model(
        recorded["arch"],
        recorded["num_classes"],
        recorded["padding"],
        input_size=input_size,
        in_chans=recorded.get("in_chans", state["conv1.weight"].shape[1]),
        source=recorded.get("source", "scratch"),
        **overrides,
    )
    model.load_state_dict(state)
    return model.eval()


def _unwrap(model: nn.Module) -> nn.Module:
    """The module whose keys are the model's own: strip DDP's ``module.`` and
    ``torch.compile``'s ``_orig_mod.`` wrappers."""
    while True:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


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


def _fsync_dir(directory: Path) -> None:
    if os.name != "posix":  # Windows cannot open a directory for fsync
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
