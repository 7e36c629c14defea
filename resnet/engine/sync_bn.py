"""``sync_bn=true``: batch statistics over every process's batch, on any device.

On CUDA this is torch's ``nn.SyncBatchNorm``. Its kernels are CUDA-only (``SyncBatchNorm
expected input tensor to be on GPU``), so on CPU (gloo) :class:`HostSyncBatchNorm` does the
same sum: each process's per-channel sum, sum of squares and count go through one
autograd-aware all-reduce (``torch.distributed.nn.functional.all_reduce``; its backward
all-reduces the gradients), so N processes of batch b normalise exactly as one process of
batch N x b would, forward and backward, running statistics included.
"""

from __future__ import annotations

import torch
from torch import nn

from ..runtime.distributed import DistEnv


class HostSyncBatchNorm(nn.BatchNorm2d):
    """``BatchNorm2d`` whose training statistics are those of the global batch (any backend)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or not torch.distributed.is_initialized():
            return super().forward(x)
        from torch.distributed.nn.functional import all_reduce

        dims = (0, 2, 3)
        local = x.float()
        count = torch.full((1,), local.numel() / local.shape[1], device=x.device)
        totals = all_reduce(torch.cat([local.sum(dims), (local * local).sum(dims), count]))
        channels = x.shape[1]
        n = totals[-1]
        mean = totals[:channels] / n
        var = (totals[channels : 2 * channels] / n - mean * mean).clamp_min(0)  # biased, as BN normalises
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                m = self.momentum if self.momentum is not None else 1 / self.num_batches_tracked.item()
                self.running_mean.lerp_(mean.detach().to(self.running_mean.dtype), m)
                unbiased = var.detach() * n / (n - 1).clamp_min(1)  # no host sync: n stays a tensor
                self.running_var.lerp_(unbiased.to(self.running_var.dtype), m)
        shape = (1, channels, 1, 1)
        y = (local - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        return y.to(x.dtype)


def convert_sync_batchnorm(model: nn.Module, env: DistEnv) -> nn.Module:
    """Every ``BatchNorm2d`` of ``model`` becomes a synchronised one: torch's on CUDA,
    :class:`HostSyncBatchNorm` elsewhere (same weights, buffers and state-dict keys)."""
    if env.device.type == "cuda":
        return nn.SyncBatchNorm.convert_sync_batchnorm(model)
    for name, child in model.named_children():
        if type(child) is nn.BatchNorm2d:
            synced = HostSyncBatchNorm(
                child.num_features,
                child.eps,
                child.momentum,
                child.affine,
                child.track_running_stats,
                device=child.weight.device,
            )
            synced.load_state_dict(child.state_dict())
            synced.train(child.training)
            setattr(model, name, synced)
        else:
            convert_sync_batchnorm(child, env)
    return model
