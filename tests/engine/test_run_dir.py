"""A run directory belongs to one run at a time, a failed checkpoint write loses nothing, and
``resume=true`` without a run dir resumes the one unfinished run of its config under outputs/."""

from __future__ import annotations

import builtins
import errno
import json
import os
import re
import shutil
import signal
import socket
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest
from omegaconf import OmegaConf

import resnet.checkpoint.save
from resnet.checkpoint import load_checkpoint
from resnet.config import ConfigError
from resnet.engine.run import CheckpointWriteError
from resnet.engine.train_config import train_config
from resnet.job import latest_run
from resnet.job.lock import LOCK_NAME, RunDirBusy, RunDirLock
from tests.helpers import procs
from tests.helpers.compose import compose_config
from tests.helpers.training import PY, REPO, read_csv, run_in_process, tiny_overrides

HOLD = """import sys, time
from pathlib import Path
from resnet.job.lock import RunDirLock
lock = RunDirLock(sys.argv[1])
lock.acquire()
Path(sys.argv[2]).write_text("held")
time.sleep(300)
"""


def test_a_live_run_keeps_its_dir_and_a_killed_one_is_taken_over(tiny_folder, tmp_path):
    run_dir, held = tmp_path / "run", tmp_path / "held"
    zone = "Etc/GMT+5"  # not this machine's zone: the start time must be the holder's local time
    holder = procs.start([sys.executable, "-c", HOLD, run_dir, held], {"TZ": zone})
    try:
        deadline = time.monotonic() + 60
        while not held.exists():
            assert holder.poll() is None and time.monotonic() < deadline, procs.wait_all([holder], 10)[0].stderr
            time.sleep(0.05)
        with pytest.raises(RunDirBusy) as busy:  # what train.py prints as its one error line
            run_in_process(tiny_folder, run_dir, "epochs=1")
        message = str(busy.value)
        when = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)"
        holder_is = rf"host {re.escape(socket.gethostname())}, pid {holder.pid}, started {when}\)"
        started = re.search(rf"{re.escape(str(run_dir))} is in use by another run \({holder_is}", message)
        assert started, message
        age = datetime.now(ZoneInfo(zone)).replace(tzinfo=None) - datetime.strptime(started[1], "%Y-%m-%d %H:%M:%S")
        assert timedelta(0) <= age < timedelta(minutes=5), message  # the holder's start, in its local time
        assert "pass another hydra.run.dir=<dir>" in message and "\n" not in message
        assert sorted(p.name for p in run_dir.iterdir()) == [LOCK_NAME]  # the refused run wrote nothing
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # as kill -9: the kernel drops its lock, its .lock file stays
        procs.wait_all([holder], timeout=30)
    assert (run_dir / LOCK_NAME).exists()
    run_in_process(tiny_folder, run_dir, "epochs=1")  # takes the stale lock over
    assert [row["epoch"] for row in read_csv(run_dir / "metrics.csv")] == ["1"]
    assert not (run_dir / LOCK_NAME).exists()  # released at the end


def test_taking_over_says_whose_lock_it_was(tmp_path, capsys):
    first = RunDirLock(tmp_path)
    assert first.acquire() is None
    first._file.close()  # dies without releasing: the file keeps its holder, nobody locks it
    note = RunDirLock(tmp_path).acquire()
    assert note.startswith(f"took over {tmp_path} from a run that ended without releasing it (host ")
    assert f"pid {os.getpid()}" in note


class _FullDisk:
    """A file whose writes fail with ENOSPC after ``room`` bytes, as on a full file system."""

    def __init__(self, file, room: int):
        self.file, self.room = file, room

    def write(self, data) -> int:
        if len(data) > self.room:
            self.file.write(bytes(data[: self.room]))
            self.room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.file.write(data)

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


