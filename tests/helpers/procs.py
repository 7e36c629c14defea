"""Starting the project's commands as the tests' subprocesses, so that a hang fails a test and
never stalls the suite: each command runs in its own session (process group), and past its
deadline the whole group (torchrun's workers, every stand-in srun task) is killed.

A Python command is forked from a server that has imported torch already (tests/helpers/zygote.py:
the same process a new interpreter would be, 3.5 s of CPU sooner), and so are torchrun's workers
(tests/helpers/zygote_exec.py); ``fresh=True``, or a command or environment the server cannot
reproduce, starts a new interpreter."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.helpers import zygote_client

REPO = Path(__file__).resolve().parents[2]


def start(args: Sequence[str], env: dict[str, str] | None = None, cwd: Path = REPO,
          fresh: bool = False) -> subprocess.Popen | zygote_client.Forked:  # fmt: skip
    args = [str(a) for a in args]
    env = command_env(env)
    if not fresh and _is_torchrun(args) and "PYTHON_EXEC" not in env and (python := forking_python(env)):
        env["PYTHON_EXEC"] = python  # its workers are forked too (tests/helpers/zygote_exec.py)
    if not fresh and (forked := zygote_client.fork(args, env, Path(cwd))) is not None:
        return forked
    return subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)  # fmt: skip


def installed_script(name: str) -> Path | None:
    """Where pip put this interpreter's console script ``name``: beside it in a venv, in the
    install scheme's scripts folder for a system Python (/usr/local/bin in the Docker image)."""
    for folder in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        if os.access(folder / name, os.X_OK):
            return folder / name
    return None


def torchrun_here(nproc: int = 2) -> list[str]:
    """torchrun on this one host, with ``nproc`` processes: ``--local-addr`` keeps c10d from looking
    the host's name up, which fails (and retries for 5 minutes) in a container with no network."""
    return [str(installed_script("torchrun")), "--standalone", "--local-addr=127.0.0.1", f"--nproc_per_node={nproc}"]


def forking_python(env: dict[str, str] | None = None) -> str | None:
    """An interpreter path whose commands are forked from the server (tests/helpers/zygote_exec.py),
    for a tool that starts Python commands as ``$PYTHON_EXEC`` (torchrun, benchmarks); None where
    the server is not used."""
    return zygote_client.worker_python(command_env(env))


def command_env(env: dict[str, str] | None) -> dict[str, str]:
    """A command's environment: this process's, one intra-op thread, then ``env``."""
    return {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}


def _is_torchrun(args: list[str]) -> bool:
    return Path(args[0]).name == "torchrun" or args[1:3] == ["-m", "torch.distributed.run"]


def wait_all(procs: list[subprocess.Popen], timeout: float) -> list[subprocess.CompletedProcess]:
    """Wait for every process under one deadline; past it (or on any error, Ctrl-C included) kill
    every group, children whose leader has already exited too, and fail the test."""
    deadline = time.monotonic() + timeout
    done = []
    try:
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                _kill_groups(procs)
                out, err = proc.communicate(timeout=30)
                pytest.fail(f"{' '.join(proc.args[:4])} ... hung for {timeout} s\n{out[-2000:]}\n{err[-3000:]}")
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        _kill_groups(procs)  # whatever is left of each group: workers that outlived their launcher
    return done


def _kill_groups(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the group outlives its leader while a member runs


def run(args: Sequence[str], env: dict[str, str] | None = None, timeout: float = 240, cwd: Path = REPO,
        fresh: bool = False) -> subprocess.CompletedProcess:  # fmt: skip
    """Run one command (and everything it starts) to its end, or fail the test at ``timeout``."""
    return wait_all([start(args, env, cwd, fresh)], timeout)[0]
