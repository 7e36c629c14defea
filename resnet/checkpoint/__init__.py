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

The names below are imported from :mod:`.format`, :mod:`.save`, :mod:`.read`, :mod:`.load` and
:mod:`.errors`; :mod:`.training_state` holds what a train.py checkpoint has beyond the weights.
"""

from .errors import CheckpointError, CheckpointNotFound
from .format import FORMAT
from .load import load_model, load_weights, model_from_checkpoint
from .read import load_checkpoint, read_torch_file, recorded_grid
from .save import save_checkpoint

__all__ = [
    "FORMAT",
    "CheckpointError",
    "CheckpointNotFound",
    "load_checkpoint",
    "load_model",
    "load_weights",
    "model_from_checkpoint",
    "read_torch_file",
    "recorded_grid",
    "save_checkpoint",
]