def test_a_full_disk_while_saving_keeps_the_previous_checkpoint_and_stops_in_one_line(
    tiny_folder, tmp_path, monkeypatch
):
    saves = []

    def open_on_a_disk_that_fills(path, mode="r", *args, **kwargs):
        file = builtins.open(path, mode, *args, **kwargs)  # noqa: SIM115 (returned open, as open does)
        if "x" not in mode:  # only the checkpoint's temporary file
            return file
        saves.append(path)
        return file if len(saves) == 1 else _FullDisk(file, room=50_000)  # the second save fills the disk

    monkeypatch.setattr(resnet.checkpoint.save, "open", open_on_a_disk_that_fills, raising=False)
    with pytest.raises(CheckpointWriteError) as failed:
        run_in_process(tiny_folder, tmp_path, "epochs=3")
    message = str(failed.value)
    assert message.startswith(f"could not write {tmp_path / 'last.pt'} (") and "\n" not in message
    assert "(No space left on device)" in message
    assert "last.pt saved after epoch 1 (step 6) is intact" in message and "resume=true" in message
    assert load_checkpoint(tmp_path / "last.pt")["epoch"] == 1  # the previous one, whole
    assert not list(tmp_path.glob(".last.pt.*.tmp")) and not (tmp_path / LOCK_NAME).exists()
    monkeypatch.undo()
    run_in_process(tiny_folder, tmp_path, "epochs=3", "resume=true")  # space freed: it goes on
    assert [row["epoch"] for row in read_csv(tmp_path / "metrics.csv")] == ["1", "2", "3"]


# --- resume=true without a run dir ------------------------------------------------------------


@pytest.fixture(scope="module")
def unfinished(tiny_folder, tmp_path_factory) -> Path:
    """outputs/2026-01-01/10-00-00: a run of the tiny config stopped after epoch 1 of 2."""
    run_dir = tmp_path_factory.mktemp("latest") / "outputs" / "2026-01-01" / "10-00-00"
    run_in_process(tiny_folder, run_dir, "stop_after=1", "log_every=6")
    return run_dir


def outputs(tmp_path: Path, unfinished: Path, **runs: dict | None) -> Path:
    """tmp_path/outputs with a copy of ``unfinished`` per name (``2026-01-01/<name>``), each with
    its results.json where one is given."""
    for name, results in runs.items():
        shutil.copytree(unfinished, tmp_path / "outputs" / "2026-01-01" / name)
        if results is not None:
            (tmp_path / "outputs" / "2026-01-01" / name / "results.json").write_text(json.dumps(results))
    return tmp_path / "outputs"


def pick(tiny_folder, root: Path, *overrides: str) -> tuple[Path, str]:
    cfg = compose_config("train", *tiny_overrides(tiny_folder, root / "now" / "made-up", "resume=true", *overrides))
    return latest_run.unfinished_run(train_config(cfg), root)


def test_the_one_unfinished_run_of_the_config_is_resumed_whatever_else_is_there(tiny_folder, tmp_path, unfinished):
    root = outputs(tmp_path, unfinished, a={"epochs": 1}, b={"epochs": 2}, c=None)  # a: after stop_after=1 of 2
    # c: another config (seed=3), as Hydra records it: its .hydra/config.yaml, the run dir Hydra's to resolve
    hydra = compose_config("train", *[o for o in tiny_overrides(tiny_folder, root, "seed=3") if "run_dir" not in o])
    (root / "2026-01-01" / "c" / ".hydra").mkdir()
    (root / "2026-01-01" / "c" / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(hydra))
    assert "${hydra:runtime.output_dir}" in (root / "2026-01-01" / "c" / ".hydra" / "config.yaml").read_text()
    chosen, line = pick(tiny_folder, root)
    assert chosen == root / "2026-01-01" / "a"  # not b (finished), not c (seed=3)
    assert line.startswith(f"resume=true: resuming {chosen}, the unfinished run of this config under {root} (")
    assert pick(tiny_folder, root, "seed=3")[0] == root / "2026-01-01" / "c"


def test_none_or_several_unfinished_runs_are_refused_naming_each_and_the_run_dir_to_pass(
    tiny_folder, tmp_path, unfinished
):
    root = outputs(tmp_path, unfinished, a=None, b=None, done={"epochs": 2})
    with pytest.raises(ConfigError) as several:
        pick(tiny_folder, root)
    line = str(several.value)
    assert line.startswith(f"resume=true: 2 unfinished runs of this config under {root}: pass hydra.run.dir=")
    assert f"hydra.run.dir={root / '2026-01-01' / 'a'} (last.pt saved " in line and "\n" not in line
    assert f"hydra.run.dir={root / '2026-01-01' / 'b'} (last.pt saved " in line
    with pytest.raises(ConfigError) as none:
        pick(tiny_folder, root, "seed=9")
    line = str(none.value)
    assert line.startswith(f"resume=true: no unfinished run of this config under {root} (of other configs: ")
    assert f"{root / '2026-01-01' / 'a'} (seed=0, this run has 9)" in line and "done" not in line
    assert line.endswith(
        "pass hydra.run.dir=<run dir> (and its config) to resume one, or leave out resume=true to start a new run"
    )
    with pytest.raises(ConfigError, match=r"no unfinished run of this config under .* \(finished: .*done\)"):
        pick(tiny_folder, outputs(tmp_path / "only", unfinished, done={"epochs": 2}))


