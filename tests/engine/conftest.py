"""The reference runs that the multi-process launches of tests/engine must reproduce, computed once
per worker for every module that uses them (their tests carry ``xdist_group("one_process")``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import procs
from tests.helpers.imagegen import make_tiny_folder
from tests.helpers.training import SAME_MATHS, launcher_overrides, run_in_process


@pytest.fixture(scope="session")
def launch_folder(tmp_path_factory) -> Path:
    """tests/conftest.py's tiny_folder, once per worker: the reference runs below keep their
    results while slow-first ordering interleaves these tests with others'."""
    return make_tiny_folder(tmp_path_factory.mktemp("tiny_train"))


@pytest.fixture(scope="session")
def one_process(launch_folder, tmp_path_factory) -> Path:
    """The reference the multi-process launches must reproduce: one process, global batch 4 (run
    in this process: a train.py start costs ~5 CPU-seconds of imports)."""
    run_dir = tmp_path_factory.mktemp("one")
    run_in_process(launch_folder, run_dir, *SAME_MATHS, "batch_size=4")
    return run_dir


@pytest.fixture(scope="session")
def two_processes(launch_folder, tmp_path_factory) -> Path:
    """The same run under torchrun, 2 processes x batch 2, uninterrupted."""
    run_dir = tmp_path_factory.mktemp("two")
    two = launcher_overrides(launch_folder, run_dir, 2)
    proc = procs.run([*procs.torchrun_here(), "train.py", *two], {"OMP_NUM_THREADS": "1"}, 240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir
