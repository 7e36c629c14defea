"""ResNet family with the padding scheme of every stride-2 site chosen per model.

>>> import resnet
>>> model = resnet.build_model("resnet50", padding="asymmetric")
>>> same_weights = resnet.with_padding(model, "symmetric")   # the same tensors, the other grid

The domain (formulas, presets, published numbers) is docs/padding.md.
"""

from .archs import ALIASES, ARCHS
from .model import ModelMeta, ResNet, build_model, list_archs, with_padding
from .padding import PRESETS, Padding

__all__ = [
    "ALIASES",
    "ARCHS",
    "PRESETS",
    "ModelMeta",
    "Padding",
    "ResNet",
    "build_model",
    "list_archs",
    "with_padding",
]
