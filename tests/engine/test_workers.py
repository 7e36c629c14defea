"""Loader workers follow the cores each process may use, and the config check agrees with torch's warning."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader

import resnet.runtime.cpus
import resnet.runtime.workers
from resnet.config import ConfigError, check_data_config
from resnet.runtime.cpus import cpu_share
from resnet.runtime.workers import AUTO_WORKERS_CAP, auto_workers
from tests.helpers.training import run_in_process


def machine(monkeypatch, cores: int, affinity: int) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity)))
    monkeypatch.setattr(resnet.runtime.cpus, "cgroup_cpu_quota", lambda: None)  # whatever the host's (test_cpus.py)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)


@pytest.mark.parametrize(
    "cores, affinity, local, share",
    [
        (16, 16, 8, 2),  # torchrun: every process sees every core, so each gets an eighth
        (16, 4, 8, 4),  # srun --cpu-bind / cgroups: each process already sees only its own
        (2, 2, 2, 1),
        (2, 2, 4, 1),  # never 0: one decode process at least
        (64, 64, 1, 64),
    ],
)
def test_each_process_gets_its_share_of_the_cores(monkeypatch, cores, affinity, local, share):
    machine(monkeypatch, cores, affinity)
    assert cpu_share(local) == share
    assert auto_workers(local) == min(share, AUTO_WORKERS_CAP)


def torch_warns(workers: int) -> bool:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DataLoader(torch.arange(4), num_workers=workers)
    return any("worker processes in total" in str(w.message) for w in caught)


def test_the_check_refuses_exactly_what_torch_warns_about():
    cores = len(os.sched_getaffinity(0))
    for workers in (0, 1, cores, cores + 1, 4 * cores):
        data = OmegaConf.create({"name": "fashion_mnist", "workers": workers})
        try:
            check_data_config(data)
            refused = False
        except ConfigError as err:
            refused = True
            assert f"data.workers={workers} is out of range: 0 (load in the main process) to the {cores} " in str(err)
            assert f"data.workers=auto ({auto_workers()} here)" in str(err)
        assert refused == torch_warns(workers), workers
    check_data_config(OmegaConf.create({"name": "fashion_mnist", "workers": "auto"}))
    assert not torch_warns(auto_workers())


def test_a_default_run_on_this_machine_gets_no_worker_warning(tiny_folder, tmp_path, monkeypatch):
    picked = []
    real = resnet.runtime.workers.auto_workers
    monkeypatch.setattr(resnet.runtime.workers, "auto_workers", lambda *a: picked.append(real(*a)) or picked[-1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_in_process(tiny_folder, tmp_path, "data.workers=auto", "epochs=1")
    assert picked and set(picked) == {min(cpu_share(), AUTO_WORKERS_CAP)}  # for the threads, then the loaders
    assert not [w for w in caught if "worker processes in total" in str(w.message)]
