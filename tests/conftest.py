"""Shared fixtures.

torch and the project are imported where they are used, not here: pytest-xdist's controller runs
no test, and would spend an interpreter start importing them (about 7 s of CPU on 2 cores)."""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path

import pytest

from tests.helpers import procs, zygote_client
from tests.helpers.footprint import paths_among, remove_run_dirs, remove_unkept

REPO = Path(__file__).resolve().parents[1]
# where scripts/slurm.sbatch puts the run dir of a job of the tests' cluster (ClusterName in
# tests/cluster/slurm_up.sh): only the tests' jobs write there
TEST_CLUSTER_OUTPUTS = REPO / "outputs" / "slurm" / "resnet-test"
_KEPT = pytest.StashKey[set]()  # the paths the failed tests of this process were given
_STARTED = pytest.StashKey[float]()


def pytest_configure(config):
    """Under pytest-xdist, each worker gets its share of the cores: intra-op threads of several
    workers on the same cores spin against each other and run many times slower. Tests that
    compare processes bit for bit set their thread counts themselves.

    The controller starts the one fork server its workers share (tests/helpers/zygote_client.py),
    unless ``--cpu-profile`` asks for each worker's own: it counts a server's children as the CPU
    of the worker that waits for them."""
    controller = getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput")
    if controller and not os.environ.get("TESTS_FRESH_PROCESSES") and not config.getoption("--cpu-profile", None):
        share = max(len(os.sched_getaffinity(0)) // len(config.option.tx), 1)
        os.environ.setdefault("OMP_NUM_THREADS", str(share))  # as each worker sets it below
        zygote_client.start_shared(procs.command_env(None))
        _fork_the_workers(config)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch

        share = max(len(os.sched_getaffinity(0)) // workers, 1)
        torch.set_num_threads(share)
        os.environ.setdefault("OMP_NUM_THREADS", str(share))  # and the processes tests start


def _fork_the_workers(config) -> None:
    """pytest-xdist's workers forked from the shared server too (``popen//python=`` its stand-in,
    tests/helpers/zygote_exec.py): each would otherwise import torch, torchvision and timm again
    to collect, about 7 s of CPU apiece on 2 cores, all at once at the start. The server must be
    ready first (one import, while the workers would have made three); a worker whose environment
    it cannot reproduce (OMP_NUM_THREADS set to another share) is a new interpreter as before."""
    python = zygote_client.worker_python(procs.command_env(None))  # waits for the server's "ready"
    if python is not None:
        config.option.tx = [f"popen//python={python}" if spec == "popen" else spec for spec in config.option.tx]


def pytest_collection_finish(session):
    """Collection leaves each worker a heap of modules, classes and torch's registries that lives to
    the end, and that every full garbage collection would walk again: freeze it, and collect the
    young generation less often. On a subset of the suite, garbage collection took 6 % of a worker's
    CPU; this took it to about 4 %."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)


def pytest_collection_modifyitems(config, items):
    """Slow tests first: pytest-xdist hands tests out in this order, and a long test started
    last would leave the other workers idle at the end (longest-first keeps them all busy)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    _tag_xdist_groups(config, items)


def _tag_xdist_groups(config, items) -> None:
    """pytest-xdist's ``--dist loadgroup`` sends the tests of one ``xdist_group`` to one worker by
    tagging their ids ``<id>@<group>``, which it does by assigning ``item._nodeid``. pytest 9
    reads ids from ``item._id``, so the tag is lost: the groups split across workers and the
    fixtures they share (the launch tests' reference runs, Keras models) were computed on each.
    Tag them where pytest reads the id; a no-op wherever xdist's own tag took."""
    if not getattr(config.option, "loadgroup", False):  # set on xdist workers under --dist loadgroup
        return
    for item in items:
        marks = item.iter_markers("xdist_group")
        group = "_".join(sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks}))
        if group and not item.nodeid.endswith("@" + group) and hasattr(item, "_id"):
            from _pytest.nodeid import NodeId

            item._id = NodeId.parse(f"{item.nodeid}@{group}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's folders are kept (pyproject's tmp_path_retention_policy = "failed"): its own
    tmp_path, and the shared folders its fixtures made (their paths among its arguments)."""
    report = yield
    if report.failed:
        item.config.stash.setdefault(_KEPT, set()).update(paths_among(getattr(item, "funcargs", {}).values()))
    return report


def pytest_sessionstart(session):
    session.config.stash[_STARTED] = time.time()


def pytest_sessionfinish(session, exitstatus):
    """pytest removes a passing test's tmp_path, and the whole folder of a session that passed; in a
    session with a failure it keeps the folders of tmp_path_factory.mktemp too (stand-in weights,
    Keras models: 1.8 GB of a full run). Those that no failed test used are removed here, in each
    process that ran tests (an xdist worker's folder is its own ``--basetemp``)."""
    config = session.config
    factory = getattr(config, "_tmp_path_factory", None)
    basetemp = getattr(factory, "_basetemp", None)
    xdist_controller = config.pluginmanager.has_plugin("dsession") and not hasattr(config, "workerinput")
    if basetemp is None or xdist_controller or config.getini("tmp_path_retention_policy") != "failed":
        return
    remove_unkept(Path(basetemp), config.stash.get(_KEPT, set()))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A SLURM test's jobs write their run dirs in the checkout (outputs/slurm/resnet-test/<job>-<id>):
    what a test leaves there is removed after it, and an earlier session's leftovers before it (the
    cluster's job ids start again after a restart, and a stale folder with a job's id is another job's)."""
    if item.get_closest_marker("slurm") is None:
        return (yield)
    started = item.config.stash.get(_STARTED, time.time())
    remove_run_dirs(TEST_CLUSTER_OUTPUTS, lambda p: p.lstat().st_mtime < started)
    before = set(TEST_CLUSTER_OUTPUTS.iterdir()) if TEST_CLUSTER_OUTPUTS.is_dir() else set()
    try:
        return (yield)
    finally:
        remove_run_dirs(TEST_CLUSTER_OUTPUTS, lambda p: p not in before)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny inputs: thread sync costs more than it saves (far more on a busy 2-core runner)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    from tests.helpers.imagegen import make_tiny_folder

    return make_tiny_folder(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A tiny 3-class model with random BN statistics, so its predictions differ by image."""
    from tests.helpers.models import save_tiny_checkpoint

    return save_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "last.pt")
