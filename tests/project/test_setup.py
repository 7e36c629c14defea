"""scripts/setup.sh installs what each of the README's commands needs, once per pyproject.toml: the
project for the demo, the project and its test extras for the tests. Run against a stand-in
interpreter that records each pip call (the real install takes minutes and is what CI runs)."""

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(
        f'#!/bin/sh\necho "$*" >> {tmp_path / "calls"}\n'  # and pip's lines, some of them progress
        'case "$*" in *"--progress-bar"*) printf "Collecting torch\\n  Downloading torch.whl (797 MB)\\n'
        'Requirement already satisfied: six\\n";; esac\n'
    )
    python.chmod(0o755)
    return python.parents[1]


def setup(venv: Path, *args: str) -> subprocess.CompletedProcess:
    # the data step is satisfied by a root holding the test labels (it checks for that file only)
    data = venv.parent / "fmnist"
    data.mkdir(exist_ok=True)
    (data / "t10k-labels-idx1-ubyte.gz").touch()
    env = {**os.environ, "VENV": str(venv), "FASHION_MNIST_ROOT": str(data)}
    return subprocess.run(["bash", "scripts/setup.sh", *args], cwd=REPO, env=env, capture_output=True, text=True)


def installs(venv: Path) -> list[str]:
    calls = venv.parent / "calls"
    lines = calls.read_text().splitlines() if calls.exists() else []
    calls.unlink(missing_ok=True)
    return [line for line in lines if line.startswith("-m pip install --progress-bar off -e")]


def test_demo_installs_the_project_alone_and_tests_add_their_extras_once(venv):
    digest = hashlib.sha1((REPO / "pyproject.toml").read_bytes()).hexdigest()[:12]
    assert setup(venv).returncode == 0
    assert installs(venv) == ["-m pip install --progress-bar off -e ."]
    assert [p.name for p in venv.glob(".installed-*")] == [f".installed-{digest}"]
    assert setup(venv).returncode == 0 and installs(venv) == []  # prepared: nothing to install

    assert setup(venv, "test").returncode == 0
    assert installs(venv) == ["-m pip install --progress-bar off -e .[test,dashboard]"]
    assert [p.name for p in venv.glob(".installed-*")] == [f".installed-{digest}-test"]
    assert setup(venv, "test").returncode == 0 and installs(venv) == []
    assert setup(venv).returncode == 0 and installs(venv) == []  # the test extras include the project


def test_the_install_shows_each_package_as_pip_collects_it(venv):
    done = setup(venv)
    assert done.returncode == 0
    assert "[setup]   Collecting torch\n[setup]   Downloading torch.whl (797 MB)\n" in done.stdout
    assert "Requirement already satisfied" not in done.stdout and "[setup] installed in " in done.stdout


def test_min_deps_installs_the_tests_at_the_lowest_bounds_in_a_venv_of_their_own(venv):
    done = setup(venv, "min-deps")
    assert done.returncode == 0, done.stderr
    assert installs(venv) == ["-m pip install --progress-bar off -e .[test] setuptools>=77"]  # no dashboard
    assert "each dependency at its lowest allowed version" in done.stdout


def test_a_changed_pyproject_installs_again(venv):
    (venv / ".installed-000000000000-test").touch()  # an older pyproject.toml's stamp
    assert setup(venv).returncode == 0
    assert installs(venv) == ["-m pip install --progress-bar off -e ."]
    assert not (venv / ".installed-000000000000-test").exists()


def test_unknown_extras_get_one_line_saying_what_to_type(venv):
    done = setup(venv, "tests")
    assert done.returncode == 2 and installs(venv) == []
    assert done.stderr.count("\n") == 1 and "bash scripts/setup.sh test" in done.stderr
