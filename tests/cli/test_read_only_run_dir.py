"""A run folder that exists on a read-only mount (a run resumed, or a finished run started again,
from a container's ``-v ...:ro``): one line saying what to do, never Hydra's 56-line traceback
about its log handler (issue 55), for train.py and eval.py, from a checkout and installed."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import procs
from tests.helpers.training import PY, REPO, run_in_process

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a read-only bind mount needs root")


@contextlib.contextmanager
def read_only(folder: Path):
    subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True)
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture(scope="module")
def runs(tiny_folder, tmp_path_factory) -> Path:
    """``mount/finished``: a finished 1-epoch run; ``mount/unfinished``: the same without its results.json."""
    mount = tmp_path_factory.mktemp("mount")
    run_in_process(tiny_folder, mount / "finished", "epochs=1", "max_steps_per_epoch=1")
    shutil.copytree(mount / "finished", mount / "unfinished")
    (mount / "unfinished" / "results.json").unlink()
    return mount


def command(app: str, installed: bool) -> list:
    return [procs.installed_script(f"resnet-{app}")] if installed else [PY, REPO / f"{app}.py"]


@pytest.mark.slow
@pytest.mark.parametrize("installed", [False, True])
@pytest.mark.parametrize(
    "run, extra, says",
    [
        ("finished", [], r"holds a finished run \(1 epoch, top-1 err [\d.]+%\): evaluate it with {eval} weights="),
        ("finished", ["resume=true"], r"holds a finished run .*; to train it further, cp -r {dir} <a writable"),
        ("unfinished", ["resume=true"], r"so its run cannot go on there: to resume it, cp -r {dir} <a writable folder> "
                                        r"and run again with hydra.run.dir=<that folder> resume=true"),
    ],
)  # fmt: skip
def test_a_read_only_run_folder_is_one_line_saying_what_to_do(runs, tiny_folder, tmp_path, run, extra, says, installed):
    import re

    folder = runs / run
    args = ["model=resnet_tiny", "data=imagefolder", f"data.root={tiny_folder}", "data.num_classes=3",
            "data.image_size=32", "epochs=1", f"hydra.run.dir={folder}", *extra]  # fmt: skip
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    with read_only(runs):
        proc = procs.run([*command("train", installed), *args], cwd=tmp_path, timeout=120)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and "\n" not in err and "Traceback" not in err, err[-3000:]
    evaluate = "resnet-eval" if installed else "python eval.py"
    assert re.search(says.format(dir=re.escape(str(folder)), eval=re.escape(evaluate)), err), err
    assert err.startswith(f"error: {folder} cannot be written (Read-only file system)")
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == before  # nothing touched


@pytest.mark.slow
@pytest.mark.parametrize("installed", [False, True])
def test_eval_with_its_record_folder_read_only_is_one_line(runs, tiny_folder, tmp_path, installed):
    args = [f"weights={runs / 'finished' / 'last.pt'}", "data.workers=0", f"hydra.run.dir={runs / 'finished'}",
            f"results_file={tmp_path / 'eval.jsonl'}"]  # fmt: skip
    with read_only(runs):
        proc = procs.run([*command("eval", installed), *args], cwd=tmp_path, timeout=120)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and "\n" not in err, err[-3000:]
    assert err == (
        f"error: {runs / 'finished'} cannot be written (Read-only file system): pass hydra.run.dir=<a writable "
        "folder>, where this run keeps its log and config record"
    )
