"""What a new user meets in the first hour, from the README alone: user commands need no test tools
(export names its extra in one line, the seed-table recipe runs without pytest), one naming rule for
the commands, lint that a folder in the working tree cannot change, and the README's facts; what a
training run says: a validation subset named as one wherever its numbers are shown,
train.log holding the run's lines, and the last line the eval.py command of its last.pt."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from resnet.config import ConfigError
from resnet.evaluation.run import evaluate_weights
from resnet.export import EXPORT_EXTRA, EXPORT_MODULES, missing_export_tools
from resnet.inspect import pad_table
from resnet.model import build_model
from tests.helpers.compose import compose_config
from tests.helpers.procs import REPO, run
from tests.helpers.training import run_in_process

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
README = (REPO / "README.md").read_text()

# In one Python with the named modules made unimportable: run each command line, then import each module.
BLOCKED = """
import contextlib, io, json, importlib, runpy, sys, warnings
warnings.simplefilter("ignore", RuntimeWarning)  # runpy's, on running a module this process has imported
blocked, commands, modules = json.loads(sys.argv[1])
for name in blocked:
    sys.modules[name] = None  # `import name` raises ImportError
seen = {"commands": [], "modules": {}}
for argv in commands:
    err, out = io.StringIO(), io.StringIO()
    sys.argv = argv
    code = 0
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) or exit.code is None else 1
            if not isinstance(exit.code, (int, type(None))):
                err.write(str(exit.code) + "\\n")
    from hydra.core.global_hydra import GlobalHydra
    GlobalHydra.instance().clear()
    seen["commands"].append([code or 0, out.getvalue(), err.getvalue()])
for module in modules:
    try:
        exec(module) if " " in module else importlib.import_module(module)
        seen["modules"][module] = "ok"
    except ImportError as error:
        seen["modules"][module] = str(error)
