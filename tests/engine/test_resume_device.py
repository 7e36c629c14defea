"""A training state is loaded on the CPU whatever device the run trains on: the RNG states in it
are CPU generator states, and on a CUDA device `set_rng_state` refuses them (every requeued GPU
job would die at its first step). Without a GPU, the run's device here is `meta`: a state loaded
there would reach the RNG restore as meta tensors."""

from __future__ import annotations

import pytest
import torch

import resnet.engine.run as engine_run
from resnet.engine.run import train
from resnet.runtime.distributed import DistEnv
from tests.helpers.compose import compose_config


class Restored(Exception):
    """Raised by the recording set_rng_state: the run got as far as the restore."""


class Interrupted(Exception):
    """The first run's end, mid-epoch."""


def overrides(root, run_dir, *extra):
    return ["model=resnet_tiny", "data=imagefolder", f"data.root={root}", "data.num_classes=3", "data.image_size=32",
            "data.workers=0", "batch_size=4", "epochs=2", f"run_dir={run_dir}", *extra]  # fmt: skip


@pytest.mark.filterwarnings("ignore:for .*copying from a non-meta parameter")
def test_a_mid_epoch_resume_on_another_device_restores_rng_states_from_the_cpu(tiny_folder, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    loss_and_augment, calls = engine_run.loss_and_augment, []

    def dies_at_step_3(cfg, num_classes, device):  # after the checkpoint of step 2: a mid-epoch last.pt
        loss_fn, augment = loss_and_augment(cfg, num_classes, device)

        def loss(logits, labels):
            calls.append(1)
            if len(calls) == 3:
                raise Interrupted
            return loss_fn(logits, labels)

        return loss, augment

    monkeypatch.setattr(engine_run, "loss_and_augment", dies_at_step_3)
    with pytest.raises(Interrupted):
        train(compose_config("train", *overrides(tiny_folder, run_dir, "checkpoint_every=2")))
    monkeypatch.setattr(engine_run, "loss_and_augment", loss_and_augment)
    seen = []

    def record(state):
        seen.extend(t.device.type for t in (state["torch"], state["numpy"]["keys"]))
        raise Restored

    monkeypatch.setattr(engine_run, "join_job", lambda *args, **kwargs: DistEnv(0, 1, 0, torch.device("meta")))
    monkeypatch.setattr(engine_run, "set_rng_state", record)
    with pytest.raises(Restored):
        train(compose_config("train", *overrides(tiny_folder, run_dir, "resume=true")))
    assert seen == ["cpu", "cpu"]
