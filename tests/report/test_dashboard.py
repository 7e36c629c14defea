"""resnet-dashboard: every key its workspace spec names is one that train.py and eval.py
log to W&B, read back from offline runs' own files; bad input is one line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

if os.environ.get("RESNET_PADDING_MIN_DEPS"):  # bash scripts/test.sh --min-deps: wandb 0.17, below the extra's
    pytest.skip("the dashboard extra needs wandb>=0.28.2 (wandb-workspaces)", allow_module_level=True)

import wandb  # noqa: E402
import wandb_workspaces  # noqa: E402, F401  (the dashboard extra, which setup.sh test installs: a missing one fails here)

from resnet import command_lines
from resnet.cli import dashboard
from resnet.engine.run import train
from resnet.evaluation.run import evaluate_weights
from tests.helpers.compose import compose_config
from tests.helpers.wandb_records import finished_log, read_records

REPO = Path(__file__).resolve().parents[2]
BUILTIN_X = {"_step", "_runtime", "_timestamp", "_absolute_runtime"}  # W&B's own x axes
RUN_ATTRIBUTES = {"group": "run_group", "jobType": "job_type"}  # spec name -> RunRecord field


def logged_keys(run_dir: Path) -> dict[str, set[str]]:
    """The top-level keys one offline run logged: history, summary, and its run attributes."""
    log = finished_log(run_dir)
    keys: dict[str, set[str]] = {"history": set(), "summary": set(), "run": set()}

    def names(items):
        return {item.key or item.nested_key[0] for item in items}  # a table: ['padding/cross', '_type']

    for record in read_records(log):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            keys["history"] |= names(record.history.item)
        elif kind == "summary":
            keys["summary"] |= names(record.summary.update)
        elif kind == "run":
            keys["run"] |= {name for name, field in RUN_ATTRIBUTES.items() if getattr(record.run, field)}
            keys["group"] = {record.run.run_group}
    return keys


def summary_picks(node) -> set[str]:
    """The keys of ``runs.summary[key]`` in a Weave panel's expression."""
    if isinstance(node, list):
        return set().union(*map(summary_picks, node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = set().union(*map(summary_picks, node.values())) if node else set()
    if node.get("name") == "pick" and node["inputs"]["obj"].get("fromOp", {}).get("name") == "run-summary":
        found.add(node["inputs"]["key"]["val"])
    return found


def spec_keys(request: dict) -> dict[str, set[str]]:
    """Every key the saved spec names, by where W&B looks it up; a panel kind this cannot read fails."""
    keys: dict[str, set[str]] = {"history": set(), "summary": set(), "run": set()}
    section = request["spec"]["section"]
    for group in section["panelBankConfig"]["sections"]:
        for panel in group["panels"]:
            config = panel["config"]
            if panel["viewType"] == "Run History Line Plot":
                assert config["metrics"], panel
                keys["history"] |= set(config["metrics"]) | ({config["xAxis"]} - BUILTIN_X)
                if config.get("groupBy"):
                    keys["run"].add(config["groupBy"])
            elif panel["viewType"] == "Weave":
                assert summary_picks(config), panel
                keys["summary"] |= summary_picks(config)
            else:
                raise AssertionError(f"a panel this test cannot read the keys of: {panel['viewType']}")
    for runset in section["runSets"]:
        for key in runset["grouping"]:
            keys[key["section"]].add(key["name"])
        for column in runset["runFeed"]["columnOrder"]:
            where, _, name = column.partition(":")
            if where == "summary":
                keys["summary"].add(name)
    return keys


def unlogged(named: dict[str, set[str]], runs: list[dict[str, set[str]]]) -> dict[str, set[str]]:
    """The keys the spec names that no run logged."""
    return {kind: missing for kind, keys in named.items()
            if (missing := keys - set().union(*(run[kind] for run in runs)))}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tiny_folder, tmp_path_factory) -> dict[str, dict[str, set[str]]]:
    """The keys of one offline training run under +padding=asymmetric and one offline
    evaluation of its checkpoint, both in this process with the real wandb."""
    out = tmp_path_factory.mktemp("dashboard")
    wandb.finish()  # a run another test of this worker left open would take these runs' records
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        train(compose_config(
            "train", "model=resnet_tiny", "data=imagefolder", f"data.root={tiny_folder}", "data.num_classes=3",
            "data.image_size=32", "data.workers=0", "batch_size=4", "epochs=1", "log_every=2", "device=cpu",
            f"run_dir={out / 'train'}", "logger=wandb", "+padding=asymmetric",
        ))  # fmt: skip
        evaluate_weights(compose_config(
            "eval", f"weights={out / 'train' / 'last.pt'}", "data=imagefolder", f"data.root={tiny_folder}",
            "data.num_classes=3", "data.workers=0", "batch_size=7", "crop=32", "device=cpu",
            f"results_file={out / 'eval' / 'rows.jsonl'}", "logger=wandb",
        ))  # fmt: skip
    (train_run,) = (out / "train" / "wandb").glob("offline-run-*")
    (eval_run,) = (out / "eval" / "wandb").glob("offline-run-*")
    return {"train": logged_keys(train_run), "eval": logged_keys(eval_run)}


def write_spec(path: Path, *args: str) -> dict:
    dashboard.main(["--entity", "someone", "--dry-run", str(path), *args])
    return json.loads(path.read_text())


@pytest.mark.slow  # wandb starts its service process
@pytest.mark.xdist_group("dashboard")  # one worker: the runs fixture once
def test_every_key_the_workspace_names_is_logged(runs, tmp_path):
    request = write_spec(tmp_path / "spec.json", "--project", "padding")
    assert (request["entityName"], request["projectName"], request["type"]) == ("someone", "padding", "project-view")
    named = spec_keys(request)
    assert {dashboard.VAL_TOP1, dashboard.VAL_TOP5, dashboard.STEP_IMAGES_PER_S} <= named["history"]
    assert {"padding/tensornets", "padding/cross"} <= named["summary"] and named["run"] == {"group"}
    assert unlogged(named, list(runs.values())) == {}
    assert runs["train"]["group"] == {"asymmetric"}  # grouped by the padding scheme it trained under
    # the curves are the training run's, the tables the evaluation's
    assert unlogged({"history": named["history"]}, [runs["train"]]) == {}
    assert unlogged({"summary": set(dashboard.TABLES)}, [runs["eval"]]) == {}


@pytest.mark.slow
@pytest.mark.xdist_group("dashboard")
def test_a_key_nothing_logs_is_caught(runs, tmp_path, monkeypatch):
    monkeypatch.setattr(dashboard, "VAL_TOP1", "val/top1")  # a name train.py does not log
    monkeypatch.setattr(dashboard, "TABLES", (*dashboard.TABLES, "padding/table"))  # nor this table
    named = spec_keys(write_spec(tmp_path / "spec.json"))
    assert unlogged(named, list(runs.values())) == {"history": {"val/top1"}, "summary": {"padding/table"}}


@pytest.mark.parametrize("argv, says", [
    (["--project", "p"], "the following arguments are required: --entity"),
    (["--entity", "e", "--dryrun", "x.json"], "unrecognized arguments: --dryrun x.json"),
    (["--entity", " "], "--entity is empty"),
])  # fmt: skip
def test_bad_input_is_one_line_saying_what_to_type(argv, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        dashboard.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1, err
    assert says in err and "resnet-dashboard --entity ENTITY" in err


def test_saving_offline_is_refused_in_one_line(capsys, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    with pytest.raises(SystemExit):
        dashboard.main(["--entity", "e"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "WANDB_MODE=offline" in err and "--dry-run" in err, err


@pytest.mark.slow  # wandb.Api() may start wandb's service process
def test_saving_without_a_key_says_wandb_login(capsys, monkeypatch, tmp_path):
    for name in [n for n in os.environ if n.startswith("WANDB_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc, no ~/.config/wandb
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    with pytest.raises(SystemExit):
        dashboard.main(["--entity", "e"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`wandb login`" in err and "--dry-run" in err, err


@pytest.mark.parametrize("checkout", [False, True], ids=["installed", "checkout"])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "save"])
def test_a_missing_extra_is_one_line_naming_this_installs_pip_command(checkout, dry_run, tmp_path, capsys, monkeypatch):
    """Without wandb-workspaces (its import made to fail here), saving and --dry-run alike: an
    installed package is told the package's extra, a checkout its own folder's (not '.', which
    is the checkout only when run from there)."""
    for name in ["wandb_workspaces", *(n for n in sys.modules if n.startswith("wandb_workspaces."))]:
        monkeypatch.setitem(sys.modules, name, None)  # import fails: as where the extra is not installed
    monkeypatch.setattr(command_lines, "started_from_checkout", lambda: checkout)
    spec = tmp_path / "spec.json"
    with pytest.raises(SystemExit) as exit_:
        dashboard.main(["--entity", "e", *(["--dry-run", str(spec)] if dry_run else [])])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "needs its dashboard extra" in err, err
    pip = f"pip install -e '{REPO}[dashboard]'" if checkout else "pip install 'resnet-padding[dashboard]'"
    assert err.rstrip().endswith(f": {pip}"), err
    assert not spec.exists()


def test_this_checkout_is_told_its_own_folders_extra():
    assert command_lines.install_extra(dashboard.EXTRA) == f"pip install -e '{REPO}[dashboard]'"
