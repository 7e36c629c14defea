"""The project's frame without building anything: Dockerfile, CI script, README commands."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

from hydra import compose, initialize_config_dir

REPO = Path(__file__).resolve().parents[1]


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
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines() if line.strip()}
    copies = [rest for word, rest in dockerfile_instructions() if word == "COPY"]
    assert copies
    for rest in copies:
        *sources, _dest = shlex.split(rest)
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: no such file in the repo"
            assert source.rstrip("/") not in ignored, f"COPY {source} is excluded by .dockerignore"
    for must in (".venv", ".git", "outputs", "wandb"):
        assert must in ignored


def test_install_step_matches_pyproject_and_setup_script():
    runs = " ".join(rest for word, rest in dockerfile_instructions() if word == "RUN")
    install = re.search(r"pip install [^&]*?-e \"?\.\[(\w+)\]\"?", runs)
    assert install, "the image must pip install the project as the README does"
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert install.group(1) in extras
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert f'-e ".[{install.group(1)}]"' in setup, "README's set-up installs other extras than the image"


def test_image_runs_as_a_non_root_user_from_the_repo_root():
    rows = dockerfile_instructions()
    users = [rest for word, rest in rows if word == "USER"]
    assert users and users[-1] not in ("root", "0")
    workdir = [rest for word, rest in rows if word == "WORKDIR"][-1]
    copies_to_root = [rest for word, rest in rows if word == "COPY" and rest.endswith(" ./")]
    assert workdir.startswith("/") and any("train.py" in c for c in copies_to_root)
    assert rows[0][0] in ("ARG", "FROM") and any(word == "FROM" for word, _ in rows)
    base = [rest for word, rest in rows if word == "ARG" and rest.startswith("BASE_IMAGE=")]
    assert base and "cuda" in base[0], "a CUDA-enabled PyTorch base image"


def test_default_command_and_documented_runs_compose():
    cmd = [rest for word, rest in dockerfile_instructions() if word == "CMD"][-1]
    assert cmd.replace(" ", "") == '["python","train.py"]'
    readme = (REPO / "README.md").read_text()
    runs = re.findall(r"docker run [^\n]*? (?:python|torchrun [^\n]*?) train\.py([^\n`]*)", readme)
    assert len(runs) >= 2, "the README documents docker run ... python train.py / torchrun train.py"
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        compose(config_name="train")  # the image's default command
        for args in runs:
            overrides = [a for a in shlex.split(args) if "=" in a]
            compose(config_name="train", overrides=overrides)


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    first_blocks = re.findall(r"```(?:bash|sh)\n(.*?)```", readme, re.S)[:2]
    assert len(first_blocks) == 2, "the README starts with the two commands"
    test_command = first_blocks[1].strip().splitlines()[-1].strip()
    assert test_command in ci, f"CI must run the README's test command: {test_command}"
    assert "set -e" in ci or "set -euo pipefail" in ci


def test_gitignore_covers_run_outputs():
    ignored = (REPO / ".gitignore").read_text()
    for pattern in ("outputs/", "multirun/", "wandb/", "*.pt", ".venv/"):
        assert pattern in ignored
