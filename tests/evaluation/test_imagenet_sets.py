"""The ImageNet family of test sets (data.testsets), each in its own layout on generated images: a
subset of val's wnid folders, ImageNet-V2, -ReaL, -R, -A and -Sketch. The model's predictions are fixed
(the same ranking of classes for every image), so a wrong class index or label rule changes the error."""

from __future__ import annotations

import json

import pytest
import torch

import resnet
from data.testsets import imagenet_wnids, subset_classes
from resnet.checkpoint import save_checkpoint
from resnet.config import ConfigError
from resnet.evaluation.run import evaluate_weights
from tests.helpers.compose import compose_config
from tests.helpers.imagegen import jpeg_bytes, make_folder, smooth_image

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

FIRST, LAST = "n01440764", "n15075141"  # ImageNet's classes 0 and 999


def always(tmp_path, *ranking: int):
    """A 1000-class resnet_tiny checkpoint that ranks the classes ``ranking`` first, in that
    order, for every image (the other classes tie below them)."""
    model = resnet.build_model("resnet_tiny", num_classes=1000)
    with torch.no_grad():
        model.fc.weight.zero_()
        model.fc.bias.zero_()
        for place, index in enumerate(ranking):
            model.fc.bias[index] = 10.0 - place
    return save_checkpoint(tmp_path / f"always_{'_'.join(map(str, ranking))}.pt", model)


def evaluate(root, weights, tmp_path, data: str = "imagenet", *extra: str) -> dict:
    return evaluate_weights(compose_config(
        "eval", f"weights={weights}", f"data={data}", f"data.root={root}", "crop=32", "data.workers=0",
        "device=cpu", f"results_file={tmp_path / 'rows.jsonl'}", *extra,
    ))  # fmt: skip


def test_the_class_lists_are_imagenets_order():
    wnids = imagenet_wnids()
    assert len(wnids) == 1000 == len(set(wnids)) and list(wnids) == sorted(wnids)
    assert (wnids[0], wnids[999]) == (FIRST, LAST)
    for name in ("imagenet_r", "imagenet_a"):
        sub, indices = subset_classes(name)
        assert len(sub) == 200 == len(set(sub)) and [wnids[i] for i in indices] == list(sub)


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


def write_val_images(folder, numbers) -> None:
    """ILSVRC2012_val_<n>.JPEG files, as the flat val/ holds them."""
    folder.mkdir(parents=True, exist_ok=True)
    for n in numbers:
        (folder / f"ILSVRC2012_val_{n:08d}.JPEG").write_bytes(jpeg_bytes(smooth_image(40, 36, seed=n), quality=90))


def test_imagenet_v2_folders_are_their_class_indices(tmp_path, capsys):
    make_folder(tmp_path / "v2", {"0": 2, "999": 3, "10": 1}, size=(40, 36))
    row = evaluate(tmp_path / "v2", always(tmp_path, 999), tmp_path, "imagenet_v2")
    assert row["dataset"] == "imagenet_v2" and row["n_images"] == 6
    assert row["top1_err"] == pytest.approx(50.0)  # sorted as text, "999" would be class 2 and all wrong
    assert "holds 3 of ImageNetV2's 1000 classes" in capsys.readouterr().out
    make_folder(tmp_path / "bad", {"1000": 1}, size=(40, 36))
    with pytest.raises(ConfigError, match=r"not among the 1000 classes expected \(1000\)"):
        evaluate(tmp_path / "bad", always(tmp_path, 0), tmp_path, "imagenet_v2")


def test_imagenet_real_scores_label_sets_and_leaves_out_unlabelled_images(tmp_path, capsys):
    # timm's real.json: image 1 has no valid label, 2 -> {970, 795}, 3 -> {230, 231}, 4 -> {809}
    write_val_images(tmp_path / "val", [1, 2, 3, 4])
    row = evaluate(tmp_path, always(tmp_path, 795, 231), tmp_path, "imagenet_real")
    assert row["dataset"] == "imagenet_real" and row["n_images"] == 3
    assert "left out 1 of 4 images that have no ReaL label" in capsys.readouterr().out
    assert row["top1_err"] == pytest.approx(100 * 2 / 3)  # 795 is right for image 2 only
    assert row["top5_err"] == pytest.approx(100 * 1 / 3)  # 231 is also right for image 3
    # the same images under another real.json
    other = tmp_path / "real.json"
    other.write_text(json.dumps([[1]] + [[795]] * 49_999))
    row = evaluate(tmp_path, always(tmp_path, 795, 231), tmp_path, "imagenet_real", f"data.real_labels={other}")
    assert (row["n_images"], row["top1_err"]) == (4, pytest.approx(25.0))


def test_imagenet_real_refuses_renamed_val_images(tmp_path):
    write_val_images(tmp_path / "val", [2])
    (tmp_path / "val" / "cat.jpg").write_bytes((tmp_path / "val" / "ILSVRC2012_val_00000002.JPEG").read_bytes())
    with pytest.raises(ConfigError, match=r"1 image\(s\) under .* are not named ILSVRC2012_val_"):
        evaluate(tmp_path, always(tmp_path, 0), tmp_path, "imagenet_real")


@pytest.mark.parametrize("name", ["imagenet_r", "imagenet_a"])
def test_imagenet_r_and_a_score_only_their_200_logits(tmp_path, name):
    wnids, indices = subset_classes(name)
    make_folder(tmp_path / name, {wnids[0]: 1, wnids[5]: 3}, size=(40, 36))
    outside = next(i for i in range(1000) if i not in indices)
    # The best class overall is not one of the 200; among them, wnids[5] comes first.
    row = evaluate(tmp_path / name, always(tmp_path, outside, indices[5], indices[0]), tmp_path, name)
    assert row["dataset"] == name and row["n_images"] == 4
    assert row["top1_err"] == pytest.approx(25.0)  # over all 1,000 logits: 100
    assert row["top5_err"] == pytest.approx(0.0)


def test_imagenet_sketch_folders_keep_imagenets_indices(tmp_path):
    make_folder(tmp_path / "sketch", {FIRST: 1, LAST: 3}, size=(40, 36))
    row = evaluate(tmp_path / "sketch", always(tmp_path, 999), tmp_path, "imagenet_sketch")
    assert (row["dataset"], row["n_images"], row["top1_err"]) == ("imagenet_sketch", 4, pytest.approx(25.0))


def test_a_test_set_is_refused_for_training_and_a_missing_root_says_its_layout(tmp_path):
    from resnet.engine.run import train

    with pytest.raises(ConfigError, match="data=imagenet_r is a test set, evaluation only: train with data=imagenet"):
        train(compose_config("train", "data=imagenet_r", f"data.root={tmp_path}"))
    with pytest.raises(ConfigError, match=r"imagenet_v2 needs a directory holding <0..999>/\*.jpeg"):
        evaluate(tmp_path / "nowhere", always(tmp_path, 0), tmp_path, "imagenet_v2")
