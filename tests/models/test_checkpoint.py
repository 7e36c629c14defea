"""Checkpoints: value round trips under every preset, padding-free keys, atomic
writes, and refusal of pickled code."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch import nn

from resnet import PRESETS, build_model, with_padding
from resnet.checkpoint import load_checkpoint, load_model, save_checkpoint
from resnet.padding import SameConv2d, SameMaxPool2d

ARCH, SIZE = "resnet_tiny", 32  # even size: 'same' differs from symmetric at every stride-2 site


def _randomize_bn(model: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial BN statistics, so that eval-mode logits depend on every buffer."""
    gen = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
    return model


def _model(padding: str, **build) -> nn.Module:
    torch.manual_seed(0)
    return _randomize_bn(build_model(ARCH, num_classes=10, padding=padding, **build)).eval()


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("preset", list(PRESETS))
def test_round_trip_gives_identical_logits(tmp_path, x, preset):
    model = _model(preset)
    path = save_checkpoint(tmp_path / "ckpt.pt", model, epoch=3)
    loaded = load_model(path)
    assert not loaded.training
    assert loaded.meta.as_dict() == model.meta.as_dict()
    assert loaded.meta.padding_name == preset
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_recorded_meta_wins_over_table_defaults(tmp_path):
    """What a build set beyond the table (the trainer's preprocessing and size, a port's
    source) and a BN epsilon that the architecture table no longer uses come back as recorded."""
    model = _model("symmetric", preprocessing="tf", eval_size=299, source="keras")
    path = save_checkpoint(tmp_path / "ckpt.pt", model)
    assert load_model(path).meta == model.meta

    checkpoint = load_checkpoint(path)
    checkpoint["meta"]["bn_eps"] = 1e-3
    torch.save(checkpoint, path)
    loaded = load_model(path)
    assert loaded.meta.bn_eps == 1e-3
    assert {m.eps for m in loaded.modules() if isinstance(m, nn.BatchNorm2d)} == {1e-3}


def test_meta_is_set_once_and_cannot_change():
    model = _model("symmetric")
    with pytest.raises(AttributeError):
        model.meta = None
    with pytest.raises(AttributeError):
        model.meta.source = "keras"
    assert model.meta.padding == PRESETS["symmetric"] and model.meta.in_chans == 3
    # Overrides are what differs from the architecture's row: resnet_tiny already evaluates at 28.
    assert build_model(ARCH, eval_size=28, bn_eps=1e-5).meta.overrides == ()
    assert build_model(ARCH, eval_size=32).meta.overrides == (("eval_size", 32),)


def test_checkpoints_written_before_eval_size_still_load(tmp_path, x):
    """Checkpoints of earlier versions named the evaluation size ``input_size`` and had no in_chans."""
    model = _model("asymmetric", eval_size=40)
    path = save_checkpoint(tmp_path / "ckpt.pt", model)
    checkpoint = load_checkpoint(path)
    meta = checkpoint["meta"]
    meta["input_size"] = meta.pop("eval_size")
    del meta["in_chans"]
    meta["overrides"] = {}
    torch.save(checkpoint, path)
    loaded = load_model(path)
    assert loaded.meta.eval_size == 40 and loaded.meta.padding_name == "asymmetric"
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_extra_entries_round_trip(tmp_path):
    model = _model("tf_same")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model.train()
    nn.functional.cross_entropy(model(torch.randn(2, 3, SIZE, SIZE)), torch.tensor([0, 1])).backward()
    opt.step()
    path = save_checkpoint(tmp_path / "ckpt.pt", model, optimizer=opt.state_dict(), epoch=1, top1_err=42.5)
    checkpoint = load_checkpoint(path)
    assert checkpoint["epoch"] == 1 and checkpoint["top1_err"] == 42.5
    assert checkpoint["meta"]["padding"] == PRESETS["tf_same"].as_dict()
    restored = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    restored.load_state_dict(checkpoint["optimizer"])
    for i, state in opt.state_dict()["state"].items():
        assert torch.equal(restored.state_dict()["state"][i]["momentum_buffer"], state["momentum_buffer"])


def test_keys_do_not_depend_on_padding():
    keys = {name: set(build_model(ARCH, padding=name).state_dict()) for name in PRESETS}
    assert all(k == keys["symmetric"] for k in keys.values())


def test_checkpoint_runs_under_another_padding_only_when_asked(tmp_path, x):
    model = _model("tf_same")
    path = save_checkpoint(tmp_path / "ckpt.pt", model)
    loaded = load_model(path)
    assert loaded.meta.padding_name == "tf_same"
    moved = with_padding(loaded, "symmetric")
    assert moved.meta.padding == PRESETS["symmetric"] and loaded.meta.padding_name == "tf_same"
    assert moved.conv1.weight.data_ptr() == loaded.conv1.weight.data_ptr()  # the same tensors, not a copy
    assert not moved.training
    reference = _model("symmetric")  # same seed, same weights, built symmetric
    with torch.no_grad():
        assert torch.equal(moved(x), reference(x))
        # At an even size the grids differ, so the logits must too.
        assert not torch.allclose(moved(x), model(x))


def test_load_model_freezes_padding_for_an_input_size(tmp_path, x):
    model = _model("tf_same")
    frozen = load_model(save_checkpoint(tmp_path / "ckpt.pt", model), input_size=SIZE)
    assert not any(isinstance(m, (SameConv2d, SameMaxPool2d)) for m in frozen.modules())
    with torch.no_grad():
        assert torch.equal(frozen(x), model(x))


def test_interrupted_write_keeps_previous_checkpoint(tmp_path, x, monkeypatch):
    path = tmp_path / "ckpt.pt"
    model = _model("asymmetric")
    save_checkpoint(path, model, epoch=1)

    def save_half_then_die(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a zip archive")
        raise RuntimeError("killed mid-write")

    monkeypatch.setattr(torch, "save", save_half_then_die)
    with pytest.raises(RuntimeError, match="killed mid-write"):
        save_checkpoint(path, _model("symmetric"), epoch=2)
    monkeypatch.undo()

    assert load_checkpoint(path)["epoch"] == 1
    with torch.no_grad():
        assert torch.equal(load_model(path)(x), model(x))
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # no temp file left behind


def test_non_plain_entries_are_refused_before_writing(tmp_path):
    path = tmp_path / "ckpt.pt"
    with pytest.raises(TypeError, match=r"checkpoint\['sampler'\]"):
        save_checkpoint(path, _model("symmetric"), sampler=object())
    with pytest.raises(ValueError, match="may not be named"):
        save_checkpoint(path, _model("symmetric"), meta={})
    assert not path.exists()


class _Payload:
    """Unpickling this creates a file: stands in for any code an attacker would run."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').close()",)


def test_pickled_code_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "hostile.pt"
    good = save_checkpoint(tmp_path / "good.pt", _model("symmetric"))
    checkpoint = load_checkpoint(good)
    checkpoint["meta"]["padding"] = _Payload(marker)
    torch.save(checkpoint, path)

    for load in (load_checkpoint, load_model):
        with pytest.raises(ValueError, match="refusing to load"):
            load(path)
        assert not marker.exists()

    # Control: the payload is live, a plain unpickle would have run it.
    torch.load(path, weights_only=False)
    assert marker.exists()


def test_non_checkpoint_pickle_is_refused(tmp_path):
    path = tmp_path / "plain.pkl"
    path.write_bytes(pickle.dumps(_Payload(tmp_path / "pwned"), protocol=2))
    with pytest.raises(ValueError, match="refusing to load"):
        load_checkpoint(path)
    assert not (tmp_path / "pwned").exists()
