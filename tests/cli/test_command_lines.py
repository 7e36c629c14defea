"""Printed commands run as printed, whatever the path holds; an override Hydra cannot read is one
line showing the quoting that works."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch
from hydra.core.override_parser.overrides_parser import OverridesParser

from resnet.command_lines import command, override, unreadable_override
from resnet.job.ending import resume_command
from resnet.runtime.distributed import DistEnv
from tests.helpers import procs
from tests.helpers.training import PY, REPO, run_in_process

AWKWARD = ["/runs/plain-1.5", "/runs/my run (2)", "/runs/it's #3", "/runs/a=b,c", "/runs/naïve ü", "/runs/${HOME}",
           '/runs/say "hi"', "/runs/back\\slash'", "/runs/tab\there", "/runs/$x`y`!z", "/runs/~user%20"]  # fmt: skip


def as_the_shell_reads(line: str) -> list[str]:
    """The words bash makes of ``line``."""
    done = subprocess.run(["bash", "-c", f"printf '%s\\0' {line}"], capture_output=True, text=True, check=True)
    return done.stdout.split("\0")[:-1]


@pytest.mark.parametrize("path", AWKWARD)
def test_a_printed_override_reaches_hydra_as_the_path_it_names(path):
    words = as_the_shell_reads(command(["python", "train.py", override("hydra.run.dir", path)]))
    assert words[:2] == ["python", "train.py"]
    parsed = OverridesParser.create().parse_override(words[2])
    assert parsed.key_or_group == "hydra.run.dir"
    assert parsed.value().replace("\\${", "${") == path  # OmegaConf reads \${ as a literal ${


def test_the_resume_command_quotes_its_run_dir(tmp_path):
    run_dir = tmp_path / "my run (2) it's"
    words = as_the_shell_reads(resume_command(run_dir, DistEnv(0, 1, 0, torch.device("cpu"))))
    assert words[:3] == ["python", "train.py", "resume=true"]
    assert OverridesParser.create().parse_override(words[3]).value() == str(run_dir)


def test_an_override_hydra_cannot_read_is_one_line_with_the_quoting_that_works(tmp_path):
    typed = f"data.root={tmp_path}/it's (1)"
    proc = procs.run([PY, "train.py", typed])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "LexerNoViableAlt" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: {typed}: Hydra cannot read this value as typed")
    suggested = line.rsplit("type it as ", 1)[1]
    assert as_the_shell_reads(suggested) == [override("data.root", f"{tmp_path}/it's (1)")]
    assert unreadable_override("not an override") is None


@pytest.mark.slow
def test_the_printed_eval_command_runs_as_printed_from_a_run_dir_with_spaces_quotes_and_unicode(tiny_folder, tmp_path,
                                                                                            capsys):  # fmt: skip
    run_dir = tmp_path / "my run (2) #it's ü=1"
    run_in_process(tiny_folder, run_dir, "epochs=1")
    [line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith("evaluate them: ")]
    printed = line.removeprefix("evaluate them: ")
    assert printed.startswith("python eval.py ")
    proc = procs.run(["bash", "-c", printed.replace("python eval.py", f"{PY} {REPO / 'eval.py'}", 1)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [row] = [json.loads(x) for x in (tmp_path / "results" / "eval.jsonl").read_text().splitlines()]
    assert row["weights"] == str(run_dir / "last.pt") and row["n_images"] == 7
