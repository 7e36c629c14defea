"""The project's frame without building anything: Dockerfile, CI script, README commands."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from resnet.config import ConfigError, check_data_package
from tests.helpers.compose import compose_config
from tests.helpers.git_tree import git_over_the_tree

REPO = Path(__file__).resolve().parents[2]


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            rows.append((word.upper(), rest.strip()))
    return rows


def test_every_copy_source_exists_and_is_not_ignored():
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}  # fmt: skip
    copies = [rest for word, rest in dockerfile_instructions() if word == "COPY"]
    assert copies
    for rest in copies:
        *sources, _dest = shlex.split(rest)
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: no such file in the repo"
            assert source.rstrip("/") not in ignored, f"COPY {source} is excluded by .dockerignore"
    for must in (".venv", ".git", "outputs", "wandb"):
        assert must in ignored
    # the image holds the checkout (its tests read Dockerfile, .ci/run, docs/) less what git ignores
    gitignored = {line.strip().strip("/") for line in (REPO / ".gitignore").read_text().splitlines()
                  if line.strip() and not line.startswith("#")}  # fmt: skip
    assert {name.rstrip("/") for name in gitignored} <= ignored | {"__pycache__"}


def test_install_step_matches_pyproject_and_setup_script():
    runs = " ".join(rest for word, rest in dockerfile_instructions() if word == "RUN")
    install = re.search(r"pip install [^&]*?-e \"?\.\[([\w,]+)\]\"?", runs)
    assert install, "the image must pip install the project as the README does"
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(install.group(1).split(",")) <= set(extras)
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert f'-e ".[{install.group(1)}]"' in setup, "README's set-up installs other extras than the image"


def test_image_runs_as_a_non_root_user_from_the_repo_root():
    rows = dockerfile_instructions()
    users = [rest for word, rest in rows if word == "USER"]
    assert users and users[-1] not in ("root", "0")
    workdir = [rest for word, rest in rows if word == "WORKDIR"][-1]
    copies_to_root = [rest for word, rest in rows if word == "COPY" and rest.endswith(" ./")]
    assert workdir.startswith("/") and ". ./" in copies_to_root  # the checkout, train.py at the working dir
    assert rows[0][0] in ("ARG", "FROM") and any(word == "FROM" for word, _ in rows)
    base = [rest for word, rest in rows if word == "ARG" and rest.startswith("BASE_IMAGE=")]
    assert base and "python:3.11" in base[0], "the README's Python (torch's wheels bring CUDA)"


def test_dependencies_are_layers_before_the_code_and_torch_is_the_tested_one():
    rows = dockerfile_instructions()
    arg = dict(rest.split("=", 1) for word, rest in rows if word == "ARG" and "=" in rest)
    readme = (REPO / "README.md").read_text()
    assert f"torch {arg['TORCH_VERSION']}" in readme and f"torchvision {arg['TORCHVISION_VERSION']}" in readme
    code = (".", "resnet", "data")
    first_code = next(i for i, (word, rest) in enumerate(rows) if word == "COPY" and rest.split()[0] in code)
    runs = [(i, rest) for i, (word, rest) in enumerate(rows) if word == "RUN"]
    torch_layer = next(i for i, rest in runs if '"torch==${TORCH_VERSION}"' in rest)
    deps_layer = next(i for i, rest in runs if "requirements.txt" in rest)
    copies_before = [rest for word, rest in rows[:deps_layer] if word == "COPY"]
    assert torch_layer < deps_layer < first_code and copies_before == ["pyproject.toml ./"]
    install = next(rest for i, rest in runs if i > first_code and "-e" in rest)
    assert "--no-deps" in install  # the code's layer fetches nothing


def test_default_command_and_documented_runs_compose():
    cmd = [rest for word, rest in dockerfile_instructions() if word == "CMD"][-1]
    assert cmd.replace(" ", "") == '["python","train.py"]'
    readme = (REPO / "README.md").read_text()
    runs = re.findall(r"docker run [^\n]*? (?:python|torchrun [^\n]*?) train\.py([^\n`]*)", readme)
    assert len(runs) >= 2, "the README documents docker run ... python train.py / torchrun train.py"
    compose_config("train")  # the image's default command
    for args in runs:
        compose_config("train", *[a for a in shlex.split(args) if "=" in a])


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    first_blocks = re.findall(r"```(?:bash|sh)\n(.*?)```", readme, re.S)[:2]
    assert len(first_blocks) == 2, "the README starts with the two commands"
    test_command = first_blocks[1].strip().splitlines()[-1].strip()
    assert test_command in ci, f"CI must run the README's test command: {test_command}"
    assert "set -e" in ci or "set -euo pipefail" in ci


def test_run_outputs_are_never_committed(tmp_path):
    outputs = ["outputs/2025-01-01/12-00-00/last.pt", "multirun/x/0/metrics.csv", "wandb/run-1/files/a",
               "results/eval.jsonl", "some/dir/model.pt", ".venv/bin/python"]  # fmt: skip
    proc = subprocess.run([*git_over_the_tree(tmp_path), "check-ignore", "--no-index", *outputs], cwd=REPO,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.stdout.split() == outputs, f"not ignored: {sorted(set(outputs) - set(proc.stdout.split()))}"


def test_a_shadowing_data_package_is_refused_in_one_line(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "__init__.py").write_text("")  # someone else's data/ package, first on the path
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "data", raising=False)  # as in a fresh process
    with pytest.raises(ConfigError, match=f"'data' package imported here is {tmp_path / 'data'}.*another directory"):
        check_data_package()
