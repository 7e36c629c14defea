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

What lives where (the names above are imported here from them):

* :mod:`.format`: :data:`FORMAT`, the meta's entries and types, the checks of a dict read back;
* :mod:`.save`: :func:`save_checkpoint`, the atomic write of plain data only;
* :mod:`.read`: :func:`read_torch_file`, :func:`load_checkpoint`, :func:`recorded_grid`;
* :mod:`.load`: :func:`load_model`, :func:`model_from_checkpoint`, :func:`load_weights` (into a model);
* :mod:`.errors`: :class:`CheckpointError` and the one-line messages that say why a file cannot be
  used (its, and the weights loaders');
* :mod:`.training_state`: what a train.py checkpoint holds beyond the weights
  (:class:`~.training_state.TrainingState`), and :func:`~.training_state.find_resume`, the
  ``last.pt`` a ``resume=`` names.
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
