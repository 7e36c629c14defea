"""Our own checkpoints (train.py's ``last.pt``, :func:`resnet.checkpoint.save_checkpoint`).

``weights=/path/last.pt`` (or ``checkpoint:/path``): the architecture, padding and
preprocessing come from the checkpoint's meta; the crop, resize ratio and interpolation
the run validated at come from the config train.py records in it
(:class:`resnet.checkpoint.training_state.TrainingState` says which keys). The file is read once.
"""

from __future__ import annotations

from ..checkpoint import load_checkpoint, model_from_checkpoint, recorded_grid
from ..checkpoint.training_state import TrainingState
from ..grid import grid_name, preset_norms
from .common import LoadedWeights, OriginProtocol, WeightsSpec, WeightsUnavailable

FORMS = ("/path/to/last.pt or checkpoint:/path/to/last.pt",)


def load(spec: WeightsSpec, arch: str | None, download: bool, ema: bool = False) -> LoadedWeights:
    """``ema``: the exponential moving average of the weights that train.py keeps beside them
    (``ema_decay`` > 0) instead of the weights themselves."""
    if not spec.path.is_file():
        raise WeightsUnavailable(
            f"no checkpoint at {spec.path}; pass weights=/path/to/last.pt (a train.py run dir has one)"
        )
    checkpoint = load_checkpoint(spec.path)
    if ema:
        weights = TrainingState.ema_of(checkpoint)
        if weights is None:
            raise WeightsUnavailable(
                f"{spec.path} holds no EMA weights (its run had ema_decay=0): drop ema=true to use its weights"
            )
        checkpoint = {**checkpoint, "model": weights}
    model = model_from_checkpoint(checkpoint, where=f"{spec.path} (its EMA weights)" if ema else spec.path)
    origin = OriginProtocol(**TrainingState.validated_at(checkpoint))
    grid, _ = recorded_grid(checkpoint)  # train.py grid=[...]: trained under each of these presets
    norms = preset_norms(checkpoint["model"], grid) if grid else {}
    return LoadedWeights(model, origin, trained_for=grid_name(grid) if grid else None, preset_norms=norms)
