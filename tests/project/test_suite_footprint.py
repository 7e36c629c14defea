"""What a test run leaves on disk. A full run (-n 3) left 3.3 GB under /tmp/pytest-of-$USER, kept
for three runs (pytest's default policy keeps every folder): Keras, torchvision and fbtorch weights
in module fixtures' folders (1.8 GB), and the weights' tests' own folders (1.5 GB). Now a passing
test's tmp_path is removed as it ends, a passing session's folder with it (0 bytes left), and a
failing session keeps its failed tests' folders and the shared folders they used, nothing else
(tests/conftest.py). The weights' tests alone (models/test_weights*.py, report/test_seed_table.py,
evaluation/test_regrid.py, data/test_file_limits.py, -n 2) left 2.5 GB; now nothing when they pass,
43 MB with one regrid test failed. SLURM tests' jobs write in the checkout
(outputs/slurm/resnet-test): what they leave is removed after each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import footprint

REPO = Path(__file__).resolve().parents[2]


SESSION = """
import pytest

@pytest.fixture(scope="session")
def shared(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shared")
    (folder / "weights.h5").write_bytes(b"x" * 1000)
    return folder

def test_passes(tmp_path, shared):
    (tmp_path / "big.pt").write_bytes(b"x" * 1000)

def test_fails(tmp_path):
    (tmp_path / "kept.pt").write_bytes(b"x")
    assert {fail}
"""


@pytest.mark.parametrize("fail", [False, True])
def test_a_session_under_this_projects_settings_leaves_only_its_failed_tests_folders(tmp_path, fail):
    """A session run with pyproject's pytest settings (its tmp_path retention): a passing one leaves
    nothing in the temporary root; a failing one its failed test's folder, not the passing test's."""
    (tmp_path / "session").mkdir()
    (tmp_path / "session" / "test_s.py").write_text(SESSION.format(fail=not fail))
    root = tmp_path / "root"
    root.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path / "session"),
         "-p", "no:cacheprovider", "-q", str(tmp_path / "session" / "test_s.py")],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTEST_DEBUG_TEMPROOT": str(root)},
    )  # fmt: skip
    assert done.returncode == (1 if fail else 0), done.stdout[-2000:]
    left = sorted(str(p.relative_to(root)).split("/", 2)[-1] for p in root.rglob("*.pt"))
    assert left == (["test_fails0/kept.pt"] if fail else [])
    assert not list(root.rglob("big.pt"))


def test_a_failed_sessions_shared_folders_go_unless_a_failed_test_used_them(tmp_path):
    for name in ("test_failed0", "weights0", "ckpt0", "tiny3"):
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "sub" / "big.h5").write_bytes(b"x")
    kept = [tmp_path / "test_failed0", tmp_path / "ckpt0" / "sub" / "big.h5", Path("/elsewhere"), tmp_path]
    removed = footprint.remove_unkept(tmp_path, kept)
    assert [p.name for p in removed] == ["tiny3", "weights0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt0", "test_failed0"]


def test_a_failed_test_keeps_the_paths_among_its_arguments():
    found = footprint.paths_among([Path("/t/a"), ("/t/b", 3), {"k": Path("/t/c")}, "word", None, [Path("/t/d")]])
    assert found == {Path("/t/a"), Path("/t/b"), Path("/t/c"), Path("/t/d")}


def test_slurm_run_dirs_go_and_their_empty_parents_with_them(tmp_path, monkeypatch):
    monkeypatch.setattr(footprint, "REPO", tmp_path)
    folder = tmp_path / "outputs" / "slurm" / "resnet-test"
    (folder / "stop-usr1-12").mkdir(parents=True)
    (folder / "stop-usr1-12" / "last.pt").write_bytes(b"x")
    (folder / "kept-13").mkdir()
    footprint.remove_run_dirs(folder, lambda p: p.name != "kept-13")
    assert [p.name for p in folder.iterdir()] == ["kept-13"]
    footprint.remove_run_dirs(folder, lambda p: True)
    assert not (tmp_path / "outputs").exists()
