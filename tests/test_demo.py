"""The built-in demo's plumbing, on a few steps: train under two schemes, 2x2 evaluation, tables."""

from __future__ import annotations

import json

import pytest

from resnet.demo import main
from tests.builtin_data import require_fashion_mnist


@pytest.mark.slow
def test_demo_trains_twice_evaluates_four_times_and_writes_tables(tmp_path, capsys):
    require_fashion_mnist()
    # resnet_tiny for the default resnet_small: the same plumbing at a quarter of the convolutions
    # (six passes over the 10,000 test images dominate the test's time).
    main(["--out", str(tmp_path), "epochs=1", "max_steps_per_epoch=4", "batch_size=64", "model=resnet_tiny"])
    rows = [json.loads(line) for line in (tmp_path / "eval.jsonl").read_text().splitlines()]
    pairs = {(r["trained_padding"], r["padding_name"]) for r in rows}
    assert pairs == {(a, b) for a in ("symmetric", "asymmetric") for b in ("symmetric", "asymmetric")}
    assert all(r["n_images"] == 10000 and r["dataset"] == "fashion_mnist" and r["arch"] == "resnet_tiny" for r in rows)
    for name in ("cross.md", "cross.csv", "cross.png", "tensornets.md", "tensornets.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    out = capsys.readouterr().out
    assert "trained with \\ evaluated with" in out and "top-5 err % (asymmetric)" in out
