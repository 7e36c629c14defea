"""W&B never costs a run: with no API key, or no route to its server, ``logger=wandb`` logs offline,
says so in one line with the ``wandb sync`` command, and never waits on wandb's login prompt, on a
terminal or not; the run's files go under ``$WANDB_DIR`` when set (resnet/report/wandb_log.py)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from resnet.report.wandb_log import offline_reason, wandb_dir
from tests.helpers.procs import REPO, start, wait_all

# What RunLogger does with the logger node of configs/logger/wandb.yaml (mode: $WANDB_MODE, else online).
START_RUN = """
import sys
from resnet.report.wandb_log import start_run
run = start_run({"wandb": True, "project": "p", "mode": "online"}, {"seed": 0}, group="symmetric", run_dir=sys.argv[1])
run.log({"train/loss": 1.0})
run.finish()
print("finished")
"""


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """A new user's environment: an empty HOME (no ~/.netrc, no wandb settings), no W&B variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "NETRC"}
    return {**env, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), **extra}


def sync_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("W&B:")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def offline_runs(folder: Path) -> list[Path]:
    return sorted((folder / "wandb").glob("offline-run-*"))


def test_no_key_or_no_server_is_a_reason_to_go_offline(tmp_path, monkeypatch):
    for name in [k for k in os.environ if k.startswith("WANDB_")] + ["NETRC"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert offline_reason().startswith("no API key")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # the discard port: nothing listens
    assert offline_reason().startswith("no API key")
    (tmp_path / ".netrc").write_text("machine 127.0.0.1\n  login user\n  password " + "k" * 40 + "\n")  # wandb login's
    (tmp_path / ".netrc").chmod(0o600)
    assert offline_reason().startswith("no connection to 127.0.0.1:9")


def test_wandb_dir_is_honoured_else_the_run_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_DIR", raising=False)
    assert wandb_dir(tmp_path / "run") == tmp_path / "run"
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "volume"))
    assert wandb_dir(tmp_path / "run") == tmp_path / "volume"


@pytest.mark.slow
def test_without_a_key_or_a_server_the_run_goes_on_offline_and_says_how_to_sync(tmp_path):
    """No key and no terminal (a batch job), and a key with the server unreachable and $WANDB_DIR set."""
    # WANDB_MODE set but empty counts as unset (wandb itself fails on it)
    no_key = start([sys.executable, "-c", START_RUN, tmp_path / "a"], env=clean_env(tmp_path / "home_a", WANDB_MODE=""))
    volume = tmp_path / "volume"
    unreachable = clean_env(tmp_path / "home_b", WANDB_API_KEY="k" * 40, WANDB_BASE_URL="http://127.0.0.1:9",
                            WANDB_DIR=str(volume))  # fmt: skip
    no_server = start([sys.executable, "-c", START_RUN, tmp_path / "b"], env=unreachable)
    first, second = wait_all([no_key, no_server], timeout=180)
    for proc, folder, reason in ((first, tmp_path / "a", "no API key"), (second, volume, "no connection")):
        assert proc.returncode == 0 and proc.stdout.strip().endswith("finished"), proc.stderr[-3000:]
        (run,) = offline_runs(folder)
        line = sync_line(proc.stderr)
        assert reason in line and line.endswith(f"upload it later with `wandb sync {run}`")
        records = next(run.glob("*.wandb")).read_bytes()
        assert f"symmetric {'a' if folder == tmp_path / 'a' else 'b'}".encode() in records  # its display name
    assert not (tmp_path / "b" / "wandb").exists()  # $WANDB_DIR, not the run dir


@pytest.mark.slow
def test_on_a_terminal_without_a_key_nothing_waits_for_an_answer(tmp_path):
    """wandb asks a terminal user to log in (its account menu waits for a choice); a run must not wait."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", START_RUN, str(tmp_path / "run")], cwd=REPO,
                            stdin=follower, stdout=follower, stderr=follower, env=clean_env(tmp_path / "home"),
                            start_new_session=True)  # fmt: skip
    os.close(follower)
    output, deadline = b"", time.monotonic() + 180
    while proc.poll() is None and time.monotonic() < deadline:
        if select.select([leader], [], [], 1)[0]:
            try:
                output += os.read(leader, 65536)
            except OSError:  # the terminal closed: every writer exited
                break
    os.close(leader)
    text = output.decode(errors="replace").replace("\r\n", "\n")
    try:
        code = proc.wait(timeout=max(deadline - time.monotonic(), 5))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        pytest.fail(f"waited on the terminal for 180 s:\n{text[-3000:]}")
    assert code == 0 and "finished" in text, text[-3000:]
    (run,) = offline_runs(tmp_path / "run")
    assert f"wandb sync {run}" in sync_line(text)
