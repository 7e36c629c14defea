"""W&B names what was done (issue 54): an eval run is named by the scheme the weights were trained
with and the one evaluated under, grouped with its training run, job type eval, linked to that
run by its id; and the cross matrix is rebuilt from the runs alone. Read from the offline run files
the real wandb writes."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import wandb

from resnet.engine.run import train
from resnet.evaluation.run import evaluate_weights
from resnet.report.rows import read_rows
from resnet.report.tables import cross_markdown, cross_matrices
from resnet.report.wandb_log import eval_run_name, rows_of_runs, training_run
from tests.helpers.compose import compose_config
from tests.helpers.wandb_records import finished_log, read_records


def run_record(folder):
    """The run record of an offline run folder: name, group, job type and config as wandb keeps them."""
    run = next(r.run for r in read_records(finished_log(folder)) if r.WhichOneof("record_type") == "run")
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    config = {key: value for key, value in config.items() if not key.startswith("_")}  # wandb's own (_wandb)
    return SimpleNamespace(name=run.display_name, group=run.run_group, job_type=run.job_type, id=run.run_id,
                           config=config)  # fmt: skip


@pytest.mark.slow  # wandb starts its service process
def test_eval_runs_say_trained_and_evaluated_scheme_and_rebuild_the_cross_matrix(tiny_folder, tmp_path):
    wandb.finish()  # a run another test of this worker left open would take these runs' records
    data = [f"data.root={tiny_folder}", "data=imagefolder", "data.num_classes=3", "data.workers=0", "device=cpu"]
    results = tmp_path / "eval" / "rows.jsonl"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        train(compose_config("train", "model=resnet_tiny", *data, "data.image_size=32", "batch_size=4", "epochs=1",
                             "max_steps_per_epoch=1", f"run_dir={tmp_path / 'train'}", "logger=wandb",
                             "+padding=asymmetric"))  # fmt: skip
        weights = f"weights={tmp_path / 'train' / 'last.pt'}"
        for scheme in ("symmetric", "asymmetric"):
            evaluate_weights(compose_config("eval", weights, *data, "crop=32", f"results_file={results}",
                                            "logger=wandb", f"+padding={scheme}"))  # fmt: skip
    (trained,) = (tmp_path / "train" / "wandb").glob("offline-run-*")
    training = run_record(trained)
    evals = [run_record(folder) for folder in sorted((tmp_path / "eval" / "wandb").glob("offline-run-*"))]
    assert sorted(e.name for e in evals) == ["eval asymmetric→asymmetric resnet_tiny train",
                                             "eval asymmetric→symmetric resnet_tiny train"]  # fmt: skip
    assert {e.group for e in evals} == {training.group} == {"asymmetric"} and {e.job_type for e in evals} == {"eval"}
    assert training_run(tmp_path / "train" / "last.pt") == training.id
    assert {e.config["trained_run"] for e in evals} == {training.id}  # linked to the run that trained them
    # the dashboard's runs alone give the cross matrix the results file gives
    rebuilt = rows_of_runs([training, *evals])
    assert len(rebuilt) == 2
    assert cross_markdown(cross_matrices(rebuilt)) == cross_markdown(cross_matrices(read_rows(results)))


def test_eval_run_names_tell_evaluations_of_one_model_apart():
    row = {"weights": "outputs/2026-12-07/05-01-42/last.pt", "trained_padding": "asymmetric", "arch": "resnet_small",
           "padding_name": "tf_same[stem_pool=symmetric]", "crops": 1, "ema": False}  # fmt: skip
    assert eval_run_name(row) == "eval asymmetric→tf_same[stem_pool=symmetric] resnet_small 05-01-42"
    assert eval_run_name({**row, "crops": 10, "ema": True}).endswith("05-01-42 10-crop EMA")
    hub = {**row, "weights": "timm:resnet50.a1_in1k", "arch": "resnet50", "trained_padding": "symmetric"}
    assert eval_run_name(hub) == "eval symmetric→tf_same[stem_pool=symmetric] resnet50 timm:resnet50.a1_in1k"
    assert training_run("timm:resnet50.a1_in1k") is None
