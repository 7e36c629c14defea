"""Every command of pyproject's ``[project.scripts]`` runs as ``python -m resnet.cli.<name>`` and, for
old scripts, as ``python -m resnet.<name>``; each entry point names a callable; the installed
distribution's console scripts are pyproject's."""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
DISTRIBUTION = "resnet-padding"
USAGE = ("usage:", "Override anything in the config")  # argparse's --help, Hydra's app help


def module_of(target: str) -> str:
    return target.partition(":")[0]


def old_module(target: str) -> str:
    """``resnet.cli.seed_table:main`` -> ``resnet.seed_table``, the name old scripts run."""
    return module_of(target).replace("resnet.cli.", "resnet.", 1)


@pytest.fixture(scope="module")
def helps() -> dict[str, subprocess.CompletedProcess]:
    """``python -m <module> --help`` of every command under both names, a few at a time (each
    starts Python and imports torch)."""
    modules = [name for target in SCRIPTS.values() for name in (module_of(target), old_module(target))]

    def run(module: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True,
                              timeout=300)  # fmt: skip

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(modules, pool.map(run, modules)))


def test_every_command_has_an_entry_point():
    commands = {"tables", "seed_table", "demo", "detect", "regrid", "export", "inspect", "figures", "dashboard"}
    assert {module_of(target) for target in SCRIPTS.values()} == {f"resnet.cli.{name}" for name in commands}
    assert all(name == "resnet-" + module_of(target).rpartition(".")[2].replace("_", "-")
               for name, target in SCRIPTS.items())  # fmt: skip


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_the_entry_point_imports_and_is_callable(script):
    module, _, function = SCRIPTS[script].partition(":")
    assert callable(getattr(importlib.import_module(module), function))


@pytest.mark.slow  # starts two Python processes per command
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_both_module_names_print_usage(script, helps):
    for module in (module_of(SCRIPTS[script]), old_module(SCRIPTS[script])):
        proc = helps[module]
        assert proc.returncode == 0, f"python -m {module} --help: exit {proc.returncode}\n{proc.stderr[-3000:]}"
        assert any(usage in proc.stdout for usage in USAGE), f"python -m {module} --help:\n{proc.stdout[-3000:]}"


def test_the_installed_console_scripts_are_pyprojects():
    try:
        distribution = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{DISTRIBUTION} is not installed: nothing to compare pyproject.toml with")
    installed = {ep.name: ep.value for ep in distribution.entry_points if ep.group == "console_scripts"}
    if not installed:
        pytest.skip(f"the installed {DISTRIBUTION} {distribution.version} metadata predates [project.scripts] "
                    "(no console_scripts): reinstall (pip install -e .) to compare them")
    assert installed == SCRIPTS
