"""Loading into a model: :func:`load_model` and :func:`model_from_checkpoint` rebuild the model a
checkpoint records, :func:`load_weights` loads a state dict into a model built already (every key,
every shape, or one line saying why not)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch
from torch import nn

from ..grid import has_grid_bn, preset_state_dict
from ..model import ResNet, build_model
from ..padding import freeze_padding
from .errors import CheckpointError, error_line, key_problems
from .format import _canonical_or_none, _check_state_dict, _checked
from .read import load_checkpoint

# Meta fields that are Arch fields too: the recorded value wins over the table row (a run's
# preprocessing, an importer's BN epsilon, a row changed since); build_model keeps what differs.
_ARCH_FIELDS = ("preprocessing", "eval_size", "bn_eps")


def load_model(path: str | os.PathLike, input_size: int | tuple[int, int] | None = None) -> ResNet:
    """Rebuild the recorded model under its recorded padding, load its weights, eval mode.
    ``input_size`` freezes every pad for that size (see ``build_model``)."""
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
    in_chans = recorded.get("in_chans", conv1.shape[1] if conv1 is not None and conv1.ndim == 4 else 3)
    built = {"in_chans": in_chans, "source": recorded.get("source", "scratch")}
    try:
        model = build_model(recorded["arch"], recorded["num_classes"], recorded["padding"], **built, **overrides)
    except (ValueError, TypeError, KeyError) as err:  # a padding site, an override this version lacks
        raise CheckpointError(
            f"{where} records a {recorded['arch']} this version cannot build ({error_line(err)}); "
            "upgrade this package if a newer version wrote it, or pass another checkpoint"
        ) from None
    problems = key_problems(shapes(model), shapes(state))
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
    load the file as what it is. A DDP or ``torch.compile`` wrapper is looked through. Returns ``model``.
    """
    target = _unwrap(model)
    _check_state_dict(state_dict, where)
    want, got = shapes(target), shapes(state_dict)
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
        ours = meta.arch if meta is not None else type(target).__name__
        classes = ""
        if "fc.weight" in want and "fc.weight" in got and want["fc.weight"][:1] != got["fc.weight"][:1]:
            classes = f"; it has {got['fc.weight'][0]} classes, the model {want['fc.weight'][0]}"
        raise CheckpointError(
            f"{where} does not fit this {ours} ({problems}){classes}; build the model it was saved from, "
            f"as resnet.checkpoint.load_model('{where}') does"
        )
    try:
        target.load_state_dict(state_dict)
    except RuntimeError as err:  # same keys and shapes: only an exotic tensor (sparse, quantised) gets here
        raise CheckpointError(f"{where}: its weights do not load into the model ({error_line(err)})") from None
    return model


def shapes(source: nn.Module | Mapping[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    """Key -> shape of a state dict, or of a module's."""
    tensors = source.state_dict() if isinstance(source, nn.Module) else source
    return {key: tuple(value.shape) for key, value in tensors.items()}


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
