"""Where and how tensors run: this process's device (its :class:`DistEnv`), autocast dtype and
memory format (:class:`Runtime`), from a run config (:func:`runtime_for`; ``amp`` names one of
:data:`resnet.config.AMP_DTYPES`); its place in the job (:func:`join_job`)."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch
from omegaconf import DictConfig
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
        if self.amp_dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def place(self, model: nn.Module) -> nn.Module:
        memory_format = torch.channels_last if self.channels_last else torch.contiguous_format
        return model.to(self.device, memory_format=memory_format)

    def to_device(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        non_blocking = self.device.type == "cuda"
        if hasattr(images, "decode"):  # data.decode=gpu: encoded JPEGs, decoded on the device (data.gpu_decode)
            images = images.decode(self.device)
        images = images.to(self.device, non_blocking=non_blocking)
        labels = labels.to(self.device, non_blocking=non_blocking)
        return images, labels

    def memory_format(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x


def join_job(cfg: DictConfig) -> DistEnv:
    """This process's place in the job (:func:`resnet.runtime.distributed.init_distributed`) and its share
    of the CPUs (:func:`resnet.runtime.workers.share_cpus`: intra-op threads beside the loader workers); a
    launch that cannot work (tasks without srun, more tasks than GPUs) is a :class:`ConfigError`."""
    try:
        env = init_distributed(cfg.device, timeout=cfg.get("dist_timeout"))
    except LaunchError as err:
        raise ConfigError(str(err)) from None
    said = share_cpus(data_workers(cfg.data, env.local_world_size), env.local_world_size) if "data" in cfg else None
    if said and env.is_main:
        print(said)
    return env


def runtime_for(cfg: DictConfig, env: DistEnv) -> Runtime:
    """``amp``, ``channels_last`` (auto: on for CUDA) and ``deterministic`` of a run config."""
    if cfg.get("deterministic"):
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
    elif env.device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed input sizes: let cuDNN pick its fastest kernels
    channels_last = env.device.type == "cuda" if cfg.channels_last == "auto" else bool(cfg.channels_last)
    return Runtime(env, AMP_DTYPES[cfg.amp], channels_last)
