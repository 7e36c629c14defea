"""Progress as a bar on a terminal, plain lines in a batch job's log (resnet/report/progress.py)."""

from __future__ import annotations

import io
import os
import re

import pytest

from resnet.config import ConfigError
from resnet.report.progress import ENV, Progress, progress_mode

ELAPSED = r"\d+:\d\d:\d\d elapsed"
ETA = rf"{ELAPSED}, ETA \d+:\d\d:\d\d"


@pytest.fixture
def terminal():
    """A pseudo-terminal's end, as a text file: isatty() is true."""
    leader, follower = os.openpty()
    stream = open(follower, "w")  # noqa: SIM115 -- closed below
    yield stream
    stream.close()
    os.close(leader)


@pytest.fixture
def pipe():
    read_end, write_end = os.pipe()
    stream = open(write_end, "w")  # noqa: SIM115 -- closed below
    yield stream
    stream.close()
    os.close(read_end)


@pytest.fixture
def no_override(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


# --- the choice -----------------------------------------------------------------------------


def test_a_bar_on_a_terminal_lines_on_a_pipe_or_file(terminal, pipe, tmp_path):
    assert progress_mode(terminal, {}) == "bar"
    assert progress_mode(pipe, {}) == "lines"
    with open(tmp_path / "log", "w") as log:
        assert progress_mode(log, {}) == "lines"
    assert progress_mode(io.StringIO(), {}) == "lines"


def test_a_slurm_batch_job_gets_lines_even_on_a_terminal(terminal):
    assert progress_mode(terminal, {"SLURM_JOB_ID": "42", "SLURM_JOB_NAME": "train-rn50"}) == "lines"
    assert progress_mode(terminal, {"SLURM_JOB_ID": "42"}) == "lines"
    # interactive: srun --pty (SLURM_PTY_PORT), or the shell salloc / srun --pty bash gives
    assert progress_mode(terminal, {"SLURM_JOB_ID": "42", "SLURM_JOB_NAME": "x", "SLURM_PTY_PORT": "4242"}) == "bar"
    assert progress_mode(terminal, {"SLURM_JOB_ID": "42", "SLURM_JOB_NAME": "bash"}) == "bar"
    assert progress_mode(terminal, {"SLURM_JOB_ID": "", "SLURM_JOB_NAME": "train"}) == "bar"


def test_the_environment_overrides_the_choice(terminal, pipe):
    assert progress_mode(terminal, {ENV: "lines"}) == "lines"
    assert progress_mode(pipe, {ENV: "bar"}) == "bar"
    assert progress_mode(terminal, {ENV: " OFF "}) == "off"
    assert progress_mode(pipe, {ENV: "auto"}) == "lines" and progress_mode(terminal, {ENV: ""}) == "bar"
    assert progress_mode(terminal, {ENV: "bar", "SLURM_JOB_ID": "42"}) == "bar"
    with pytest.raises(ValueError, match="RESNET_PROGRESS='bars': use bar, lines, off or auto"):
        progress_mode(terminal, {ENV: "bars"})


def test_the_mode_follows_sys_stderr(monkeypatch, terminal, pipe):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setattr("sys.stderr", terminal)
    assert Progress(3, "x").mode == "bar"
    monkeypatch.setattr("sys.stderr", pipe)
    assert Progress(3, "x").mode == "lines" and Progress(3, "x", enabled=False).mode == "off"
    monkeypatch.setenv(ENV, "line")
    with pytest.raises(ConfigError, match="RESNET_PROGRESS='line'"):  # on every rank, not only the one that shows it
        Progress(3, "x", enabled=False)


# --- the lines ------------------------------------------------------------------------------


def test_lines_every_n_and_at_the_end_once():
    out = io.StringIO()
    with Progress(7, "val", unit="batches", every=2, mode="lines", file=out) as bar:
        for _ in range(7):
            bar.update(1, images=4)
    lines = out.getvalue().splitlines()
    counts = [re.match(r"val: (\d)/7 batches \((\d+)%\)", line).groups() for line in lines]
    assert counts == [("2", "28"), ("4", "57"), ("6", "85"), ("7", "100")]
    assert re.fullmatch(rf"val: 2/7 batches \(28%\) \| img/s [\d,]+ \| {ETA}", lines[0]), lines[0]
    assert re.fullmatch(rf"val: 7/7 batches \(100%\) \| img/s [\d,]+ \| {ELAPSED}", lines[-1]), lines[-1]
    assert "\r" not in out.getvalue()


def test_log_prints_the_callers_numbers_and_close_adds_nothing_after_them():
    out = io.StringIO()
    bar = Progress(6, "train 3", initial=2, unit="batches", mode="lines", file=out)  # resumed after 2 batches
    bar.update(2)
    bar.log({"loss": "2.314", "lr": "0.1", "img/s": "1,234"})
    bar.update(2)
    bar.log({"loss": "2.001", "lr": "0.1", "img/s": "1,240"})
    bar.close()
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert re.fullmatch(rf"train 3: 4/6 batches \(66%\) \| loss 2.314 \| lr 0.1 \| img/s 1,234 \| {ETA}", lines[0])
    assert lines[1].startswith("train 3: 6/6 batches (100%) | loss 2.001 |")


def test_an_interrupted_loop_still_says_where_it_stopped():
    out = io.StringIO()
    with pytest.raises(KeyboardInterrupt), Progress(12, "train shards", unit="img", every=3, mode="lines", file=out):
        raise KeyboardInterrupt
    assert re.fullmatch(rf"train shards: 0/12 img \(0%\) \| {ELAPSED}\n", out.getvalue())


def test_unknown_total_off_and_bar():
    out = io.StringIO()
    with Progress(None, "read", unit="img", every=500, mode="lines", file=out) as bar:
        bar.update(1200)
    assert re.fullmatch(rf"read: 1,200 img \| {ELAPSED}\n", out.getvalue())
    off = io.StringIO()
    with Progress(5, "x", every=1, enabled=False, mode="lines", file=off) as bar:
        bar.update(5)
        bar.log({"loss": "1"})
    assert off.getvalue() == ""
    drawn = io.StringIO()
    with Progress(5, "x", mode="bar", file=drawn) as bar:
        bar.update(5)
    assert "\r" in drawn.getvalue()  # tqdm's redraws: what a log must not get
