"""The tests' side of tests/helpers/zygote.py: the server, and :class:`Forked`, the part of
``subprocess.Popen`` that tests/helpers/procs.py uses.

Under pytest-xdist the controller starts one server for all its workers (:func:`start_shared`,
from tests/conftest.py, before the workers exist), and the workers are forked from it too (their
``popen//python=`` is its stand-in, :func:`worker_python`); they find it through ``$TESTS_ZYGOTE``.
A server is an interpreter that imports torch, about 7 s of CPU on the 2-core runner. A pytest
process without that variable starts its own at its first use."""

from __future__ import annotations

import atexit
import contextlib
import json
import locale
import os
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = "TESTS_ZYGOTE"  # the folder of a server started for every pytest-xdist worker
_server: dict = {}  # "path", "python", "proc" (ours to stop); "off": why the server is not used


def fork(args: list[str], env: dict[str, str], cwd: Path) -> Forked | None:
    """The command forked from the server, or None where only a new interpreter is faithful."""
    argv = python_argv(args)
    if argv is None or os.environ.get("TESTS_FRESH_PROCESSES"):
        return None
    server = _running(env)
    if server is None:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(server["path"])
    stdin = os.open(os.devnull, os.O_RDONLY)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    request = json.dumps({"argv": argv, "env": env, "cwd": str(cwd)}).encode()
    socket.send_fds(sock, [request], [stdin, out_w, err_w])
    for fd in (stdin, out_w, err_w):
        os.close(fd)
    forked = Forked(args, sock, out_r, err_r)
    return None if forked.pid is None else forked  # None: the server asks for a new interpreter


def worker_python(env: dict[str, str]) -> str | None:
    """An interpreter for torchrun's ``PYTHON_EXEC`` that forks each worker from the server
    (tests/helpers/zygote_exec.py), or None where the server is not used."""
    return None if os.environ.get("TESTS_FRESH_PROCESSES") or _running(env) is None else _server["python"]


def python_argv(args: list[str]) -> list[str] | None:
    """``[script, *args]``, ``["-m", module, *args]`` or ``["-c", code, *args]`` for a command this Python would run."""
    if args[0] == sys.executable:
        rest = args[1:]
        if rest and (rest[0] in ("-m", "-c") and len(rest) > 1 or not rest[0].startswith("-")):
            return rest
        return None
    try:
        with open(args[0], "rb") as f:
            first = f.readline().strip()
    except OSError:
        return None
    return args if first == f"#!{sys.executable}".encode() else None  # a console script of this Python


def _running(env: dict[str, str]) -> dict | None:
    if "off" not in _server and "path" not in _server:
        if os.environ.get(SHARED):
            _attach(os.environ[SHARED], proc=None)
        else:
            _attach(*_launch(env))
    return None if "off" in _server else _server


def start_shared(env: dict[str, str]) -> None:
    """Start the server without waiting for it, and tell every process started from now on where it is."""
    os.environ[SHARED] = _launch(env)[0]


def _launch(env: dict[str, str]) -> tuple[str, subprocess.Popen]:
    """Start a server in a new folder: its socket, its stand-in interpreter (tests/helpers/zygote_exec.py),
    and its ``ready`` line and stderr as files. Stopped (and the folder removed) when this process exits."""
    folder = tempfile.mkdtemp(prefix="zygote-")
    path = os.path.join(folder, "sock")
    with open(os.path.join(folder, "out"), "w") as out, open(os.path.join(folder, "err"), "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.zygote", path], cwd=REPO, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err)  # fmt: skip
    atexit.register(shutil.rmtree, folder, True)  # after _stop: atexit runs its functions last-in first-out
    atexit.register(_stop, proc)
    python = os.path.join(folder, "python")
    with open(python, "w") as f:
        f.write(f"#!/bin/sh\nexec '{sys.executable}' -I -S '{REPO}/tests/helpers/zygote_exec.py' '{path}' \"$@\"\n")
    os.chmod(python, 0o755)
    Path(folder, "pid").write_text(str(proc.pid))  # a worker attaching to it sees whether it still runs
    return folder, proc


def _attach(folder: str, proc: subprocess.Popen | None) -> None:
    """Use the server of ``folder`` once it says ``ready``; off if it said anything else, ended
    first, or said nothing in 5 minutes."""
    out, err = (Path(folder, name) for name in ("out", "err"))
    pid = int(Path(folder, "pid").read_text())
    deadline = time.monotonic() + 300
    while not out.read_text() and not err.read_text() and time.monotonic() < deadline:
        ended = proc.poll() is not None if proc is not None else not _alive(pid)
        if ended:
            break
        time.sleep(0.05)
    ready, said = out.read_text(), err.read_text()
    if ready != "ready\n" or said:
        if proc is not None:
            _stop(proc)
        _server["off"] = f"the server did not start cleanly: {ready!r} {said[-2000:]!r}"
        return
    _server.update(path=os.path.join(folder, "sock"), python=os.path.join(folder, "python"))
    if proc is not None:
        _server["proc"] = proc


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped by its parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()


class Forked:
    """A forked command as procs.py sees a ``Popen``: ``pid`` (its own session: ``killpg`` reaches
    everything it starts), ``poll``, ``communicate`` (text, newlines translated as ``text=True``
    does) and ``returncode`` (negative for a signal)."""

    def __init__(self, args: list[str], sock: socket.socket, out_r: int, err_r: int):
        self.args = args
        self.returncode: int | None = None
        self._sock, self._said = sock, b""
        self._streams = {out_r: bytearray(), err_r: bytearray()}
        self._order = (out_r, err_r)
        self._open = {out_r, err_r}
        said = self._line(deadline=time.monotonic() + 60)
        self.pid = None if said == "fresh" else int(said)
        if self.pid is None:
            sock.close()
            for fd in self._open:
                os.close(fd)

    def _line(self, deadline: float | None) -> str | None:
        """The server's next line, waiting until ``deadline`` (None: not at all)."""
        while b"\n" not in self._said:
            wait = 0 if deadline is None else max(deadline - time.monotonic(), 0)
            self._sock.settimeout(wait)
            try:
                chunk = self._sock.recv(64)
            except (TimeoutError, BlockingIOError):
                return None
            if not chunk:
                raise RuntimeError(f"the zygote server went away while running {' '.join(self.args[:4])}")
            self._said += chunk
        line, self._said = self._said.split(b"\n", 1)
        return line.decode()

    def poll(self) -> int | None:
        if self.returncode is None and (line := self._line(deadline=None)) is not None:
            self.returncode = int(line)
            self._sock.close()
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        deadline = None if timeout is None else time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            for fd in self._open:
                selector.register(fd, selectors.EVENT_READ)
            while self._open:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout)
                for key, _ in selector.select(left):
                    chunk = os.read(key.fd, 1 << 16)
                    if chunk:
                        self._streams[key.fd] += chunk
                    else:
                        selector.unregister(key.fd)
                        os.close(key.fd)
                        self._open.discard(key.fd)
        while self.returncode is None:
            line = self._line(deadline=time.monotonic() + 3600 if deadline is None else deadline)
            if line is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = int(line)
            self._sock.close()
        encoding = locale.getpreferredencoding(False)
        out, err = (self._streams[fd].decode(encoding).replace("\r\n", "\n").replace("\r", "\n") for fd in self._order)
        return out, err
