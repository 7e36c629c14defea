"""The built-in demo's plumbing, on a few steps: train under two schemes, 2x2 evaluation, tables."""

from __future__ import annotations

import json

from resnet.demo import main
from tests.builtin_data import require_fashion_mnist


def test_demo_trains_twice_evaluates_four_times_and_writes_tables(tmp_path, capsys):
    require_fashion_mnist()
    main(["--out", str(tmp_path), "epochs=1", "max_steps_per_epoch=4", "batch_size=64"])
    rows = [json.loads(line) for line in (tmp_path / "eval.jsonl").read_text().splitlines()]
    pairs = {(r["trained_padding"], r["padding_name"]) for r in rows}
    assert pairs == {(a, b) for a in ("symmetric", "asymmetric") for b in ("symmetric", "asymmetric")}
    assert all(r["n_images"] == 10000 and r["dataset"] == "fashion_mnist" for r in rows)
    for name in ("cross.md", "cross.csv", "cross.png", "tensornets.md", "tensornets.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    out = capsys.readouterr().out
    assert "trained with \\ evaluated with" in out and "top-5 err % (asymmetric)" in out
