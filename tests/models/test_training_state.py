"""The training checkpoint's one definition (resnet/checkpoint/training_state.py): what it writes is
what it reads back, and the optional keys appear only when they hold something. (train.py's
Checkpointer writes through TrainingState.save; tests/engine/test_faults.py resumes its files.)"""

from __future__ import annotations

import pytest
import torch

import resnet
from resnet.checkpoint import CheckpointError, save_checkpoint
from resnet.checkpoint.training_state import TrainingState
from resnet.engine.seeding import rng_state

WEIGHTS_FILE_KEYS = {"format", "model", "meta"}  # what resnet.checkpoint writes for any weights file


def a_state(**extra) -> tuple[torch.nn.Module, TrainingState]:
    model = resnet.build_model("resnet_tiny", num_classes=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, TrainingState(epoch=2, step=17, optimizer=optimizer.state_dict(), scheduler={"last_epoch": 17},
                                rng=[rng_state(), rng_state()], history=[{"epoch": 1}, {"epoch": 2}],
                                config={"seed": 0}, layout={"world_size": 2}, **extra)  # fmt: skip


def test_what_it_writes_it_reads_back(tmp_path):
    partials = [{"batches": 3, "loss_sum": 1.5}, {"batches": 3, "loss_sum": 2.5}]
    model, state = a_state(grid=["symmetric", "asymmetric"], epoch_partial=partials[0], epoch_partial_ranks=partials,
                           ema=resnet.build_model("resnet_tiny", num_classes=3).state_dict())  # fmt: skip
    read = TrainingState.read(state.save(tmp_path / "last.pt", model))
    for name in ("epoch", "step", "scheduler", "history", "config", "layout", "grid", "epoch_partial_ranks"):
        assert getattr(read, name) == getattr(state, name), name
    assert read.meta["arch"] == "resnet_tiny" and read.model.keys() == model.state_dict().keys()
    assert all(torch.equal(read.ema[k], v) for k, v in state.ema.items())
    assert read.partial_of(1) == partials[1] and read.rng_of(5) is read.rng[1]  # a rank past the file's: the last
    assert read.recorded() == {"seed": 0, "world_size": 2}


def test_optional_keys_are_written_only_when_they_hold_something(tmp_path):
    model, state = a_state()
    written = torch.load(state.save(tmp_path / "last.pt", model), weights_only=True)
    assert set(written) - WEIGHTS_FILE_KEYS == {"epoch", "step", "optimizer", "scheduler", "rng", "history", "config",
                                                "layout"}  # fmt: skip
    read = TrainingState.read(tmp_path / "last.pt")
    assert (read.grid, read.ema, read.scaler, read.partial_of(0)) == (None, None, None, None)


def test_an_older_file_with_rank_0s_partial_alone(tmp_path):
    model, state = a_state(epoch_partial={"batches": 4})
    read = TrainingState.read(state.save(tmp_path / "last.pt", model))
    assert read.partial_of(1) == {"batches": 4}  # every rank gets rank 0's totals, as before per-rank totals


def test_a_state_without_generator_states_is_refused_in_one_line(tmp_path):
    model, state = a_state()
    state.rng = []
    with pytest.raises(CheckpointError, match=r"malformed rng entry .*pass another checkpoint"):
        TrainingState.read(state.save(tmp_path / "last.pt", model))


def test_a_weights_file_is_not_a_training_state(tmp_path):
    path = resnet.checkpoint.save_checkpoint(tmp_path / "w.pt", resnet.build_model("resnet_tiny", num_classes=3))
    with pytest.raises(CheckpointError, match="not a training checkpoint"):
        TrainingState.read(path)


def test_evaluation_reads_the_ema_and_the_validation_protocol_of_a_training_file_or_none(tmp_path):
    ema = resnet.build_model("resnet_tiny", num_classes=3).state_dict()
    model, state = a_state(ema=ema)
    state.config = {"data": {"image_size": 40, "val_size": None, "crop_pct": 0.95, "interpolation": "bicubic"}}
    written = torch.load(state.save(tmp_path / "last.pt", model), weights_only=True)
    assert TrainingState.validated_at(written) == {"crop": 40, "crop_pct": 0.95, "interpolation": "bicubic"}
    assert TrainingState.ema_of(written).keys() == ema.keys()
    save_checkpoint(tmp_path / "weights.pt", model)  # weights only: a re-gridded file, an import
    bare = torch.load(tmp_path / "weights.pt", weights_only=True)
    assert TrainingState.validated_at(bare) == dict.fromkeys(("crop", "crop_pct", "interpolation"))
    assert TrainingState.ema_of(bare) is None