print(json.dumps(seen))
"""


def run_blocked(tmp_path: Path, blocked: list[str], commands: list[list[str]], modules: list[str]) -> dict:
    proc = run([sys.executable, "-c", BLOCKED, json.dumps([blocked, commands, modules])], cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_export_without_its_extra_prints_help_and_says_in_one_line_what_to_install(tmp_path):
    commands = [["resnet.cli.export", "--help"], ["resnet.cli.export", "weights=w.pt", "out=m.onnx"]]
    seen = run_blocked(tmp_path, ["onnx"], commands, [])
    (help_code, help_out, _), (code, _, err) = seen["commands"]
    assert help_code == 0 and "out" in help_out
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith("resnet-export: ONNX export needs onnx") and f"pip install -e '{REPO}[{EXPORT_EXTRA}]'" in err


def test_the_export_extra_holds_every_module_export_needs():
    extra = {re.split(r"[<>=;\[ ]", req)[0] for req in PYPROJECT["project"]["optional-dependencies"][EXPORT_EXTRA]}
    assert set(EXPORT_MODULES) <= extra
    assert missing_export_tools() is None  # the test tools include it


def test_the_seed_table_and_its_recipe_need_no_test_tools():
    text = (REPO / "docs" / "evaluation.md").read_text()
    recipe = re.search(r'python -c "(from pathlib import Path;.*?)"\nKERAS_HOME', text, re.S).group(1)
    imports = "; ".join(re.findall(r"(from tests\.\S+ import \w+)", recipe))
    assert imports
    seen = run_blocked(REPO, ["pytest", "_pytest"], [], [
        "resnet.cli.seed_table", "resnet.evaluation.run", "resnet.report.table_files", "resnet.weights", imports,
    ])  # fmt: skip
    assert set(seen["modules"].values()) == {"ok"}, seen["modules"]


def test_every_command_is_on_path_as_the_readme_says():
    sentence = re.search(r"The commands \((.*?)\) are on PATH after\s+`pip install -e \.`", README, re.S)
    names = re.findall(r"`([\w-]+)`", sentence.group(1))
    assert names == list(PYPROJECT["project"]["scripts"])  # each console script, as pyproject spells it
    docs = [README, *(p.read_text() for p in (REPO / "docs").glob("*.md"))]
    assert not any(re.search(r"resnet-\w*_", text) for text in docs)  # no resnet-seed_table anywhere


def test_lint_does_not_depend_on_the_folders_of_the_working_tree(tmp_path):
    """``out=onnx/small.onnx`` makes an onnx/ folder; ruff would then take `import onnx` for first-party."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx" / "small.onnx").write_bytes(b"")
    (tmp_path / "wandb").mkdir()
    (tmp_path / "check.py").write_text(  # sorted as in this repo, where resnet/ and data/ sit beside it
        '"""Imports."""\n\nimport onnx\nimport torch\nimport wandb\n\nfrom data import Normalize\n'
        'from resnet.padding import freeze_padding\n\n__all__ = ["Normalize", "freeze_padding", "onnx", '
        '"torch", "wandb"]\n'
    )
    proc = subprocess.run([ruff, "check", "--no-cache", "check.py"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_the_readme_says_what_resnet_small_pads_at_28():
    rows = {p: {r.layer: r for r in pad_table(build_model("resnet_small", 10, p, in_chans=1), 28)}
            for p in ("symmetric", "asymmetric")}  # fmt: skip
    sizes = [row.input_size[0] for row in rows["symmetric"].values()]
    assert sizes == [28, 14, 7]  # the odd 7: what "every stride-2 layer sees an even size" got wrong
    differ = [name for name in rows["symmetric"] if rows["symmetric"][name].pad_h != rows["asymmetric"][name].pad_h]
    assert differ == ["conv1"]
    assert "every stride-2 layer sees an even size" not in README
    assert "block convs at 14 and 7 px: only the stem's pad differs between `symmetric` and `asymmetric`" in " ".join(
        README.split())  # fmt: skip


def test_val_images_scores_n_images_and_every_report_says_so(tiny_folder, tmp_path, capsys, one_thread):
    run_in_process(tiny_folder, tmp_path, "epochs=1", "val_images=4")  # of the 7 val images
    out = capsys.readouterr().out
    saved = json.loads((tmp_path / "results.json").read_text())
    assert (saved["n_val_images"], saved["val_split_images"]) == (4, 7)
    epoch_line = next(line for line in out.splitlines() if line.startswith("epoch 1 |"))
    assert re.search(r"\| top-5 err \d+\.\d\d% \(on 4 of the 7 val images\)$", epoch_line), epoch_line
    assert re.search(r"\|\s+4 of 7 \|", out)  # the summary's val images column


def test_train_log_holds_what_each_invocation_of_the_run_printed(tiny_folder, tmp_path, capsys, one_thread):
    run_in_process(tiny_folder, tmp_path, "stop_after=1")
    run_in_process(tiny_folder, tmp_path, "resume=true")
    with pytest.raises(ConfigError) as refused:  # onecycle ends at epochs=2: refused in one line
        run_in_process(tiny_folder, tmp_path, "resume=true", "epochs=3")
    out = capsys.readouterr().out
    assert "resumed from" in out and out.count("epoch 1 | ") == out.count("epoch 2 | ") == 1 and "results:" in out
    assert (tmp_path / "train.log").read_text() == out + f"error: {refused.value}\n"  # and the one line it ended with


def test_the_last_line_is_the_eval_command_of_the_runs_last_pt(tiny_folder, tmp_path, capsys, one_thread):
    trained = run_in_process(tiny_folder, tmp_path / "run", "epochs=1")
    *_, named, last = capsys.readouterr().out.splitlines()
    assert named == f"results: {tmp_path / 'run' / 'results.json'}; weights: {tmp_path / 'run' / 'last.pt'}"
    command = shlex.split(last.removeprefix("evaluate them: "))
    assert command == [
        "python",
        "eval.py",
        f"weights={tmp_path / 'run' / 'last.pt'}",
        "data=imagefolder",
        f"data.root={tiny_folder}",
    ]
    row = evaluate_weights(compose_config("eval", *command[2:], f"results_file={tmp_path / 'eval.jsonl'}"))
    assert (row["top1_err"], row["n_images"]) == (trained["top1_err"], trained["n_val_images"])  # the same val set
