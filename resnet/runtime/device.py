"""Where and how tensors run: this process's device, autocast dtype and memory format (:class:`Runtime`,
:func:`runtime_for`), its place in the job (:func:`join_job`); each takes the typed values it reads."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import nn

from ..config import AMP_DTYPES, ConfigError
from .distributed import DistEnv, LaunchError, init_distributed
from .workers import data_workers, share_cpus


@dataclass(frozen=True)
class Runtime:
    """This process's device (through its :class:`DistEnv`), autocast dtype and memory format."""

    env: DistEnv
    amp_dtype: torch.dtype | None = None  # None = float32; bfloat16 or float16 under autocast
    channels_last: bool = False

    @classmethod
    def local(cls, device: str | torch.device = "cpu") -> Runtime:
        """One process, float32, contiguous: for library calls (detection, tests)."""
        return cls(DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device(device)))

    @property
    def device(self) -> torch.device:
        return self.env.device

    def autocast(self):
        return nullcontext() if self.amp_dtype is None else torch.autocast(self.device.type, dtype=self.amp_dtype)

    def place(self, model: nn.Module) -> nn.Module:
        memory_format = torch.channels_last if self.channels_last else torch.contiguous_format
        return model.to(self.device, memory_format=memory_format)

    def to_device(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        non_blocking = self.device.type == "cuda"
        if hasattr(images, "decode"):  # data.decode=gpu: encoded JPEGs, decoded on the device (data.gpu_decode)
            images = images.decode(self.device)
        return images.to(self.device, non_blocking=non_blocking), labels.to(self.device, non_blocking=non_blocking)

    def memory_format(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x


def join_job(device: str, workers: int | str, timeout: float | None = None) -> DistEnv:
    """This process's place in the job on ``device`` (:func:`~resnet.runtime.distributed.init_distributed`),
    and its share of the CPUs beside ``workers`` loader workers (:func:`~resnet.runtime.workers.share_cpus`).
    A launch that cannot work (tasks without srun, more tasks than GPUs) is a :class:`ConfigError`."""
    try:
        env = init_distributed(device, timeout=timeout)
    except LaunchError as err:
        raise ConfigError(str(err)) from None
    said = share_cpus(data_workers(workers, env.local_world_size), env.local_world_size)
    if said and env.is_main:
        print(said)
    return env


def runtime_for(env: DistEnv, amp: str, channels_last: bool | str, deterministic: bool = False) -> Runtime:
    """The :class:`Runtime` of ``amp`` and ``channels_last`` (``auto``: on for CUDA) on ``env``'s device,
    its kernels chosen: ``deterministic``, torch's deterministic algorithms and no cuDNN autotuning;
    else on CUDA cuDNN picks its fastest (the input sizes are fixed)."""
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
    elif env.device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    channels_last = env.device.type == "cuda" if channels_last == "auto" else bool(channels_last)
    return Runtime(env, AMP_DTYPES[amp], channels_last)
