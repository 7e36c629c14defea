"""The wheel, as ``pip install .`` makes it: built from a clean copy of the tracked files, installed
into a new virtual environment, and every console script run from an empty folder, away from any
checkout. The dependencies come from this interpreter's site-packages (a path in the new
environment, not an install), so nothing is downloaded. The LICENSE file is the license pyproject.toml
names, and the wheel and the sdist carry it.

Everything is built and installed under the test's tmp_path (about 10 MB: the copy, the wheel, the
environment, its runs), which pytest removes when the test passes (pyproject's
tmp_path_retention_policy = "failed") and keeps when it fails; the environment goes at the end of a
passing test whatever the policy."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers.git_tree import git_over_the_tree

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
SCRIPTS = PROJECT["scripts"]
QUICK = ["data=synthetic", "model=resnet_tiny", "epochs=1", "max_steps_per_epoch=2", "batch_size=32"]
# What identifies a license's text, by its SPDX name (pyproject's `license`): the SPDX template's title
# and clauses, whitespace aside. MIT's condition tells it from MIT-0, which has none.
LICENSE_TEXTS = {
    "MIT": [
        "MIT License",
        "Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated "
        'documentation files (the "Software"), to deal in the Software without restriction, including without '
        "limitation the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the "
        "Software, and to permit persons to whom the Software is furnished to do so, subject to the following "
        "conditions:",
        "The above copyright notice and this permission notice shall be included in all copies or substantial "
        "portions of the Software.",
        'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT '
        "LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO "
        "EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN "
        "AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE "
        "OR OTHER DEALINGS IN THE SOFTWARE.",
    ],
}
COPYRIGHT = "Copyright (c) 2026 the resnet-padding authors"


def build(tmp_path: Path, kind: str) -> Path:
    """The ``wheel`` or ``sdist`` of a clean copy of the files git would keep (building in the
    checkout would leave build/), as pip wheel and python -m build call the backend."""
    source, out = tmp_path / "source", tmp_path / kind
    if not source.is_dir():
        ls_files = [*git_over_the_tree(tmp_path), "ls-files", "--cached", "--others", "--exclude-standard"]
        listed = subprocess.run(ls_files, cwd=REPO, capture_output=True, text=True, check=True)
        for name in listed.stdout.split():
            if (REPO / name).is_file():
                (source / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / name, source / name)
    out.mkdir()
    call = f"from setuptools.build_meta import build_{kind}; build_{kind}({str(out)!r})"
    subprocess.run([sys.executable, "-c", call], cwd=source, check=True, capture_output=True, timeout=300)
    (built,) = out.glob("resnet_padding-*.whl" if kind == "wheel" else "resnet_padding-*.tar.gz")
    return built


def new_venv(tmp_path: Path, wheel: Path) -> Path:
    """A new virtual environment with the wheel installed by pip, its scripts included; the
    dependencies are this interpreter's, on its path."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    (purelib,) = (venv / "lib").glob("python3*/site-packages")
    (purelib / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # a path, its own .pth files unread
    subprocess.run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q", "--no-deps",
                    "--no-index", wheel], check=True, capture_output=True, timeout=300)  # fmt: skip
    return venv


def test_pyprojects_package_list_is_every_package_folder_and_every_config_folder():
    """[tool.setuptools] lists the packages (the configs are one, mapped from configs/): a new
    folder of code or configs must be listed, or the wheel leaves it out."""
    from setuptools import find_namespace_packages

    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    code = [name for name in find_namespace_packages(str(REPO), include=["resnet*", "data*"])
            if any((REPO / name.replace(".", "/")).glob("*.py"))]  # fmt: skip
    configs = ["resnet.configs" + ".".join(("", *p.relative_to(REPO / "configs").parts))
               for p in [REPO / "configs", *(REPO / "configs").rglob("*")] if p.is_dir()]  # fmt: skip
    assert sorted(setuptools["packages"]) == sorted(code + configs)
    assert setuptools["package-dir"] == {"resnet.configs": "configs"}


def test_the_license_file_is_the_license_pyproject_names():
    text = (REPO / "LICENSE").read_text()
    assert PROJECT["license-files"] == ["LICENSE"] and PROJECT["license"] in LICENSE_TEXTS, (
        f"license = {PROJECT['license']!r}: add its text's clauses to LICENSE_TEXTS"
    )
    flat = " ".join(text.split())
    missing = [clause[:60] for clause in LICENSE_TEXTS[PROJECT["license"]] if clause not in flat]
    assert not missing, f"LICENSE is not the {PROJECT['license']} license: it lacks {missing}"
    assert text.startswith(LICENSE_TEXTS[PROJECT["license"]][0] + "\n") and COPYRIGHT in text.splitlines()


