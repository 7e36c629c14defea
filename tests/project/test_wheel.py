"""The wheel, as ``pip install .`` makes it: built from a clean copy of the tracked files, installed
into a new virtual environment, and every console script run from an empty folder, away from any
checkout. The dependencies come from this interpreter's site-packages (a path in the new
environment, not an install), so nothing is downloaded."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers.git_tree import git_over_the_tree

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
QUICK = ["data=synthetic", "model=resnet_tiny", "epochs=1", "max_steps_per_epoch=2", "batch_size=32"]


def build_wheel(tmp_path: Path) -> Path:
    """The wheel of a clean copy of the files git would keep (building in the checkout would leave build/)."""
    source, wheel_dir = tmp_path / "source", tmp_path / "wheel"
    listed = subprocess.run([*git_over_the_tree(tmp_path), "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    for name in listed:
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    wheel_dir.mkdir()
    build = f"from setuptools.build_meta import build_wheel; build_wheel({str(wheel_dir)!r})"  # what pip wheel calls
    subprocess.run([sys.executable, "-c", build], cwd=source, check=True, capture_output=True, timeout=300)
    (wheel,) = wheel_dir.glob("resnet_padding-*.whl")
    return wheel


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


@pytest.mark.slow
def test_the_wheel_carries_the_configs_and_every_command_runs_from_an_empty_folder(tmp_path):
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
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
