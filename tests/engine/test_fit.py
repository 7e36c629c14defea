"""The fit the epochs leave (resnet.job.ending.Fit): ``fill_from`` names each field it copies, so a
field added later must be added there too."""

from __future__ import annotations

from dataclasses import fields

from resnet.job.ending import Fit


def test_fill_from_copies_every_field():
    filled = Fit(0)
    done = Fit(
        3,
        val={"top1_err": 0.5},
        ema_val={"top1_err": 0.4},
        train={"loss": 1.5, "images_per_s": 12.5},
        history=[{"epoch": 1}],
        trained_to=3,
    )
    filled.fill_from(done)
    assert {f.name for f in fields(Fit)} == {"epochs", "val", "ema_val", "train", "history", "trained_to"}
    for f in fields(Fit):
        assert getattr(filled, f.name) is getattr(done, f.name), f.name
    assert filled.finished
