"""The documentation's frame: README.md short, every relative link in README.md and docs/*.md a file of
the repo (and an anchor, a heading of that file), no test function names, nothing outside the repo;
every path docs/code_map.md names a path of the repo; and every README command that a CPU runs in
seconds runs, as written (with options that make it quick)."""

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import procs
from tests.helpers.builtin_data import require_fashion_mnist

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    found = set()
    for title in re.findall(r"^#+ (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_the_readme_fits_on_about_200_lines():
    assert len((REPO / "README.md").read_text().splitlines()) < 220


def test_the_readmes_pad_table_is_what_resnet_inspect_prints_for_every_preset():
    """README's "Choosing the padding" table is ``resnet-inspect resnet50 --size 224`` over every preset
    of PRESETS: a preset added, or a pad changed, shows there or this fails."""
    from resnet.inspect import format_pad_tables
    from resnet.padding import PRESETS

    printed = format_pad_tables("resnet50", [224], list(PRESETS)).splitlines()[2:]  # the table, its title apart
    readme = (REPO / "README.md").read_text().splitlines()
    start = readme.index(printed[0])
    assert readme[start : start + len(printed) + 1] == [*printed, ""]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_resolves_to_a_file_of_the_repo(doc):
    broken = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        outside = not file.is_file() or REPO not in file.parents
        if outside or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    assert not broken, f"{doc.name}: {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_test_function_names_and_nothing_outside_the_repo(doc):
    text = doc.read_text()
    names = re.findall(r"::test_\w+|\btest_[a-z0-9_]+\(|(?<![/.\w])test_[a-z0-9]+_[a-z0-9_]+(?!\.py|[\w/])", text)
    assert not names, f"{doc.name} names tests (name their files instead): {names[:5]}"
    assert "../shared" not in text


# --- the code map and its recipes name files that exist ----------------------------------------

CODE_MAP = REPO / "docs" / "code_map.md"
CODE_SUFFIXES = (".py", ".yaml", ".sh", ".sbatch", ".md", ".toml")  # a bare name with one of these is a file here


def code_map_paths(text: str) -> list[tuple[str, Path]]:
    """Every backticked path of ``text`` and where it must be: a token with a '/' (``resnet/padding.py``,
    ``configs/experiment/``; a ``<placeholder>`` segment: its folder) from the repo root; a bare file name
    (``loop.py``) in the folder its row, list item or paragraph named last, or else at the root."""
    found = []
    units, unit = [], []
    for line in text.splitlines():  # a table row, a list item or a paragraph: where a bare name's folder is named
        if not line.strip() or line.startswith("|") or re.match(r"\s*(\d+\.|-) ", line):
            units.append(unit)
            unit = []
        unit.append(line)
    units.append(unit)
    for lines in units:
        folder = None
        for token in re.findall(r"`([^`\s]+)`", " ".join(lines)):
            if "/" in token and not token.startswith("/"):
                path = token.split("<")[0].rpartition("/")[0] if "<" in token else token
                found.append((token, REPO / path))
                if token.endswith("/") and "<" not in token:
                    folder = REPO / token
            elif token.endswith(CODE_SUFFIXES) and re.fullmatch(r"[\w.-]+", token):
                where = folder / token if folder is not None and (folder / token).exists() else REPO / token
                found.append((token, where))
    return found


def test_every_path_the_code_map_and_its_recipes_name_exists():
    text = CODE_MAP.read_text()
    for recipe in ("a padding scheme", "a dataset", "a metric", "a recipe"):
        assert f"## How to add {recipe}" in text, recipe
    paths = code_map_paths(text)
    assert len(paths) > 50, f"the map names only {len(paths)} paths: is the parsing still right?"
    missing = sorted({token for token, path in paths if not path.exists()})
    assert not missing, f"docs/code_map.md names paths that do not exist: {missing}"


def test_the_code_map_check_catches_a_path_that_moved():
    stale = (
        "| engine | `resnet/engine/`: `run.py`, `gone.py` |\n\n`resnet/nowhere.py`, `configs/none/<name>.yaml`, `x.py`"
    )
    missing = sorted(token for token, path in code_map_paths(stale) if not path.exists())
    assert missing == ["configs/none/<name>.yaml", "gone.py", "resnet/nowhere.py", "x.py"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_command_is_written_as_its_console_script(doc):
    """One spelling of a command: ``resnet-<name>`` (pyproject's [project.scripts]), never
    ``python -m resnet.<name>`` (the old module names are gone; python -m resnet.cli.<name> is the
    module behind the script, not what the documentation tells a user to type)."""
    lines = [f"{n}: {line.strip()}" for n, line in enumerate(doc.read_text().splitlines(), 1)
             if "python -m resnet." in line]  # fmt: skip
    assert not lines, f"{doc.name}: write resnet-<name> instead:\n" + "\n".join(lines)


# --- every README command that a CPU runs in seconds runs ------------------------------------

# Commands that cannot run here in seconds (matched by their start), and where they are checked.
NOT_RUN = {
    "bash scripts/demo.sh": "the main job, minutes: its code in test_demo.py, its set-up in test_setup.py",
    "bash scripts/test.sh": "this suite",
    "torchrun --nproc_per_node=8 train.py +experiment=tv_v1 data.root=/data/imagenet": "ImageNet on 8 GPUs",
    "python train.py -m hydra/launcher=submitit_slurm": "a SLURM cluster: test_slurm.py runs this sweep",
    "docker ": "a Docker engine: scripts/docker_check.sh",
    ".venv/bin/python -m pip wheel": "wheels for the GPU machine",
    "bash scripts/gpu_check.sh": "a GPU: test_gpu_check.py runs its CPU smoke run",
}
# Appended to a command so that it takes seconds (a key it sets already is replaced).
QUICK = {
    "train.py": ["epochs=1", "max_steps_per_epoch=2", "val_images=50"],
    "eval.py": ["val_images=50"],
    "resnet-cross": ["val_images=50"],
    "resnet-detect": ["images=20"],
    "resnet-regrid": ["images=16", "epochs=1"],
}


def readme_commands() -> list[str]:
    """Each command of README.md's ```bash blocks, continuation lines joined, comments dropped."""
    blocks = re.findall(r"^```bash\n(.*?)^```", (REPO / "README.md").read_text(), re.S | re.M)
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(shlex.join(words))
    return commands


def quick(words: list[str]) -> list[str]:
    extra = next((options for name, options in QUICK.items() if name in words), [])
    keys = {option.partition("=")[0] for option in extra}
    return [w for w in words if w.partition("=")[0] not in keys] + extra


def activated_env() -> dict[str, str]:
    """The environment after the README's ``source .venv/bin/activate``, sourced for real (the
    venv of this interpreter: .venv, or .venv-min under scripts/test.sh --min-deps); in the Docker
    image, whose Python has the project and no venv, its own."""
    activate = Path(sys.executable).parent / "activate"
    if not activate.is_file():
        return dict(os.environ)
    done = subprocess.run(["bash", "-c", f"source {shlex.quote(str(activate))} && env -0"], cwd=REPO,
                          capture_output=True, check=True)  # fmt: skip
    return dict(item.split("=", 1) for item in done.stdout.decode().split("\0") if "=" in item)


@pytest.mark.slow
def test_every_readme_command_that_a_cpu_runs_in_seconds_runs(tmp_path):
    """From a scratch folder holding the entry scripts and configs, in the README's order, each with
    :data:`QUICK`'s options; a checkpoint the README names by a placeholder is the run's own."""
    require_fashion_mnist()
    commands = readme_commands()
    assert all(any(c.startswith(start) for c in commands) for start in NOT_RUN), "a NOT_RUN entry is stale"
    for name in ("train.py", "eval.py", "configs"):  # a checkout's, without its outputs/ and results/
        (tmp_path / name).symlink_to(REPO / name)
    env, ran, trained = activated_env(), [], {}
    for command in dict.fromkeys(commands):  # each once, in order
        if command == "source .venv/bin/activate" or command.startswith(tuple(NOT_RUN)):
            continue
        words = quick(shlex.split(command))
        latest = max(tmp_path.glob("outputs/*/*/last.pt"), key=lambda p: p.stat().st_mtime, default=None)
        for i, word in enumerate(words):
            word = word.replace("outputs/<date>/<time>/last.pt", str(latest))
            words[i] = word.replace("results/demo/train_asymmetric/last.pt", str(trained.get("asymmetric")))
        words[0] = shutil.which(words[0], path=env["PATH"])
        done = procs.run(words, env, cwd=tmp_path, timeout=240)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        if "train.py" in words:
            run_dir = max(tmp_path.glob("outputs/*/*/"), key=lambda p: p.stat().st_mtime)
            assert (run_dir / "results.json").is_file() and f"{run_dir.name}/last.pt" in done.stdout
            scheme = next((w.split("=")[1] for w in words if w.startswith("+padding=")), "default")
            trained[scheme] = run_dir / "last.pt"
            time.sleep(1)  # outputs/<date>/<time>: the next run gets a folder of its own
        ran.append(command)
    assert len(ran) >= 7, ran  # the first run, the demo's recipe, eval, train, tables, detect, regrid
