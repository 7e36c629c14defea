"""A config the commands cannot use ends in one line on stderr with status 2, naming the key and the
value as typed, and saying what to type: a wrong type or range (resnet/schema.py), an option or key
that does not exist, an override Hydra cannot parse (resnet/cli/hydra_app.py); under torchrun, once."""

from __future__ import annotations

import json
import sys

import pytest
from hydra.errors import ConfigCompositionException, OverrideParseException

from resnet.cli.hydra_app import composition_error
from resnet.cli.inspect import main as inspect_main
from resnet.padding import PRESETS
from resnet.schema import schema_problems
from tests.helpers.compose import compose_config
from tests.helpers.procs import REPO, run, torchrun_here

BAD_VALUES = {  # override -> what its one line must say (the override itself comes first)
    "optim.lr=abc": "expected a number > 0",
    "epochs=abc": "expected a whole number >= 1",
    "batch_size=abc": "expected a whole number",
    "optim.momentum=abc": "expected a number in [0, 1)",
    "optim.lr=-1": "expected a number > 0",
    "epochs=1.5": "expected a whole number",
    "compile=yes": "expected true or false",
    "max_steps_per_epoch=0": "(or null)",
    "val_images=0": "expected a whole number >= 1 (or null), e.g. val_images=1000",
    "val_images=-1": "expected a whole number >= 1 (or null), e.g. val_images=1000",
    "val_images=all": "expected a whole number >= 1 (or null), e.g. val_images=1000",
    "grid=symmetric": "expected a list of names (or null), e.g. grid=[symmetric,asymmetric]",
    "optim.lr=nan": "expected a number > 0",
}


@pytest.mark.parametrize("override", list(BAD_VALUES))
def test_a_wrong_type_or_range_names_the_key_and_the_value(override):
    problems = schema_problems(compose_config("train", override))
    assert len(problems) == 1 and problems[0].startswith(f"{override}: ")
    assert BAD_VALUES[override] in problems[0]


def test_list_items_are_checked():
    (problem,) = schema_problems(compose_config("train", "sched=step", "sched.milestones=[30,sixty]"))
    assert problem.startswith("sched.milestones=") and problem.endswith(
        "expected a number >= 0 for each item, e.g. sched.milestones=[30,60,80]"
    )


def test_every_shipped_config_fits_the_schema():
    for name in ("train", "eval", "regrid", "detect", "export", "seed_table"):
        assert schema_problems(compose_config(name)) == [], name
    for recipe in ("demo", "fast", "tv_v1", "tv_v2", "timm_a3"):
        assert schema_problems(compose_config("train", f"+experiment={recipe}")) == [], recipe


def composition(*overrides: str) -> str:
    with pytest.raises((ConfigCompositionException, OverrideParseException)) as caught:
        compose_config("train", *overrides)
    return composition_error(caught.value, overrides)


def test_a_misspelt_option_suggests_the_option():
    line = composition("+padding=symetric")
    assert line.startswith("+padding=symetric: Could not find 'padding/symetric'; did you mean +padding=symmetric?")
    assert "tf_same" in line and "search path" not in line and "\n" not in line
    assert "did you mean model=resnet50?" in composition("model=resnet51")


def test_an_unknown_key_suggests_the_key():
    line = composition("optim.lrr=0.1")
    assert line.startswith("optim.lrr=0.1: there is no key 'lrr' in optim; did you mean optim.lr=0.1?")
    assert "momentum" in line and "\n" not in line
    root = composition("epoch=3")
    assert "did you mean epochs=3?" in root and "hydra" not in root.split("its keys:")[1]


def test_a_group_outside_the_defaults_suggests_adding_it():
    assert composition("padding=symmetric") == (
        "padding=symmetric: padding is not in the config until chosen; did you mean +padding=symmetric?"
    )


def test_an_override_hydra_cannot_parse_is_one_line():
    assert "\n" not in composition("optim.lr=1,2") and "\n" not in composition("epochs")


# One Python runs each entry script's __main__ for each command line (torch is imported once).
RUN_ALL = """
import contextlib, io, json, runpy, sys
from hydra.core.global_hydra import GlobalHydra
seen = []
for script, *args in json.loads(sys.argv[1]):
    err = io.StringIO()
    sys.argv = [script, *args]
    code = 0
    with contextlib.redirect_stderr(err):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exit:
            code = exit.code
    GlobalHydra.instance().clear()
    seen.append([code, err.getvalue()])
print(json.dumps(seen))
"""


