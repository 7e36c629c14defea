"""How the training step's module is wrapped: torch.compile around DDP (so the all-reduce of each
gradient bucket overlaps the backward), DDP with gradient_as_bucket_view, the model itself where
there is nothing to wrap."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from resnet.engine.run import wrap_for_training
from resnet.runtime.distributed import DistEnv

CPU = torch.device("cpu")


def test_compile_wraps_ddp_not_the_other_way_round(monkeypatch):
    calls = []

    class RecordingDDP(nn.Module):
        def __init__(self, module, **kwargs):
            super().__init__()
            self.module, self.kwargs = module, kwargs
            calls.append("ddp")

    def recording_compile(module, **kwargs):
        calls.append("compile")
        return ("compiled", module)

    monkeypatch.setattr(nn.parallel, "DistributedDataParallel", RecordingDDP)
    monkeypatch.setattr(torch, "compile", recording_compile)
    model = nn.Linear(2, 2)
    kind, ddp = wrap_for_training(model, DistEnv(0, 2, 0, CPU), use_compile=True)
    assert calls == ["ddp", "compile"] and kind == "compiled"
    assert isinstance(ddp, RecordingDDP) and ddp.module is model
    assert ddp.kwargs == {"device_ids": None, "gradient_as_bucket_view": True}
    calls.clear()
    assert wrap_for_training(model, DistEnv(0, 1, 0, CPU), use_compile=True) == ("compiled", model)  # one process
    assert wrap_for_training(model, DistEnv(0, 1, 0, CPU), use_compile=False) is model
    assert calls == ["compile"]


@pytest.fixture
def one_process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_ddp_gradients_match_the_plain_model_with_bucket_views(one_process_group):
    # DistEnv says 2 processes so that the model is wrapped; the group has 1, so the all-reduce is a copy.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    reference = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    reference.load_state_dict(model.state_dict())
    ddp = wrap_for_training(model, DistEnv(0, 2, 0, CPU), use_compile=False)
    assert isinstance(ddp, nn.parallel.DistributedDataParallel) and ddp.gradient_as_bucket_view
    x = torch.randn(5, 4)
    for _ in range(2):  # the second step reuses the buckets the first one's gradients live in
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
        ddp(x).sum().backward()
        reference(x).sum().backward()
        for a, b in zip(model.parameters(), reference.parameters()):
            assert torch.equal(a.grad, b.grad)