def test_a_run_with_padding_is_not_one_without(tiny_folder, tmp_path, unfinished):
    root = outputs(tmp_path, unfinished, a=None)
    with pytest.raises(ConfigError, match=r"a \(padding=\(the model's own\), this run has asymmetric\)"):
        pick(tiny_folder, root, "+padding=asymmetric")


def hydra_run(monkeypatch, output_dir: Path, run_dir_pattern: str, hydra_overrides=(), mode: str = "RUN") -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    got = SimpleNamespace(
        mode=RunMode[mode],
        overrides=SimpleNamespace(hydra=list(hydra_overrides)),
        run=SimpleNamespace(dir=run_dir_pattern),
        runtime=SimpleNamespace(output_dir=str(output_dir)),
    )
    monkeypatch.setattr(HydraConfig, "initialized", staticmethod(lambda: True))
    monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda: got))


@pytest.mark.parametrize(
    "case, searched",
    [
        ("default", True),
        ("hydra.run.dir=", False),
        ("run_dir=", False),
        ("multirun", False),
        ("resume=false", False),
        ("resume=path", False),
    ],
)
def test_only_a_made_up_run_dir_is_searched_beside(tmp_path, monkeypatch, case, searched):
    """scripts/slurm.sbatch (resume=true hydra.run.dir=...), a sweep, run_dir= and resume=<path> use their dir."""
    made_up = tmp_path / "outputs" / "2026-01-02" / "09-00-00"
    hydra_run(
        monkeypatch,
        made_up,
        "outputs/2026-01-02/09-00-00",
        ["hydra.run.dir=outputs/2026-01-02/09-00-00"] if case == "hydra.run.dir=" else [],
        "MULTIRUN" if case == "multirun" else "RUN",
    )
    resume = {"resume=false": False, "resume=path": "/x/last.pt"}.get(case, True)
    run_dir = tmp_path / "elsewhere" if case == "run_dir=" else made_up
    assert latest_run.made_up_run_dir(SimpleNamespace(resume=resume), run_dir) == (
        tmp_path / "outputs" if searched else None
    )