@pytest.mark.slow
def test_train_and_eval_end_each_config_error_in_one_line_with_status_2(tmp_path):
    lines = [[str(REPO / "train.py"), o] for o in ("+padding=symetric", "optim.lr=-1", "foo=1", "optim=sgdd")]
    lines += [[str(REPO / "eval.py"), "weights=x.pt", o] for o in ("crop=abc", "+padding=tf_sam", "data=imagenett")]
    proc = run([sys.executable, "-c", RUN_ALL, json.dumps(lines)], cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for (_script, *args), (code, err) in zip(lines, json.loads(proc.stdout.splitlines()[-1])):
        assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: {args[-1]}"), (args, code, err)


def test_inspect_of_an_unknown_architecture_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit:
        inspect_main(["resnet51"])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.count("\n") == 1
    assert err.startswith("error: unknown architecture 'resnet51'") and "did you mean resnet50?" in err
    with pytest.raises(SystemExit):
        inspect_main(["resnet50", "--presets", "symetric"])  # argparse's usage, then its one error line
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.endswith("did you mean symmetric?") and "+padding" not in last  # not a config override here


TORCHRUN_CASES = {  # override -> its one line; a composition error (hydra_app.run_main), a value (one_line_errors)
    "+padding=symetric": "error: +padding=symetric: Could not find 'padding/symetric'; did you mean "
    f"+padding=symmetric? choose one of {', '.join(sorted(PRESETS))}",  # a new preset changes nothing here
    "optim.lr=abc": "error: optim.lr=abc: expected a number > 0, e.g. optim.lr=0.1",
}


@pytest.mark.slow
@pytest.mark.parametrize("override", ["+padding=symetric", "optim.lr=abc"])
def test_under_torchrun_a_config_error_is_printed_once_with_status_2(tmp_path, override):
    # rank 0 prints the line; every rank exits 2, so torchrun fails the job (and adds its own report below)
    proc = run([*torchrun_here(), REPO / "train.py", override], cwd=tmp_path, timeout=240)
    assert proc.returncode != 0
    assert [line for line in proc.stderr.splitlines() if line.startswith("error: ")] == [TORCHRUN_CASES[override]]
    assert "exitcode  : 2" in proc.stderr  # torchrun's report: each worker's own status


def test_every_hydra_command_ends_a_composition_error_in_one_line(capsys, monkeypatch, tmp_path):
    from hydra.core.global_hydra import GlobalHydra

    from resnet.cli.detect import main as detect_main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["resnet-detect", "weights=x.pt", "data=fashion_mnistt"])
    try:
        with pytest.raises(SystemExit) as exit:
            detect_main()
    finally:
        GlobalHydra.instance().clear()
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.count("\n") == 1
    assert err.startswith(
        "error: data=fashion_mnistt: Could not find 'data/fashion_mnistt'; did you mean data=fashion_mnist?"
    )


@pytest.mark.parametrize(
    ("command", "config"), [("train.py", "train"), ("eval.py", "eval"), ("resnet-detect", "detect")]
)
def test_a_misspelt_group_added_with_plus_is_refused_naming_the_group_not_added_as_a_key(
    command, config, capsys, monkeypatch, tmp_path
):
    # `+paddng=asymmetric`, the headline override mistyped: Hydra would add a key nothing reads, and
    # the run would train the native scheme, exit 0, and say so in results.json. (Every other form
    # of that typo, ++ included: tests/cli/test_typo_forms.py.)
    from hydra.core.global_hydra import GlobalHydra

    from resnet.cli.hydra_app import run_main

    ran = []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [command, "+paddng=asymmetric", "+padding.stem_pool=same"])
    try:
        with pytest.raises(SystemExit) as exit:
            run_main(lambda: ran.append(True), config)
    finally:
        GlobalHydra.instance().clear()
    assert exit.value.code == 2 and not ran
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        "error: +paddng=asymmetric: there is no config group 'paddng' to add, and a key added "
        "with + would be read by nothing; did you mean +padding=asymmetric? the groups: "
    )
    assert "adds a new one" not in composition("optim.lrr=0.1")  # no hint suggests adding an unknown key
    from resnet.cli.hydra_app import checked_overrides

    for fine in ("+padding.block_conv_blur=true", "+data.min_scale=0.35", "+data/base=train_images",
                 "+hydra/launcher=submitit_local", "+experiment=tv_v1,timm_a3"):  # fmt: skip
        assert checked_overrides([fine], "train") == [fine], fine
    mine = ["--config-dir=/mine", "+mine=x"]  # the user's own groups: Hydra knows them, the check does not
    assert checked_overrides(mine, "train") == mine


def test_a_run_folder_that_cannot_be_made_is_one_line_saying_mkdir_or_chown(tmp_path):
    # A read-only outputs/ (or one `docker run -v` made as root for a --user who cannot write it):
    # Hydra fails making the run's folder, before any of the command runs.
    import os
    import re
    import subprocess

    from tests.helpers import procs
    from tests.helpers.training import PY, REPO

    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    subprocess.run(["mount", "--bind", str(outputs), str(outputs)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(outputs)], check=True)
        proc = procs.run([PY, str(REPO / "train.py"), "epochs=1"], cwd=tmp_path, timeout=120)
    finally:
        subprocess.run(["umount", str(outputs)], check=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    [line] = proc.stderr.strip().splitlines()
    assert re.match(
        r"error: cannot write outputs/\S+ \(Read-only file system\), where this run's folder goes: make "
        r"it writable \(mkdir -p outputs; .*chown it to the --user uid\), or pass hydra.run.dir=",
        line,
    )
