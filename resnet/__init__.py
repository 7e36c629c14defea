"""ResNet family with the padding scheme of every stride-2 site chosen per model.

>>> import resnet
>>> model = resnet.build_model("resnet50", padding="asymmetric")
>>> same_weights = resnet.with_padding(model, "symmetric")   # the same tensors, the other grid

The domain (formulas, presets, published numbers) is docs/padding.md.

The names below load on first use, so that importing a light submodule (:mod:`resnet.job.signals`,
which train.py imports before anything else to catch a stop signal from its first instruction)
does not import torch.
"""

from importlib import import_module

_HOMES = {
    "ALIASES": "archs",
    "ARCHS": "archs",
    "ModelMeta": "model",
    "ResNet": "model",
    "build_model": "model",
    "list_archs": "model",
    "with_padding": "model",
    "PRESETS": "padding",
    "Padding": "padding",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'resnet' has no attribute {name!r}")
    value = getattr(import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value  # once: later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
