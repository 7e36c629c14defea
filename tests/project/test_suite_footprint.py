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

import ast
import tomllib
from pathlib import Path

from tests.helpers import footprint

REPO = Path(__file__).resolve().parents[2]


def test_pytest_keeps_only_failed_tests_folders_for_three_sessions():
    ini = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert ini["tmp_path_retention_policy"] == "failed"
    assert 1 <= ini["tmp_path_retention_count"] <= 3


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


def test_the_wheel_test_builds_under_its_tmp_path_and_removes_its_environment():
    tree = ast.parse((REPO / "tests" / "project" / "test_wheel.py").read_text())
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    test = functions["test_the_wheel_carries_the_configs_and_every_command_runs_from_an_empty_folder"]
    assert [a.arg for a in test.args.args] == ["tmp_path"]
    assert ast.unparse(test.body[-1]) == "shutil.rmtree(venv)"  # at the end: only once it passed
    source = ast.unparse(tree)
    assert "mkdtemp" not in source and "TemporaryDirectory" not in source and "gettempdir" not in source