def test_train_py_resume_true_without_a_run_dir_goes_on_in_the_unfinished_run(tiny_folder, tmp_path, unfinished):
    root = outputs(tmp_path, unfinished, **{"10-00-00": None})
    args = [a for a in tiny_overrides(tiny_folder, tmp_path, "log_every=6") if not a.startswith("run_dir=")]
    proc = procs.run([PY, str(REPO / "train.py"), *args, "resume=true"], cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = Path("outputs") / "2026-01-01" / "10-00-00"
    assert f"resume=true: resuming {resumed}, the unfinished run of this config under outputs (" in proc.stdout
    assert f"resumed from {tmp_path / resumed / 'last.pt'} after epoch 1 (step 6)" in proc.stdout
    assert json.loads((root / "2026-01-01" / "10-00-00" / "results.json").read_text())["epochs"] == 2


def test_a_resume_on_another_training_set_is_one_line_and_a_moved_copy_resumes(tmp_path, one_thread, capsys):
    # The schedule was planned for the set's size: images added would make OneCycleLR refuse the
    # steps past its plan mid-run, images removed would end the run before its LR anneals.
    from resnet.config import ConfigError
    from tests.helpers.imagegen import make_tiny_folder

    data, run_dir = make_tiny_folder(tmp_path / "data"), tmp_path / "run"
    run_in_process(data, run_dir, "stop_after=1")
    extra = data / "train" / "a" / "extra.JPEG"
    shutil.copy(data / "train" / "a" / "0.JPEG", extra)  # a grown copy
    with pytest.raises(
        ConfigError,
        match=r"was trained on another training set \(25 training images now, 24 then\): "
        r"restore the data it was trained on .*pass data_changed=rescale .* or "
        r"fine-tune from it in a new run dir: init=.*last\.pt "
        r"hydra\.run\.dir=<new dir>$",
    ):
        run_in_process(data, run_dir, "resume=true")
    # ... or go on with the rest of the schedule planned for the new size (28 images: 7 steps an epoch,
    # not 6): it ends annealed, with no scheduler error
    more = [data / "train" / "c" / f"more{n}.JPEG" for n in range(3)]
    for path in more:
        shutil.copy(data / "train" / "c" / "0.JPEG", path)
    grown = tmp_path / "grown"
    shutil.copytree(run_dir, grown)
    run_in_process(data, grown, "resume=true", "data_changed=rescale")
    for path in more:
        path.unlink()
    out = capsys.readouterr().out
    assert "data_changed=rescale: 28 training images now, 24 then; the rest of the schedule is planned" in out
    assert [r["step"] for r in read_csv(grown / "metrics.csv")] == ["6", "13"]
    assert json.loads((grown / "results.json").read_text())["epochs"] == 2
    assert float(read_csv(grown / "steps.csv")[-1]["lr"]) < 1e-4  # the one-cycle's end, reached
    extra.rename(data / "train" / "b" / "extra.JPEG")  # as many images, one in another class
    (data / "train" / "a" / "1.JPEG").unlink()
    with pytest.raises(ConfigError, match=r"the same 24 training images in count, but other names or labels"):
        run_in_process(data, run_dir, "resume=true")
    (data / "train" / "b" / "extra.JPEG").rename(data / "train" / "a" / "1.JPEG")  # restored, as a node-local copy:
    moved = tmp_path / "local" / "copy"
    shutil.copytree(data, moved, ignore=shutil.ignore_patterns(".*.npz"))
    run_in_process(moved, run_dir, "resume=true")  # another root, the same files: it resumes
    assert json.loads((run_dir / "results.json").read_text())["epochs"] == 2


def test_a_checkpoint_saved_mid_epoch_before_the_set_was_recorded_still_resumes(tiny_folder, tmp_path, one_thread,
                                                                                capsys):  # fmt: skip
    # Written by the version before (no train_images / train_fingerprint in its layout), mid-epoch, as
    # a preempted job leaves one: it resumes there.
    import torch

    from tests.helpers.faults import WRAPPER, launch

    wrapper = tmp_path / "faulty_train.py"
    wrapper.write_text(WRAPPER)
    run_dir = tmp_path / "run"
    args = [o for o in tiny_overrides(tiny_folder, run_dir, "checkpoint_every=2") if not o.startswith("run_dir")]
    killed = launch([PY, str(wrapper), str(REPO / "train.py"), *args, f"hydra.run.dir={run_dir}"], "step:5")
    assert killed.returncode == -signal.SIGKILL
    saved = torch.load(run_dir / "last.pt", weights_only=True)
    assert saved["epoch_partial"]["batches"] == 4
    saved["layout"] = {k: v for k, v in saved["layout"].items() if not k.startswith("train_")}
    torch.save(saved, run_dir / "last.pt")
    run_in_process(tiny_folder, run_dir, "checkpoint_every=2", "resume=true")
    assert "after batch 4 of epoch 1 (step 4)" in capsys.readouterr().out


def test_rescale_with_a_new_lr_gives_the_schedule_a_run_of_that_lr_on_the_new_set_has(tmp_path, one_thread):
    # sched=cosine, optim.lr doubled on resume, 28 images for 24: the rebuilt schedule holds the new LR
    # once, not scaled again; epoch 2's LRs are those of a run on 28 images at that LR from the start.
    from tests.helpers.imagegen import make_tiny_folder

    data = make_tiny_folder(tmp_path / "data")
    common = ("sched=cosine", "log_every=1")
    run_in_process(data, tmp_path / "run", *common, "stop_after=1")
    for n in range(4):
        shutil.copy(data / "train" / "c" / "0.JPEG", data / "train" / "c" / f"more{n}.JPEG")
    run_in_process(data, tmp_path / "run", *common, "resume=true", "data_changed=rescale", "optim.lr=0.2")
    run_in_process(data, tmp_path / "fresh", *common, "optim.lr=0.2")
    lrs = [[float(r["lr"]) for r in read_csv(d / "steps.csv") if r["epoch"] == "2"] for d in ("run", "fresh")
           for d in [tmp_path / d]]  # fmt: skip
    assert len(lrs[0]) == 7 and lrs[0] == pytest.approx(lrs[1])
