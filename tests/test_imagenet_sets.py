"""ImageNet test sets other than the full val folder: a subset of val's wnid folders keeps ImageNet's
class indices. The model's predictions are fixed (one class for every image), so a wrong index shows."""

from __future__ import annotations

import pytest
import torch

import resnet
from resnet.checkpoint import save_checkpoint
from resnet.config import ConfigError
from resnet.evaluation.loader import imagenet_wnids
from resnet.evaluation.run import evaluate_weights
from tests.compose import compose_config
from tests.imagegen import make_folder

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

FIRST, LAST = "n01440764", "n15075141"  # ImageNet's classes 0 and 999


def always(tmp_path, index: int):
    """A 1000-class resnet_tiny checkpoint that predicts class ``index`` for every image."""
    model = resnet.build_model("resnet_tiny", num_classes=1000)
    with torch.no_grad():
        model.fc.weight.zero_()
        model.fc.bias.zero_()
        model.fc.bias[index] = 10.0
    return save_checkpoint(tmp_path / f"always_{index}.pt", model)


def evaluate(root, weights, tmp_path) -> dict:
    return evaluate_weights(compose_config(
        "eval", f"weights={weights}", "data=imagenet", f"data.root={root}", "data.image_size=32", "data.workers=0",
        "device=cpu", f"results_file={tmp_path / 'rows.jsonl'}",
    ))  # fmt: skip


def test_the_wnid_list_is_imagenets_order():
    wnids = imagenet_wnids()
    assert len(wnids) == 1000 == len(set(wnids)) and wnids == sorted(wnids)
    assert (wnids[0], wnids[999]) == (FIRST, LAST)


def test_a_subset_of_val_keeps_imagenets_class_indices(tmp_path, capsys):
    make_folder(tmp_path / "val", {FIRST: 2, LAST: 3}, size=(40, 36))  # no train/: a val-only root
    row = evaluate(tmp_path, always(tmp_path, 999), tmp_path)
    assert "holds 2 of ImageNet's 1000 classes" in capsys.readouterr().out
    # Folder order would number LAST as class 1 and count every image wrong.
    assert (row["n_images"], row["top1_err"]) == (5, pytest.approx(40.0))
    row = evaluate(tmp_path, always(tmp_path, 0), tmp_path)
    assert row["top1_err"] == pytest.approx(60.0)


def test_a_folder_that_is_no_imagenet_class_is_one_line(tmp_path):
    make_folder(tmp_path / "val", {FIRST: 1, "cats": 1}, size=(40, 36))
    with pytest.raises(ConfigError) as refused:
        evaluate(tmp_path, always(tmp_path, 0), tmp_path)
    assert "has 1 class folder(s) that are not among the 1000 classes expected (cats)" in str(refused.value)
