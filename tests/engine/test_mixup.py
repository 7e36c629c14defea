"""Mixup/CutMix with whatever batch size skipping unreadable images leaves, odd ones included."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from timm.data import Mixup

from resnet.config import ConfigError
from resnet.engine.mixup import AnyBatchMixup
from tests.helpers.imagegen import jpeg_bytes, make_folder, smooth_image
from tests.helpers.training import read_csv, run_in_process

SETTINGS = {"mixup_alpha": 0.8, "cutmix_alpha": 1.0, "label_smoothing": 0.1, "num_classes": 5}


def seed(value: int) -> None:
    np.random.seed(value)  # timm draws lambda and the mixup / cutmix choice with numpy
    torch.manual_seed(value)


def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(n)
    return torch.rand(n, 3, 8, 8, generator=generator), torch.randint(0, 5, (n,), generator=generator)


@pytest.mark.parametrize("n", [2, 6])
def test_even_batches_are_timms_own(n):
    x, y = batch(n)
    seed(0)
    ours = AnyBatchMixup(**SETTINGS)(x.clone(), y)
    seed(0)
    timms = Mixup(**SETTINGS)(x.clone(), y)
    assert torch.equal(ours[0], timms[0]) and torch.equal(ours[1], timms[1])


@pytest.mark.parametrize("n", [1, 3, 7])
def test_odd_batches_mix_all_but_the_last_image(n):
    x, y = batch(n)
    with pytest.raises(AssertionError):  # what skipping used to run into
        Mixup(**SETTINGS)(x.clone(), y)
    for value in range(8):  # mixup and cutmix draws both
        seed(value)
        mixed, target = AnyBatchMixup(**SETTINGS)(x.clone(), y)
        seed(value)
        head = Mixup(**SETTINGS)(x[:-1].clone(), y[:-1]) if n > 1 else (x[:0], torch.empty(0, 5))
        assert torch.equal(mixed[:-1], head[0]) and torch.equal(target[:-1], head[1])
        assert torch.equal(mixed[-1], x[-1])  # the last image as it was, with its own smoothed label
        expected = torch.full((5,), 0.1 / 5)
        expected[y[-1]] += 0.9
        assert torch.allclose(target[-1], expected)
        assert target.shape == (n, 5) and torch.allclose(target.sum(1), torch.ones(n))


def test_training_with_mixup_survives_odd_batches_left_by_unreadable_images(tmp_path):
    # 3 classes x 4 images + 1 unreadable file: batches of 4 become 4, 4 and 3 (drop_last keeps full ones).
    make_folder(tmp_path / "data" / "train", {"a": 4, "b": 4, "c": 4}, size=(40, 36))
    make_folder(tmp_path / "data" / "val", {"a": 1, "b": 1, "c": 1}, size=(40, 36))
    good = jpeg_bytes(smooth_image(40, 36))
    (tmp_path / "data" / "train" / "c" / "truncated.JPEG").write_bytes(good[: len(good) // 3])
    run_in_process(
        tmp_path / "data", tmp_path / "run", "mixup=0.8", "cutmix=1.0", "epochs=1", "log_every=1", "max_unreadable=0.1"
    )  # 1 of 13
    [row] = read_csv(tmp_path / "run" / "metrics.csv")
    assert row["skipped_images"] == "1" and "truncated.JPEG" in row["skipped_examples"]
    steps = [line for line in (tmp_path / "run" / "steps.csv").read_text().splitlines()[1:]]
    assert len(steps) == 3  # every batch trained, the odd one too
    assert json.loads((tmp_path / "run" / "results.json").read_text())["n_val_images"] == 3


@pytest.mark.parametrize(
    "override, message",
    [
        (("mixup=0.2", "batch_size=1"), "batch_size=1 has nothing to mix: pass batch_size=2 or more"),
        (("cutmix=-1",), "cutmix=-1"),
        (("label_smoothing=1.5",), "label_smoothing=1.5: expected a number in [0, 1), e.g. label_smoothing=0.1"),
    ],
)
def test_impossible_mixing_settings_are_refused_up_front(tiny_folder, tmp_path, override, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        run_in_process(tiny_folder, tmp_path, *override)
    assert not list(tmp_path.glob("*.csv"))
