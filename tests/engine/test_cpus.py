"""The CPUs a process may use (resnet/runtime/cpus.py): affinity, cgroup v1 and v2 quotas along the path to
the root, SLURM's --cpus-per-task; and torch's threads lowered to what the loader workers leave."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import resnet.runtime.cpus
from resnet.runtime.cpus import cgroup_cpu_quota, cpu_share
from resnet.runtime.workers import intra_op_threads, share_cpus


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(
    ("proc", "files", "quota"),
    [
        ("0::/\n", {"fs/cpu.max": "200000 100000\n"}, 2.0),  # docker run --cpus=2: the container's root
        ("0::/\n", {"fs/cpu.max": "max 100000\n"}, None),
        ("0::/a/b\n", {"fs/a/b/cpu.max": "max 100000\n", "fs/a/cpu.max": "150000 100000\n"}, 1.5),  # a parent's
        ("0::/a/b\n", {"fs/a/b/cpu.max": "50000 100000\n", "fs/a/cpu.max": "400000 100000\n"}, 0.5),  # tightest
        (
            "4:cpu,cpuacct:/job\n",
            {"fs/cpu,cpuacct/job/cpu.cfs_quota_us": "300000\n", "fs/cpu,cpuacct/job/cpu.cfs_period_us": "100000\n"},
            3.0,
        ),  # v1
        (
            "4:cpu,cpuacct:/job\n",
            {"fs/cpu,cpuacct/job/cpu.cfs_quota_us": "-1\n", "fs/cpu,cpuacct/job/cpu.cfs_period_us": "100000\n"},
            None,
        ),
        ("4:memory:/x\n", {}, None),  # no cpu controller
    ],
    ids=["v2-container", "v2-unlimited", "v2-parent", "v2-tightest", "v1", "v1-unlimited", "none"],
)
def test_the_cgroup_quota_is_read_along_the_path_to_the_root(tmp_path, proc, files, quota):
    tree(tmp_path, {**files, "cgroup": proc})
    assert cgroup_cpu_quota(tmp_path / "cgroup", tmp_path / "fs") == quota


def test_no_cgroup_file_system_is_no_quota(tmp_path):
    assert cgroup_cpu_quota(tmp_path / "absent", tmp_path) is None


@pytest.mark.parametrize(
    ("cpus", "affinity", "quota", "per_task", "local", "share"),
    [
        (64, 64, 2.0, None, 1, 2),  # a container that sees 64 CPUs with --cpus=2
        (64, 64, 4.0, None, 2, 2),  # its quota is shared by torchrun's 2 processes
        (64, 64, 2.5, None, 1, 3),  # a fraction of a CPU is still one to run on
        (64, 8, None, None, 8, 8),  # srun --cpu-bind: each task's affinity is its own
        (64, 64, None, "4", 8, 4),  # --cpus-per-task=4 with 8 tasks on a node
        (2, 2, 0.5, None, 1, 1),  # never 0
    ],
)
def test_a_process_gets_the_tightest_of_affinity_quota_and_cpus_per_task(monkeypatch, cpus, affinity, quota,
                                                                           per_task, local, share):  # fmt: skip
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity)))
    monkeypatch.setattr(resnet.runtime.cpus, "cgroup_cpu_quota", lambda: quota)
    environ = {"SLURM_CPUS_PER_TASK": per_task} if per_task else {}
    assert cpu_share(local, environ) == share


@pytest.fixture
def two_cpus(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(resnet.runtime.cpus, "cgroup_cpu_quota", lambda: None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_loader_workers_take_their_cpus_from_the_intra_op_threads(two_cpus):
    assert [intra_op_threads(w) for w in (0, 1, 2, 8)] == [2, 1, 1, 1]
    torch.set_num_threads(2)
    said = share_cpus(workers=2)
    assert torch.get_num_threads() == 1
    assert said == ("threads: 1 intra-op + 2 loader worker(s) on 2 usable CPU(s) (torch would use 2; "
                    "OMP_NUM_THREADS=N sets your own)")  # fmt: skip


def test_threads_are_never_raised_and_omp_num_threads_is_the_users_choice(two_cpus, monkeypatch):
    torch.set_num_threads(1)
    assert share_cpus(workers=0) is None and torch.get_num_threads() == 1  # 2 allowed: 1 is kept
    torch.set_num_threads(2)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert share_cpus(workers=2) is None and torch.get_num_threads() == 2
