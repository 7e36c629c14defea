"""Data: datasets, loaders, augmentation and device-side normalisation.

>>> from data import build_loaders, Normalize, SkipLog
>>> from resnet.config import data_config  # configs/data/<name>.yaml as a DataConfig
>>> loaders = build_loaders(data_config("fashion_mnist"), batch_size=128)

What each module holds: :mod:`.fashion_mnist` (the built-in dataset), :mod:`.imagefolder`,
:mod:`.testsets` (ImageNet-V2 / ReaL / R / A / Sketch), :mod:`.ilsvrc` (the raw ILSVRC2012
layouts), :mod:`.decode` and :mod:`.roi` (decode only a crop's window of a JPEG),
:mod:`.gpu_decode` (``data.decode=gpu``: nvJPEG), :mod:`.transforms`, :mod:`.augment`,
:mod:`.samplers`, :mod:`.batch`, :mod:`.in_memory`, :mod:`.dataloader` (a dead worker: one error),
:mod:`.normalize` (on the device), :mod:`.shards` (``python -m data.shards``),
:mod:`.registry` (every dataset by name: the in-memory ones, :mod:`.fashion_mnist` and
:mod:`.synthetic`, and those of image files, :mod:`.on_disk`), and
:mod:`.loader`, which builds the loaders.

The trainer's contract is in :mod:`data.loader`'s docstring. The built-in dataset's own
module, :mod:`data.fashion_mnist`, is not imported here so that ``python -m
data.fashion_mnist --download`` runs it as a script cleanly.
"""

from .batch import BadImage, Batch, SkipLog, collate
from .config import DataConfig
from .imagefolder import ImageFolder
from .loader import Loaders, build_loaders
from .normalize import PREPROCESSING, Normalize
from .samplers import ShardSampler
from .transforms import RandomResizedCropFlip, ResizeCenterCrop, random_crop_flip

__all__ = [
    "PREPROCESSING",
    "BadImage",
    "Batch",
    "DataConfig",
    "ImageFolder",
    "Loaders",
    "Normalize",
    "RandomResizedCropFlip",
    "ResizeCenterCrop",
    "ShardSampler",
    "SkipLog",
    "build_loaders",
    "collate",
    "random_crop_flip",
]
