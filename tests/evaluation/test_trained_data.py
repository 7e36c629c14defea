"""eval.py without ``data=``: a train.py checkpoint is evaluated on the data it was trained on, as
resnet-cross does, and its start line says so; weights that record no data are one line naming
``data=`` (issue 54)."""

from __future__ import annotations

import pytest

from resnet.checkpoint import load_checkpoint
from resnet.evaluation.trained_data import chose_data, recorded_data
from resnet.report.rows import read_rows
from tests.helpers import procs
from tests.helpers.training import PY, REPO, run_in_process


@pytest.fixture(scope="module")
def trained(tiny_folder, tmp_path_factory):
    """A run's last.pt: imagefolder at tiny_folder, under a per-site scheme."""
    run_dir = tmp_path_factory.mktemp("run")
    run_in_process(tiny_folder, run_dir, "+padding.block_conv=same", "epochs=1", "max_steps_per_epoch=1")
    return run_dir / "last.pt"


def eval_command(installed: bool) -> list:
    return [procs.installed_script("resnet-eval")] if installed else [PY, REPO / "eval.py"]


@pytest.mark.parametrize("installed", [False, True])
def test_a_checkpoint_is_evaluated_on_the_data_it_was_trained_on(trained, tiny_folder, tmp_path, installed):
    command = [*eval_command(installed), f"weights={trained}", "data.workers=0", "results_file=eval.jsonl"]
    proc = procs.run(command, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    start = next(line for line in proc.stdout.splitlines() if line.startswith("evaluating "))
    assert start == (
        f"evaluating {trained}: resnet_tiny trained with symmetric[block_conv=same], under padding "
        "symmetric[block_conv=same] (+padding=symmetric +padding.block_conv=same), on imagefolder "
        "(the data they were trained on; data=<name> for another)"
    )
    (row,) = read_rows(tmp_path / "eval.jsonl")
    images = [p for p in (tiny_folder / "val").rglob("*") if p.is_file()]
    assert row["dataset"] == "imagefolder" and row["n_images"] == len(images)  # tiny_folder's val split, whole


def test_data_named_on_the_command_line_wins_and_the_line_says_nothing_of_training(trained, tiny_folder, tmp_path):
    command = [PY, REPO / "eval.py", f"weights={trained}", "data=imagefolder", f"data.root={tiny_folder}",
               "data.workers=0", "results_file=eval.jsonl", "+padding=asymmetric"]  # fmt: skip
    proc = procs.run(command, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "under padding asymmetric, on imagefolder\n" in proc.stdout


@pytest.mark.parametrize(
    "weights",
    ["timm:resnet18.a1_in1k", "torchvision:ResNet18_Weights.IMAGENET1K_V1", "bare"],
)
def test_weights_that_record_no_data_are_one_line_naming_data(weights, checkpoint, tmp_path):
    if weights == "bare":  # saved by the library (resnet.checkpoint.save_checkpoint), with no run config
        assert "config" not in load_checkpoint(checkpoint)
        weights = str(checkpoint)
    proc = procs.run([PY, REPO / "eval.py", f"weights={weights}"], cwd=tmp_path)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and "\n" not in err, err
    assert f"weights={weights} record no data they were trained on" in err
    assert "data.root=/path/to/imagenet" in err and "data=fashion_mnist" in err


def test_which_overrides_choose_the_data(trained, tiny_folder):
    assert chose_data(["data=imagenet"]) and chose_data(["+data=imagefolder"]) and chose_data(["data@x=imagenet"])
    assert not chose_data(["data.root=/x", "data.workers=0", "dataset=x"])
    assert recorded_data(str(trained)) == {"name": "imagefolder", "root": str(tiny_folder)}
    assert recorded_data("timm:resnet50") is None
