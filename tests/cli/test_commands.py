"""A command runs one way: its console script ``resnet-<name>`` of pyproject's ``[project.scripts]``,
whose module ``python -m resnet.cli.<name>`` runs it too; the old names ``python -m resnet.<name>``
are gone (no module, or a library module that runs nothing); each entry point names a callable; the
installed distribution's console scripts are pyproject's."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest

from tests.helpers import procs

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
DISTRIBUTION = "resnet-padding"
USAGE = ("usage:", "Override anything in the config")  # argparse's --help, Hydra's app help


def module_of(target: str) -> str:
    return target.partition(":")[0]


def old_module(target: str) -> str:
    """``resnet.cli.seed_table:main`` -> ``resnet.seed_table``, the name old scripts ran."""
    return module_of(target).replace("resnet.cli.", "resnet.", 1)


# One Python process runs every ``python -m <module> --help`` in turn (as runpy does for ``-m``),
# so that torch is imported once, not 18 times; a module that is not there ends as ``python -m`` does.
HELP_ALL = """
import contextlib, io, json, runpy, sys
from hydra.core.global_hydra import GlobalHydra
seen = {}
for module in sys.argv[1:]:
    out, err = io.StringIO(), io.StringIO()
    sys.argv = [module, "--help"]
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
        except ImportError as error:  # python -m: "No module named resnet.tables", exit 1
            code = 1
            print(error, file=err)
    GlobalHydra.instance().clear()  # each Hydra app starts as in its own process
    seen[module] = [code, out.getvalue(), err.getvalue()]
print(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def helps() -> dict[str, tuple[int, str, str]]:
    """(exit status, stdout, stderr) of ``python -m <module> --help`` of every command's module and of
    the old name it had."""
    modules = [name for target in SCRIPTS.values() for name in (module_of(target), old_module(target))]
    proc = procs.run([sys.executable, "-c", HELP_ALL, *modules], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {module: tuple(result) for module, result in json.loads(proc.stdout.splitlines()[-1]).items()}


def test_every_command_has_an_entry_point():
    commands = {
        "train",
        "eval",
        "cross",
        "tables",
        "seed_table",
        "demo",
        "detect",
        "regrid",
        "export",
        "inspect",
        "figures",
        "dashboard",
    }
    assert {module_of(target) for target in SCRIPTS.values()} == {f"resnet.cli.{name}" for name in commands}
    assert all(name == "resnet-" + module_of(target).rpartition(".")[2].replace("_", "-")
               for name, target in SCRIPTS.items())  # fmt: skip


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_the_entry_point_imports_and_is_callable(script):
    module, _, function = SCRIPTS[script].partition(":")
    assert callable(getattr(importlib.import_module(module), function))


@pytest.mark.xdist_group("helps")  # one worker runs the fixture's process
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_the_console_scripts_module_prints_usage(script, helps):
    module = module_of(SCRIPTS[script])
    code, stdout, stderr = helps[module]
    assert code == 0, f"python -m {module} --help: exit {code}\n{stderr[-3000:]}"
    assert any(usage in stdout for usage in USAGE), f"python -m {module} --help:\n{stdout[-3000:]}"


@pytest.mark.xdist_group("helps")
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_the_old_module_name_is_gone(script, helps):
    """``python -m resnet.<name>`` no longer runs the command: no such module (the shims), or the
    library module of that name (resnet.detect, ...), which has no ``__main__`` block and prints nothing."""
    module = old_module(SCRIPTS[script])
    code, stdout, stderr = helps[module]
    if importlib.util.find_spec(module) is None:
        assert code == 1 and f"No module named {module}" in stderr, (code, stderr[-3000:])
    else:
        source = Path(importlib.util.find_spec(module).origin).read_text()
        assert not re.search(r"^if __name__ == .__main__.:", source, re.M), f"{module} still runs as python -m"
        assert (code, stdout.strip()) == (0, ""), f"python -m {module} --help: exit {code}\n{stdout[-3000:]}"


def test_the_installed_console_scripts_are_pyprojects():
    try:
        distribution = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{DISTRIBUTION} is not installed: nothing to compare pyproject.toml with")
    installed = {ep.name: ep.value for ep in distribution.entry_points if ep.group == "console_scripts"}
    if not installed:
        pytest.skip(
            f"the installed {DISTRIBUTION} {distribution.version} metadata predates [project.scripts] "
            "(no console_scripts): reinstall (pip install -e .) to compare them"
        )
    assert installed == SCRIPTS


def test_an_installed_console_script_runs():
    # pip install -e . puts the entry points in the interpreter's scripts folder (scripts/setup.sh does it)
    script = procs.installed_script("resnet-inspect")
    if script is None:
        pytest.skip("resnet-inspect is not installed for this Python: pip install -e . puts it there")
    proc = procs.run([script, "resnet18", "--size", "224"], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "maxpool" in proc.stdout and "asymmetric" in proc.stdout  # the pads table


@pytest.mark.parametrize("script", ["resnet-detect", "resnet-seed-table"])
def test_a_command_without_configs_says_where_it_looked_in_one_line(script, tmp_path, monkeypatch, capsys):
    # an installed command run away from a checkout (pip install . ships no configs/)
    monkeypatch.setenv("RESNET_PADDING_CONFIGS", str(tmp_path / "nowhere"))
    monkeypatch.setattr(sys, "argv", [script])
    module, _, function = SCRIPTS[script].partition(":")
    with pytest.raises(SystemExit) as exit_:
        getattr(importlib.import_module(module), function)()
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and "\n" not in err, err
    assert err == (f"error: no configs/ with train.yaml in {tmp_path / 'nowhere'}; reinstall resnet-padding "
                   "or set RESNET_PADDING_CONFIGS=/path/to/checkout/configs")  # fmt: skip
