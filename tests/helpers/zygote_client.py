"""The tests' side of tests/helpers/zygote.py: one server per pytest process, started at its first
use, and :class:`Forked`, the part of ``subprocess.Popen`` that tests/helpers/procs.py uses."""

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
_server: dict = {}  # "proc", "path", "python"; "off": why the server is not used


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
    if "off" in _server:
        return None
    if "proc" not in _server:
        _start(env)
    return None if "off" in _server else _server


def _start(env: dict[str, str]) -> None:
    folder = tempfile.mkdtemp(prefix="zygote-")
    path = os.path.join(folder, "sock")
    errors = open(os.path.join(folder, "stderr"), "w+")  # noqa: SIM115 - read once it is ready
    proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.zygote", path], cwd=REPO, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, text=True)  # fmt: skip
    atexit.register(shutil.rmtree, folder, True)  # after _stop: atexit runs its functions last-in first-out
    atexit.register(_stop, proc)
    ready = proc.stdout.readline()
    errors.seek(0)
    said = errors.read()
    if ready.strip() != "ready" or said:
        _stop(proc)
        _server["off"] = f"the server did not start cleanly: {ready!r} {said[-2000:]!r}"
        return
    python = os.path.join(folder, "python")
    with open(python, "w") as f:
        f.write(f"#!/bin/sh\nexec '{sys.executable}' -I -S '{REPO}/tests/helpers/zygote_exec.py' '{path}' \"$@\"\n")
    os.chmod(python, 0o755)
    _server.update(proc=proc, path=path, python=python)


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
