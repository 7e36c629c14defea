"""A run directory belongs to one run at a time, and a failed checkpoint write loses nothing."""

from __future__ import annotations

import builtins
import errno
import os
import re
import signal
import socket
import subprocess
import sys
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

import resnet.checkpoint
from resnet.checkpoint import load_checkpoint
from resnet.engine.lock import LOCK_NAME, RunDirBusy, RunDirLock
from resnet.engine.run import CheckpointWriteError
from tests.helpers.training import REPO, read_csv, run_in_process

HOLD = """import sys
from resnet.engine.lock import RunDirLock
lock = RunDirLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
input()
"""


def test_a_live_run_keeps_its_dir_and_a_killed_one_is_taken_over(tiny_folder, tmp_path):
    run_dir = tmp_path / "run"
    zone = "Etc/GMT+5"  # not this machine's zone: the start time must be the holder's local time
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "TZ": zone})  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
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
        holder.send_signal(signal.SIGKILL)  # as kill -9: the kernel drops its lock, its .lock file stays
        holder.wait()
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

    monkeypatch.setattr(resnet.checkpoint, "open", open_on_a_disk_that_fills, raising=False)
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