@pytest.mark.slow
def test_the_sdist_carries_the_license(tmp_path):
    with tarfile.open(build(tmp_path, "sdist")) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        assert "LICENSE" in names
        license = archive.extractfile(next(m for m in archive.getmembers() if m.name.endswith("/LICENSE")))
        assert license.read() == (REPO / "LICENSE").read_bytes()


@pytest.mark.slow
def test_the_wheel_carries_the_configs_and_every_command_runs_from_an_empty_folder(tmp_path):
    wheel = build(tmp_path, "wheel")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (info,) = {name.split("/")[0] for name in names if name.split("/")[0].endswith(".dist-info")}
        assert archive.read(f"{info}/licenses/LICENSE") == (REPO / "LICENSE").read_bytes()
        metadata = archive.read(f"{info}/METADATA").decode()
    assert re.search(rf"^License-Expression: {re.escape(PROJECT['license'])}$", metadata, re.M)
    assert re.search(r"^License-File: LICENSE$", metadata, re.M)
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"resnet", "data"}  # not benchmarks/ or tests/, which would collide with others' packages
    configs = {f"resnet/configs/{p.relative_to(REPO / 'configs')}" for p in (REPO / "configs").rglob("*.yaml")}
    assert configs and configs <= names, f"configs not in the wheel: {sorted(configs - names)[:5]}"

    venv = new_venv(tmp_path, wheel)
    bin_dir, empty = venv / "bin", tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RESNET_PADDING_CONFIGS")}
    env |= {"PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "WANDB_MODE": "disabled", "RESNET_PROGRESS": "off"}

    def run(*words: str) -> subprocess.CompletedProcess:
        return subprocess.run([bin_dir / words[0], *words[1:]], cwd=empty, env=env, capture_output=True, text=True,
                              timeout=600)  # fmt: skip

    assert set(SCRIPTS) >= {"resnet-train", "resnet-eval"}
    with ThreadPoolExecutor(2) as pool:  # every script's --help (argparse's or Hydra's), two at a time
        helps = dict(zip(SCRIPTS, pool.map(lambda script: run(script, "--help"), SCRIPTS)))
    for script, proc in helps.items():
        assert proc.returncode == 0 and ("usage:" in proc.stdout or "Override anything" in proc.stdout), (
            f"{script} --help from an empty folder: rc {proc.returncode}\n{proc.stderr[-2000:]}"
        )

    where = run("python", "-c", "import resnet, resnet.config as c; print(resnet.__file__); print(c.config_dir())")
    assert where.stdout.split() == [
        str(next((venv / "lib").glob("python3*/site-packages")) / "resnet" / "__init__.py"),
        str(next((venv / "lib").glob("python3*/site-packages")) / "resnet" / "configs"),
    ]

    trained = run("resnet-train", *QUICK, "hydra.run.dir=run")
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert (empty / "run" / "last.pt").is_file() and (empty / "run" / "train.log").is_file()
    assert f"resnet-eval weights={empty}/run/last.pt data=synthetic" in trained.stdout  # what to type next
    evaluated = run("resnet-eval", "weights=run/last.pt", "data=synthetic", "results_file=eval.jsonl")
    assert evaluated.returncode == 0 and (empty / "eval.jsonl").is_file(), evaluated.stderr[-3000:]
    detected = run("resnet-detect", "weights=run/last.pt", "data=synthetic")
    assert detected.returncode == 0, detected.stderr[-3000:]
    demo = run("resnet-demo", "--out", "demo", "--no-grid", "--no-regrid", *QUICK[1:], "val_images=200")
    assert demo.returncode == 0 and (empty / "demo" / "cross.md").is_file(), demo.stdout[-2000:] + demo.stderr[-3000:]

    # an installed package's user is told the package's extra, not a checkout's `pip install -e .`
    no_extra = "import sys; sys.modules['wandb_workspaces'] = None; from resnet.cli.dashboard import main; main()"
    dashboard = run("python", "-c", no_extra, "--entity", "e", "--dry-run", "spec.json")
    assert dashboard.returncode == 2 and not (empty / "spec.json").exists(), dashboard.stderr[-2000:]
    said = dashboard.stderr.strip()
    assert said.startswith("error: resnet-dashboard needs its dashboard extra") and "--dry-run too" in said, said
    assert said.endswith(": pip install 'resnet-padding[dashboard]'"), said
    shutil.rmtree(venv)  # passed: nothing to look into (tests/project/test_suite_footprint.py)
