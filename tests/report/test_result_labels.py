"""A grid-trained run carries its grid (summary, results.json, W&B group), train and eval runs of one
trained scheme share one W&B group with job_type telling them apart, and error percentages are
stored rounded (resnet/report/rows.py, resnet/report/wandb_log.py)."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

from omegaconf import OmegaConf

from resnet.padding import PRESETS
from resnet.report.rows import TRAIN_SUMMARY, results_row
from resnet.report.wandb_log import run_group, start_run

GRID = ["symmetric", "asymmetric"]
META = SimpleNamespace(arch="resnet_tiny", padding=PRESETS["symmetric"], padding_name="symmetric")


def test_a_grid_run_is_labelled_by_its_grid_in_its_row_summary_and_group():
    row = results_row(META, "fashion_mnist", "none", {"top1_err": 7.0, "top5_err": 0.2}, grid=GRID)
    assert row["trained_padding"] == "grid[symmetric,asymmetric]" == run_group(META, GRID)
    assert row["padding_name"] == "symmetric"  # validated under the grid's first preset
    assert {heading: row[key] for heading, key in TRAIN_SUMMARY.items() if key in row}["padding"] == row[
        "trained_padding"]  # fmt: skip
    plain = results_row(META, "fashion_mnist", "none", {"top1_err": 7.0}, grid=None)
    assert plain["trained_padding"] == "symmetric" == run_group(META, None)


def test_error_percentages_are_stored_rounded():
    row = results_row(META, "fashion_mnist", "none", {"top1_err": 100 * (1 - 0.9973), "top5_err": None},
                      ema_top1_err=100 / 3, n_val_images=10_000)  # fmt: skip
    text = json.dumps(row)
    assert '"top1_err": 0.27,' in text and row["ema_top1_err"] == 33.333333 and row["top5_err"] is None


class RecordingWandb:
    """Stands in for the wandb module: the arguments of each init."""

    def __init__(self):
        self.inits = []

    def init(self, **kwargs):
        self.inits.append(kwargs)
        return SimpleNamespace(finish=lambda: None)


def test_train_and_eval_runs_of_one_trained_scheme_share_a_group(tmp_path, monkeypatch):
    from resnet.evaluation.run import _log_to_wandb

    fake = RecordingWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    logger = OmegaConf.create({"wandb": True, "project": "p", "mode": "disabled", "group": None})
    start_run(logger, {}, group=run_group(META, GRID), run_dir=tmp_path)  # what train.py's RunLogger starts
    grid, weights = "grid[symmetric,asymmetric]", str(tmp_path / "last.pt")  # an eval row names its weights
    row = results_row(META, "fashion_mnist", "none", {"top1_err": 7.0}, trained_padding=grid, weights=weights)
    monkeypatch.setattr("resnet.report.wandb_log.log_evaluations", lambda *args, **kwargs: None)
    monkeypatch.setattr("resnet.report.rows.read_rows", lambda path: [])
    _log_to_wandb(OmegaConf.create({"logger": logger}), row, tmp_path / "eval.jsonl")
    train, evaluation = fake.inits
    assert train["group"] == evaluation["group"] == "grid[symmetric,asymmetric]"
    assert (train["job_type"], evaluation["job_type"]) == ("train", "eval")


def test_a_grid_trainings_wandb_group_is_its_grid(tiny_folder, tmp_path, monkeypatch):
    # train.py hands the W&B run its group: the grid's name for a grid run, as its eval runs get
    import resnet.engine.runlog as runlog
    from tests.helpers.training import run_in_process

    groups = []
    monkeypatch.setattr(runlog, "start_run", lambda logger, config, group, run_dir: groups.append(group))
    run_in_process(tiny_folder, tmp_path, "epochs=1", "max_steps_per_epoch=1", "grid=[symmetric,asymmetric]",
                   "logger.wandb=true")  # fmt: skip
    assert groups == ["grid[symmetric,asymmetric]"]
