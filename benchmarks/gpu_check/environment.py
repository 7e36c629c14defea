"""The ``environment`` step: versions, the device, ``nvidia-smi -L``, CPU cores."""

from __future__ import annotations

import os
import platform
import subprocess

import torch
import torchvision

from benchmarks.gpu_check.check import REPO, Check, StepFailed


def step_environment(check: Check) -> tuple[dict, str]:
    import data.roi

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cpu_cores": len(os.sched_getaffinity(0)),
        "host": platform.node(),
        "git_commit": _command(["git", "rev-parse", "--short=12", "HEAD"]),
        "roi_decode": data.roi.available(),  # the CPU path decodes only the crop's window (nvImageCodec)
        "nvidia_smi": _command(["nvidia-smi", "-L"]),
        "driver": _command(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        "cuda_available": torch.cuda.is_available(),
    }
    check.env = env
    if check.device.type != "cuda":
        env["device_name"] = "cpu"
        return env, f"cpu (smoke run), torch {env['torch']}, {env['cpu_cores']} cores"
    if not torch.cuda.is_available():
        raise StepFailed(f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False; "
                         f"nvidia-smi: {env['nvidia_smi'] or 'not found'}): run on a GPU machine, or pass "
                         "--device cpu --quick for a smoke run", env, "no CUDA device")  # fmt: skip
    props = torch.cuda.get_device_properties(check.device)
    env.update(device_name=props.name, capability=f"{props.major}.{props.minor}",
               memory_gib=round(props.total_memory / 2**30, 1), multiprocessors=props.multi_processor_count,
               cuda_devices=torch.cuda.device_count())  # fmt: skip
    return env, (f"{props.name} ({env['memory_gib']} GiB, sm {env['capability']}), driver {env['driver']}, "
                 f"torch {env['torch']}, CUDA {env['cuda']}, {env['cpu_cores']} cores")  # fmt: skip


def _command(args: list[str]) -> str | None:
    """A command's output, stripped; None where it is missing or fails."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=30, cwd=REPO)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
