"""EMA weights (``ema_decay`` > 0, timm's ModelEmaV3): updated every step, reported beside the
trained weights at the end of a run, and evaluated by ``eval.py ema=true``. Their resume is
bit-exact: tests/engine/test_train.py's resume test runs with an EMA."""

from __future__ import annotations

import json

import pytest
import torch

from resnet.checkpoint import load_checkpoint
from resnet.config import ConfigError
from resnet.evaluation.run import evaluate_weights
from resnet.weights import WeightsError, WeightsUnavailable
from tests.helpers.compose import compose_config
from tests.helpers.training import read_csv, run_in_process

DECAY = 0.8


@pytest.fixture(scope="module")
def run(tiny_folder, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("ema_run")
    run_in_process(tiny_folder, run_dir, "epochs=2", f"ema_decay={DECAY}", "seed=2")
    return run_dir


def eval_row(tiny_folder, run_dir, *extra: str) -> dict:
    return evaluate_weights(compose_config(
        "eval", f"weights={run_dir / 'last.pt'}", "data=imagefolder", f"data.root={tiny_folder}", "data.num_classes=3",
        "data.workers=0", "batch_size=4", "device=cpu", f"results_file={run_dir / 'eval.jsonl'}", *extra,
    ))  # fmt: skip


def test_the_ema_follows_the_weights_and_both_are_reported(run, capsys):
    checkpoint = load_checkpoint(run / "last.pt")
    weights, ema = checkpoint["model"], checkpoint["ema"]
    assert ema.keys() == weights.keys()
    conv = "conv1.weight"
    assert not torch.equal(ema[conv], weights[conv])  # an average, not a copy
    # 12 steps at decay 0.8: the average sits near the last weights, not near where training started
    assert (ema[conv] - weights[conv]).norm() < 0.5 * weights[conv].norm()
    results = json.loads((run / "results.json").read_text())
    assert results["ema_decay"] == DECAY and results["top1_err"] is not None and results["ema_top1_err"] is not None
    epochs = read_csv(run / "metrics.csv")
    assert all(row["ema_top1_err"] != "" for row in epochs)  # every validation evaluates both
    assert float(epochs[-1]["ema_top1_err"]) == pytest.approx(results["ema_top1_err"])


def test_eval_picks_the_ema_or_the_weights_and_agrees_with_the_run(tiny_folder, run):
    results = json.loads((run / "results.json").read_text())
    plain, averaged = eval_row(tiny_folder, run), eval_row(tiny_folder, run, "ema=true")
    assert plain["ema"] is False and averaged["ema"] is True
    assert plain["top1_err"] == pytest.approx(results["top1_err"])  # the run's validation protocol, re-run
    assert averaged["top1_err"] == pytest.approx(results["ema_top1_err"])
    assert averaged["versions"]["torch"] == torch.__version__.split("+")[0] and averaged["amp"] == "none"


def test_ema_true_without_ema_weights_is_one_line(tiny_folder, tmp_path):
    run_in_process(tiny_folder, tmp_path, "epochs=1", "max_steps_per_epoch=1")
    with pytest.raises(WeightsUnavailable, match="holds no EMA weights .* drop ema=true"):
        eval_row(tiny_folder, tmp_path, "ema=true")
    with pytest.raises((WeightsError, ConfigError), match="have none: drop ema=true"):
        evaluate_weights(
            compose_config(
                "eval", "weights=torchvision:ResNet18_Weights.IMAGENET1K_V1", "ema=true", "data=fashion_mnist"
            )
        )


def test_detect_reads_the_ema_as_eval_does(tiny_folder, run):
    # configs/weights_input/weights.yaml gives every command that reads weights ema=; each loads the same
    # EMA weights eval.py ema=true scores
    from resnet.cli.detect import read_inputs

    ema = load_checkpoint(run / "last.pt")["ema"]
    for extra, expect in (([], "model"), (["ema=true"], "ema")):
        cfg = compose_config("detect", f"weights={run / 'last.pt'}", "data=imagefolder", f"data.root={tiny_folder}",
                             "data.num_classes=3", "data.workers=0", "images=4", "device=cpu", *extra)  # fmt: skip
        loaded = read_inputs(cfg).model.state_dict()
        wanted = ema if expect == "ema" else load_checkpoint(run / "last.pt")["model"]
        assert all(torch.equal(loaded[k], wanted[k]) for k in ("conv1.weight", "fc.weight")), extra


def test_regrid_reads_the_ema_and_records_that_it_did(tiny_folder, run, tmp_path):
    from resnet.cli.regrid import run as regrid

    out = tmp_path / "regridded.pt"
    report = regrid(compose_config("regrid", f"weights={run / 'last.pt'}", "ema=true", "+padding=asymmetric",
                                   f"out={out}", "data=imagefolder", f"data.root={tiny_folder}", "data.num_classes=3",
                                   "data.workers=0", "images=8", "batch_size=4", "device=cpu"))  # fmt: skip
    ema = load_checkpoint(run / "last.pt")["ema"]
    written = load_checkpoint(out)
    assert report["ema"] is True and written["regrid"]["ema"] is True
    assert torch.equal(written["model"]["conv1.weight"], ema["conv1.weight"])  # bn: only BN statistics change
