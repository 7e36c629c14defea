"""eval.py and ``max_unreadable``: over it, one line and no row; under it, the console says on how
many of the set's images the errors were computed (issue 55, item 3)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from resnet.config import ConfigError
from resnet.report.console import images_cell
from resnet.report.rows import read_rows
from tests.helpers import procs
from tests.helpers.evaluation import folder_overrides, run_eval
from tests.helpers.imagegen import make_folder

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def folder_with_unreadable(root: Path, unreadable: int) -> Path:
    """40 val images of 3 classes, the first ``unreadable`` of them (in name order) empty, cut short
    or not an image: two shards swapped, a mount gone half-way."""
    make_folder(root / "val", {"a": 14, "b": 13, "c": 13}, size=(40, 36))
    damage = (lambda b: b"", lambda b: b[: len(b) // 3], lambda b: b"not a JPEG at all")
    for n, path in enumerate(sorted((root / "val").rglob("*.JPEG"))[:unreadable]):
        path.write_bytes(damage[n % 3](path.read_bytes()))
    return root


def test_over_max_unreadable_eval_stops_in_one_line_and_appends_no_row(checkpoint, tmp_path):
    root = folder_with_unreadable(tmp_path / "data", 32)  # 8 of 40 readable
    results = tmp_path / "eval.jsonl"
    with pytest.raises(ConfigError) as stopped:
        run_eval(*folder_overrides(root, checkpoint, results))
    line = str(stopped.value)
    assert line.startswith("imagefolder could not read 32 of its 40 images (80%, more than max_unreadable=0.05), ")
    assert "e.g. " in line and line.endswith(
        "; no row appended. Restore the data, or pass a higher max_unreadable (1: never stop)"
    )
    assert read_rows(results) == []
    proc = procs.run([sys.executable, REPO / "eval.py", *folder_overrides(root, checkpoint, results)], cwd=tmp_path)
    errors = [text for text in proc.stderr.splitlines() if text.startswith("error: ")]
    assert proc.returncode == 2 and errors == [f"error: {line}"], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert read_rows(results) == []


def test_under_max_unreadable_the_console_says_on_how_many_images(checkpoint, tmp_path, capsys):
    results = tmp_path / "eval.jsonl"
    row = run_eval(*folder_overrides(folder_with_unreadable(tmp_path / "two", 2), checkpoint, results))
    assert (row["n_images"], row["skipped_images"]) == (38, 2)
    out = capsys.readouterr().out
    assert f"top-1 err {row['top1_err']:.2f}% on 38 of 40 images: 2 unreadable (max_unreadable=0.05), e.g. " in out
    assert "| 38 of 40: 2 unreadable |" in out  # the summary table's images
    allowed = run_eval(*folder_overrides(folder_with_unreadable(tmp_path / "most", 32), checkpoint, results),
                       "max_unreadable=1")  # fmt: skip
    assert (allowed["n_images"], allowed["skipped_images"]) == (8, 32)
    assert "| 8 of 40: 32 unreadable |" in capsys.readouterr().out
    assert len(read_rows(results)) == 2


def test_the_images_cell_of_a_whole_set_a_part_and_unreadable_files():
    assert images_cell(40) == 40
    assert images_cell(3, split=7) == "3 of 7"  # val_images=3
    assert images_cell(38, skipped=2) == "38 of 40: 2 unreadable"
    assert images_cell(2, skipped=1, split=7) == "2 of 3 (of 7): 1 unreadable"
    assert images_cell(1000, split=1000) == 1000
