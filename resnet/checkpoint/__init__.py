"""Checkpoints that carry their padding scheme and load without running pickled code.

A checkpoint is a plain dict: ``format`` (the layout version, :data:`FORMAT`), ``model``
(the state dict), ``meta`` (``model.meta``: architecture, padding per site, preprocessing,
...) and whatever the caller adds (optimizer state, epoch, ...). Only plain containers,
tensors, numbers and strings are written, so :func:`load_checkpoint` can use
``torch.load(weights_only=True)``, which refuses any pickled object instead of constructing it.

Every way a file can fail to be a usable checkpoint (missing, cut short, not a checkpoint,
pickled code, a newer format, malformed meta, another architecture's weights) raises
:class:`CheckpointError`, whose message is one line naming the file and what to do instead.

State-dict keys never depend on the padding (``resnet.blocks``), so weights trained
under one scheme run under another: ``resnet.with_padding(load_model(path), "symmetric")``.

This package holds the checkpoint code here; in :mod:`.training_state` what a train.py
checkpoint holds beyond the weights (:class:`~.training_state.TrainingState`); and in
:mod:`.errors` the one-line messages that say why a file cannot be used
(:class:`CheckpointError`'s, and the weights loaders').
"""

from __future__ import annotations

import os
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from ..archs import canonical_name
from ..grid import grid_bn_of, has_grid_bn, preset_state_dict
from ..model import ResNet, build_model
from ..padding import freeze_padding
from .errors import SHOWN_KEYS, before_reading, describe, error_line, key_problems, printable, unreadable

# The checkpoint layout save_checkpoint writes, and the newest this code reads. A checkpoint
# without a "format" entry (written before it was recorded) has layout 1. Raise it when a
# change would make older code misread a new checkpoint; teach load_checkpoint the old ones.
FORMAT = 1
# What torch.load(weights_only=True) reconstructs without an allow-list. Exact types:
# a subclass (numpy.float64 is a float) is pickled as an object and would be refused.
_PLAIN_TYPES = (str, bytes, int, float, bool, type(None), torch.Size, torch.dtype, torch.device)
# Meta fields that are Arch fields too: the recorded value wins over the table row (a run's
# preprocessing, an importer's BN epsilon, a row changed since); build_model keeps what differs.
_ARCH_FIELDS = ("preprocessing", "eval_size", "bn_eps")
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


class CheckpointError(ValueError):
    """A file that is not a usable checkpoint (or weights file). The message is one line that
    names the file and says what to do instead. A ValueError, so that callers reporting
    ValueErrors in one line (train.py's resume, eval.py's weights=) keep doing so."""


class CheckpointNotFound(CheckpointError, FileNotFoundError):
    """No file at the path given; a FileNotFoundError too, as torch.load's own was."""


def save_checkpoint(path: str | os.PathLike, model: nn.Module, **extra) -> Path:
    """Write ``{"format": FORMAT, "model": state_dict, "meta": model.meta, **extra}`` to ``path`` atomically.

    The dict goes to a temporary file next to ``path``, is flushed to disk, then renamed
    over ``path``: a crash at any point leaves either the old file or the new one.
    Raises ``TypeError`` (before writing anything) if an entry is not plain data.
    """
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
    _fsync_dir(path.parent)  # make the rename itself durable
    return path


