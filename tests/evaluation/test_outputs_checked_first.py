"""Every command that writes results checks each output before the first image (issue 55): a
read-only results file, a parent that cannot be made, a file where a folder goes: one line at the
start, nothing evaluated. A disk that fills by the end loses no evaluation: the row goes to a file
named in the one line that ends the run."""

from __future__ import annotations

import errno
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

import resnet.report.rows
from resnet.cli import cross
from resnet.config import ConfigError
from resnet.out_files import writable_file, writable_folder
from resnet.report.rows import read_rows
from tests.helpers import procs
from tests.helpers.evaluation import folder_overrides, run_eval
from tests.helpers.training import PY, REPO


def test_a_results_file_that_cannot_be_written_is_found_before_any_work(tmp_path):
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ConfigError, match=r"results_file=x: .*a_file is a file, not a folder; choose another path"):
        writable_file(tmp_path / "a_file" / "eval.jsonl", "results_file=x", "results_file=results/eval.jsonl")
    with pytest.raises(ConfigError, match=r"results_file=d is a folder, not a file"):
        writable_file(tmp_path, "results_file=d", "results_file=results/eval.jsonl")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("old\n")
    before = rows.stat().st_mtime_ns
    assert writable_file(rows, "results_file=r", "e") == rows and rows.stat().st_mtime_ns == before  # untouched
    assert writable_file(tmp_path / "new" / "deep" / "rows.jsonl", "results_file=n", "e")  # made when written
    assert not (tmp_path / "new").exists()  # ... not before
    assert writable_folder(tmp_path / "out" / "tables", "--out o", "e").is_dir()
    assert not list(tmp_path.rglob("*.probe"))  # the probes are gone


@pytest.mark.skipif(os.geteuid() != 0, reason="a read-only bind mount needs root")
@pytest.mark.parametrize("installed", [False, True])
def test_eval_with_a_read_only_results_file_stops_before_the_first_image(folder_and_checkpoint, tmp_path, installed):
    folder, checkpoint = folder_and_checkpoint
    mount = tmp_path / "mount"
    mount.mkdir()
    (mount / "eval.jsonl").write_text("")
    subprocess.run(["mount", "--bind", str(mount), str(mount)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mount)], check=True)
        app = [procs.installed_script("resnet-eval")] if installed else [PY, REPO / "eval.py"]
        proc = procs.run([*app, *folder_overrides(folder, checkpoint, mount / "eval.jsonl")], cwd=tmp_path)
    finally:
        subprocess.run(["umount", str(mount)], check=True)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and "\n" not in err, err[-3000:]
    assert f"cannot write {mount / 'eval.jsonl'} (Read-only file system); choose another file" in err
    assert "eval:" not in proc.stdout and "evaluating" not in proc.stdout  # not one image read


def test_a_disk_full_at_the_end_keeps_the_row_in_a_file_it_names(folder_and_checkpoint, tmp_path, monkeypatch):
    folder, checkpoint = folder_and_checkpoint
    results = tmp_path / "eval.jsonl"
    real = resnet.report.rows.append_row

    def full(path, row):
        if Path(path) == results:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, row)

    monkeypatch.setattr("resnet.evaluation.run.append_row", full)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # gettempdir() caches $TMPDIR's first answer
    with pytest.raises(ConfigError) as err:
        run_eval(*folder_overrides(folder, checkpoint, results))
    line = str(err.value)
    assert line.startswith(f"cannot append the results row to {results} (No space left on device); it is kept in ")
    kept = Path(line.split("it is kept in ")[1].split(":")[0])
    assert kept.parent == tmp_path / "tmp"
    (row,) = read_rows(kept)
    assert row["weights"] == str(checkpoint) and row["n_images"] > 0
    assert f"cat {kept} >> {results}" in line


def test_cross_checks_its_out_folder_before_the_first_evaluation(tmp_path, capsys, folder_and_checkpoint):
    _, checkpoint = folder_and_checkpoint
    (tmp_path / "taken").write_text("a file where the folder goes")
    with pytest.raises(SystemExit) as exit_:
        cross.main([str(checkpoint), "--out", str(tmp_path / "taken" / "cross"), "data=fashion_mnist"])
    err = capsys.readouterr()
    assert exit_.value.code == 2 and "is a file, not a folder" in err.err and "===" not in err.out


@pytest.fixture(scope="module")
def folder_and_checkpoint(tmp_path_factory, checkpoint):
    from tests.helpers.imagegen import make_folder

    root = tmp_path_factory.mktemp("folder")
    make_folder(root / "val", {"a": 2, "b": 1, "c": 1}, size=(40, 36))
    return root, checkpoint
