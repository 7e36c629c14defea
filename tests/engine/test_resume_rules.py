"""What a resume may change (resnet/job/resume_rules.py): every key of the training config has
a rule; each fixed key refuses a change in one line naming both values; each key that may change
is applied and reported; epochs past a schedule's end are refused in favour of a fine-tune
(``init=``), which starts from the weights with a fresh optimizer and schedule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from resnet.checkpoint import load_checkpoint
from resnet.checkpoint.training_state import TrainingState
from resnet.config import ConfigError
from resnet.engine.run import build_run_model
from resnet.engine.train_config import train_config
from resnet.job.resume import check_resumable
from resnet.job.resume_rules import RULES, compare, flatten, rule
from tests.helpers.compose import compose_config
from tests.helpers.training import REPO, run_in_process, tiny_overrides

GROUPS = [[], ["+padding=symmetric", "data=imagenet", "optim=adamw", "sched=cosine", "logger=wandb"],
          ["data=imagenet_shards", "optim=lamb", "sched=step", "+experiment=tv_v2"],
          ["grid=[symmetric,asymmetric]", "data=imagefolder"], ["+experiment=timm_a3"]]  # fmt: skip


@pytest.mark.parametrize("groups", GROUPS, ids=["defaults", "adamw-cosine", "lamb-step-tv_v2", "grid", "timm_a3"])
def test_every_key_of_the_training_config_has_a_rule(groups):
    cfg = compose_config("train", *groups, "run_dir=x", "data.num_classes=3", "data.root=/x")
    keys = flatten(OmegaConf.to_container(cfg, resolve=True))
    assert [key for key in keys if rule(key) is None] == []


def test_the_docs_show_the_table():
    text = (REPO / "docs" / "training.md").read_text()
    shown = dict(re.findall(r"^\| `([\w.]+)` \| (fixed|may change) \|", text, flags=re.M))
    assert shown == {key: kind for key, (kind, _) in RULES.items()}


def test_the_docs_table_is_the_one_generated_from_the_declarations():
    # every row, in order, as resnet.schema.KEYS declares it: `python scripts/resume_table.py` writes it
    from resnet.schema import resume_table, with_resume_table

    text = (REPO / "docs" / "training.md").read_text()
    assert resume_table() in text and with_resume_table(text) == text, "run python scripts/resume_table.py"


def test_compare_splits_changes_by_rule_and_skips_keys_of_another_version():
    recorded = {"seed": 0, "data": {"root": "/a", "workers": 2, "image_size": 32}, "old_key": 1, "grid": None}
    now = {"seed": 0, "data": {"root": "/b", "workers": 4, "image_size": 64}, "new_key": 2, "grid": ["a", "b"]}
    refused, changed = compare(recorded, now)
    assert [str(d) for d in refused] == ["data.image_size: 32 -> 64", "grid: (not set) -> [a,b]"]
    assert [str(d) for d in changed] == ["data.root: /a -> /b", "data.workers: 2 -> 4"]


@pytest.fixture(scope="module")
def trained(tiny_folder, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("rules") / "run"
    run_in_process(tiny_folder, run_dir, "epochs=1")
    return run_dir / "last.pt"


def check(tiny_folder, trained: Path, *overrides: str, world_size: int = 1):
    cfg = compose_config("train", *tiny_overrides(tiny_folder, trained.parent, "epochs=1", *overrides))
    state = TrainingState.read(trained)
    layout = {**state.layout, "world_size": world_size}
    config = train_config(cfg)
    return check_resumable(config, state, trained, layout, build_run_model(config).meta)


@pytest.mark.parametrize(
    "override, key, was, now",
    [
        ("+padding=asymmetric", "padding", "symmetric", "asymmetric"),
        ("model=resnet_small", "model.arch", "resnet_tiny", "resnet_small"),
        ("grid=[symmetric,asymmetric]", "grid", "null", "[symmetric,asymmetric]"),
        ("batch_size=8", "batch_size", "4", "8"),
        ("data.image_size=40", "data.image_size", "32", "40"),
        ("data.augment=false", "data.augment", "True", "False"),
        ("seed=9", "seed", "0", "9"),
        ("label_smoothing=0.0", "label_smoothing", "0.1", "0.0"),
        ("loss=bce", "loss", "ce", "bce"),
        ("mixup=0.2", "mixup", "0.0", "0.2"),
        ("optim.weight_decay=0.001", "optim.weight_decay", "5e-05", "0.001"),
        ("sched.pct_start=0.5", "sched.pct_start", "0.25", "0.5"),
        ("max_steps_per_epoch=3", "max_steps_per_epoch", "null", "3"),
        ("amp=bf16", "amp", "none", "bf16"),
        ("ema_decay=0.99", "ema_decay", "0.0", "0.99"),
    ],
)
def test_each_fixed_key_refuses_a_change_naming_both_values(tiny_folder, trained, override, key, was, now):
    with pytest.raises(ConfigError) as refused:
        check(tiny_folder, trained, override)
    line = str(refused.value)
    assert "\n" not in line and f"{trained} was trained with {key}={was}, this run has {now}" in line, line
    assert "to resume it, or start over in another hydra.run.dir" in line


def test_another_world_size_is_another_global_batch(tiny_folder, trained):
    with pytest.raises(ConfigError, match=r"world_size=1, this run has 2.*launch 1 processes"):
        check(tiny_folder, trained, world_size=2)


@pytest.mark.parametrize(
    "override, change",
    [
        ("data.workers=1", "data.workers: 0 -> 1"),
        ("log_every=7", "log_every: 2 -> 7"),
        ("eval_every=2", "eval_every: 1 -> 2"),
        ("checkpoint_every=3", "checkpoint_every: 0 -> 3"),
        ("on_nonfinite=skip", "on_nonfinite: stop -> skip"),
        ("compile=true", "compile: False -> True"),
        ("device=cpu", "device: auto -> cpu"),
        ("logger.wandb=true", "logger.wandb: False -> True"),
        ("optim.lr=0.5", "optim.lr: 0.4 -> 0.5"),
        ("val_images=3", "val_images: (not set) -> 3"),
    ],
)
def test_each_key_that_may_change_is_applied_and_reported(tiny_folder, trained, override, change):
    assert [str(c) for c in check(tiny_folder, trained, override)] == [change]


def test_epochs_past_a_one_cycle_end_are_refused_naming_the_fine_tune(tiny_folder, trained):
    with pytest.raises(ConfigError) as refused:
        check(tiny_folder, trained, "epochs=3")
    line = str(refused.value)
    assert f"{trained} was planned for epochs=1 and sched=onecycle ends there" in line
    assert f"init={trained} epochs=<more> hydra.run.dir=<new dir>" in line


def test_a_step_schedule_extends_and_a_fine_tune_starts_from_the_weights(tiny_folder, tmp_path, capsys, one_thread):
    step = ("sched=step", "sched.milestones=[1]", "optim=sgd")
    run_in_process(tiny_folder, tmp_path / "step", "epochs=1", *step)
    run_in_process(tiny_folder, tmp_path / "step", "epochs=2", "resume=true", *step)  # milestones are absolute
    assert "changed on resume: epochs: 1 -> 2" in capsys.readouterr().out
    assert load_checkpoint(tmp_path / "step" / "last.pt")["epoch"] == 2
    source = load_checkpoint(tmp_path / "step" / "last.pt")["model"]
    run_in_process(
        tiny_folder,
        tmp_path / "tune",
        "epochs=1",
        f"init={tmp_path / 'step' / 'last.pt'}",
        "optim.lr=1e-12",
        "+padding=asymmetric",
    )  # another grid: what a fine-tune may be for
    assert f"initialised from {tmp_path / 'step' / 'last.pt'}" in capsys.readouterr().out
    tuned = load_checkpoint(tmp_path / "tune" / "last.pt")
    assert tuned["epoch"] == 1 and tuned["meta"]["padding_name"] == "asymmetric"
    assert all(torch.allclose(tuned["model"][k], v, atol=1e-6) for k, v in source.items() if k.endswith(".weight"))
    with pytest.raises(ConfigError, match=r"^init=/no/such\.pt: "):
        run_in_process(tiny_folder, tmp_path / "bad", "init=/no/such.pt")


@pytest.mark.parametrize("sched", [["sched=onecycle"], ["sched=cosine", "sched.warmup_epochs=1.5", "optim=sgd"],
                                   ["sched=step", "sched.milestones=[1.5]", "optim=sgd"]], ids=["onecycle", "cosine",
                                                                                                "step"])  # fmt: skip
def test_a_new_lr_on_resume_scales_every_later_lr_of_the_schedule(tiny_folder, tmp_path, sched, one_thread):
    from tests.helpers.training import read_csv

    run_in_process(tiny_folder, tmp_path / "straight", "log_every=1", *sched)
    lr = compose_config("train", *tiny_overrides(tiny_folder, tmp_path, *sched)).optim.lr
    run_in_process(tiny_folder, tmp_path / "halved", "log_every=1", "stop_after=1", *sched)
    run_in_process(tiny_folder, tmp_path / "halved", "log_every=1", "resume=true", f"optim.lr={lr / 2}", *sched)
    straight, halved = (read_csv(tmp_path / run / "steps.csv") for run in ("straight", "halved"))
    assert [r["lr"] for r in halved[:6]] == [r["lr"] for r in straight[:6]]  # epoch 1: before the change
    assert [float(r["lr"]) for r in halved[6:]] == pytest.approx([float(r["lr"]) / 2 for r in straight[6:]], rel=1e-9)