def read_torch_file(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> object:
    """``torch.load(path, weights_only=True)``; any failure is one :class:`CheckpointError` line.

    ``weights_only=True`` refuses any pickled object instead of constructing it, so nothing
    in the file runs. A damaged file makes torch.load raise almost anything; each failure
    says what the file is (missing, empty, cut short, not a torch file, pickled code) and
    what to do, with torch's own first line in parentheses (:mod:`resnet.checkpoint.errors`).
    """
    problem = before_reading(path) if isinstance(path, (str, os.PathLike)) else None
    if problem is not None:
        message, missing = problem
        raise (CheckpointNotFound if missing else CheckpointError)(message)
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # on corrupt input: RuntimeError, EOFError, UnpicklingError, KeyError, ...
        raise CheckpointError(unreadable(path, err)) from None


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """A checkpoint :func:`save_checkpoint` wrote, read without running pickled code.

    Checked before it is returned: a dict with a ``model`` state dict (tensors) and a
    ``meta`` naming a known architecture, of a format this code reads. Anything else
    raises :class:`CheckpointError` (one line naming the file). ``checkpoint["meta"]["arch"]``
    is the canonical architecture name, so it compares equal to a model's ``meta.arch``.
    """
    return _checked(read_torch_file(path, map_location), path)


def recorded_grid(checkpoint: Mapping) -> tuple[list[str], str]:
    """A train.py checkpoint's grid: the presets its weights were trained for (``grid=[...]``; [] for
    none) and what its BatchNorms keep per preset (:data:`resnet.grid.GRID_BN`), read from the
    weights themselves. The one reading of it, for eval and resume."""
    presets = list(checkpoint.get("grid") or [])
    return presets, grid_bn_of(checkpoint.get("model") or {}) if presets else "shared"


def load_model(path: str | os.PathLike, input_size: int | tuple[int, int] | None = None) -> ResNet:
    """Rebuild the recorded model under its recorded padding, load its weights, eval mode.

    ``input_size`` freezes every pad for that size (see ``build_model``). To run the same
    weights under another scheme: ``resnet.with_padding(load_model(path), scheme)``.
    """
    return model_from_checkpoint(load_checkpoint(path), input_size, where=path)


def model_from_checkpoint(
    checkpoint: dict, input_size: int | tuple[int, int] | None = None, where: object = "the checkpoint"
) -> ResNet:
    """The model a checkpoint dict (:func:`load_checkpoint`) records, in eval mode.

    ``where`` names the checkpoint in error messages (its path)."""
    checkpoint = _checked(checkpoint, where)
    recorded, state = checkpoint["meta"], checkpoint["model"]
    if has_grid_bn(state):  # train.py grid=[...] with per-grid BN: the first preset's, as the meta's padding
        state = preset_state_dict(state, 0)
    if "eval_size" not in recorded and "input_size" in recorded:  # the name before eval_size
        recorded = {**recorded, "eval_size": recorded["input_size"]}
    overrides = {**recorded.get("overrides", {}), **{k: recorded[k] for k in _ARCH_FIELDS if k in recorded}}
    conv1 = state.get("conv1.weight")
    try:
        model = build_model(
            recorded["arch"],
            recorded["num_classes"],
            recorded["padding"],
            in_chans=recorded.get("in_chans", conv1.shape[1] if conv1 is not None and conv1.ndim == 4 else 3),
            source=recorded.get("source", "scratch"),
            **overrides,
        )
    except (ValueError, TypeError, KeyError) as err:  # a padding site, an override this version lacks
        raise CheckpointError(
            f"{where} records a {recorded['arch']} this version cannot build ({error_line(err)}); "
            "upgrade this package if a newer version wrote it, or pass another checkpoint"
        ) from None
    problems = key_problems(_shapes(model.state_dict()), _shapes(state))
    if problems:  # the file's own meta and weights disagree: no model= or load_model fixes that
        raise CheckpointError(
            f"{where} is corrupt or was edited: its weights do not fit the {recorded['arch']} its meta records "
            f"({problems}); pass another checkpoint"
        )
    load_weights(model, state, where, arch=recorded["arch"])
    if input_size is not None:
        freeze_padding(model, input_size)
    return model.eval()


def load_weights(
    model: nn.Module, state_dict: Mapping[str, torch.Tensor], where: object, arch: str | None = None
) -> nn.Module:
    """Load ``state_dict`` into ``model`` (every key, every shape), or raise one line saying why not.

    ``where`` names the weights' file in the message. ``arch``: the architecture the
    checkpoint records (``checkpoint["meta"]["arch"]``); when it is not ``model.meta.arch``
    the weights are refused even if every shape fits (resnet50 and resnet50_v1 share them
    but stride in different convs), and the message names both architectures and how to
    load the file as what it is. Otherwise it counts the missing and unexpected keys
    (naming a few) and the shape mismatches (showing one or two), where
    ``model.load_state_dict`` would print every key on a line of its own.
    A DDP or ``torch.compile`` wrapper is looked through. Returns ``model``.
    """
    target = _unwrap(model)
    _check_state_dict(state_dict, where)
    want, got = _shapes(target.state_dict()), _shapes(state_dict)
    problems = key_problems(want, got)
    meta = getattr(target, "meta", None)
    recorded = _canonical_or_none(arch) or arch
    if recorded and meta is not None and recorded != meta.arch:
        problems = problems or "the same keys and shapes, other blocks"
        raise CheckpointError(
            f"{where} holds {recorded} weights, not {meta.arch} ({problems}); pass model={recorded} to use them, "
            f"or load the file as it is with resnet.checkpoint.load_model('{where}')"
        )
    if problems:
        raise CheckpointError(_mismatch(target, problems, want, got, where))
    try:
        target.load_state_dict(state_dict)
    except RuntimeError as err:  # same keys and shapes: only an exotic tensor (sparse, quantised) gets here
        raise CheckpointError(f"{where}: its weights do not load into the model ({error_line(err)})") from None
    return model


def _shapes(state_dict: Mapping[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    return {key: tuple(value.shape) for key, value in state_dict.items()}


def _mismatch(model: nn.Module, problems: str, want: dict, got: dict, where: object) -> str:
    """The one line :func:`load_weights` raises when keys or shapes differ (and no other
    architecture is recorded to blame): the counts, and the class counts if they differ."""
    meta = getattr(model, "meta", None)
    ours = meta.arch if meta is not None else type(model).__name__
    classes = ""
    if "fc.weight" in want and "fc.weight" in got and want["fc.weight"][:1] != got["fc.weight"][:1]:
        classes = f"; it has {got['fc.weight'][0]} classes, the model {want['fc.weight'][0]}"
    return (
        f"{where} does not fit this {ours} ({problems}){classes}; build the model it was saved from, "
        f"as resnet.checkpoint.load_model('{where}') does"
    )


def _checked(checkpoint: object, where: object) -> dict:
    """``checkpoint`` (a shallow copy) if it is one :func:`save_checkpoint` wrote, in a format this code reads."""
    if not isinstance(checkpoint, dict):
        raise CheckpointError(
            f"{where} holds {describe(checkpoint)}, not a checkpoint; pass a file written by "
            "resnet.checkpoint.save_checkpoint (train.py's <run dir>/last.pt)"
        )
    _check_format(checkpoint, where)
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


def _check_format(checkpoint: dict, where: object) -> None:
    """Refuse a layout this code does not know: a newer one would be misread, not fail."""
    version = checkpoint.get("format", 1)
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
