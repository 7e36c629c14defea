"""Distributed setup shared by training and evaluation: read torchrun's environment, return where this process runs.

NCCL on GPU, gloo on CPU. Nothing here mutates configs or patches builtins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

DEVICES = ("auto", "cpu", "cuda")  # the values of a run config's `device`


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def pick_device(preference: str = "auto", local_rank: int = 0) -> torch.device:
    if preference not in DEVICES:
        raise ValueError(f"unknown device {preference!r}; choose one of {', '.join(DEVICES)}")
    if preference == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda but no CUDA device is visible; use device=cpu (or auto)")
    if preference == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", local_rank)


def init_distributed(device: str = "auto") -> DistEnv:
    """Join the process group torchrun set up (or run alone when launched by python)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = pick_device(device, local_rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world_size > 1 and not dist.is_initialized():
        backend = "nccl" if dev.type == "cuda" else "gloo"
        kwargs = {"device_id": dev} if dev.type == "cuda" else {}
        store = _restart_safe_store(world_size)
        if store is not None:
            kwargs.update(store=store, rank=rank, world_size=world_size)
        dist.init_process_group(backend=backend, **kwargs)
    return DistEnv(rank=rank, world_size=world_size, local_rank=local_rank, device=dev)


def _restart_safe_store(world_size: int) -> dist.Store | None:
    """torchrun's agent keeps one TCPStore across ``--max-restarts``; workers of a restarted
    attempt would read the dead attempt's addresses from it and fail to connect
    (pytorch/pytorch#135712). A prefix per restart gives each attempt its own keys."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    agent_store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size, is_master=False
    )
    return dist.PrefixStore(f"resnet_padding/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", agent_store)


def all_reduce_sum(values: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """Sum a tensor over all processes (a no-op alone). Returns the summed tensor."""
    if env.distributed:
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def barrier(env: DistEnv) -> None:
    if env.distributed:
        dist.barrier()


def shutdown(env: DistEnv) -> None:
    if env.distributed and dist.is_initialized():
        dist.destroy_process_group()
