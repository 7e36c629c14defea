"""The interpreter that torchrun starts its workers with under the tests (torchrun's ``PYTHON_EXEC``).

torchrun runs ``$PYTHON_EXEC -u train.py ...`` for each worker. This stand-in, a Python started
without ``site`` (a few tens of milliseconds), asks the tests' server (tests/helpers/zygote.py) to
fork ``train.py ...`` with this process's argv, environment, working directory and standard
streams, then stands for it towards torchrun until it ends:

- every signal it gets goes on to the worker's process group (torchrun stops a worker group with
  ``killpg``: SIGTERM, then SIGKILL);
- if it is killed itself (SIGKILL cannot be passed on), the server sees its connection close and
  kills the worker's group;
- it ends as the worker ended: the same exit status, or death by the same signal.

A command the server cannot reproduce (an option other than ``-u``, or a start-up variable that
differs from the server's) is run by the real interpreter instead, with ``exec``.

Usage: ``python -I -S zygote_exec.py SOCKET [-u] (script | -m module | -c code) [args...]``
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys

NOT_PASSED_ON = {signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD}


def main() -> None:
    path, args = sys.argv[1], sys.argv[2:]
    unbuffered = False
    while args and args[0] == "-u":
        unbuffered, args = True, args[1:]
    simple = bool(args) and (args[0] in ("-m", "-c") and len(args) > 1 or not args[0].startswith("-"))
    worker = connect(path, args, unbuffered) if simple else None
    if worker is None:
        real = [sys.executable, *(["-u"] if unbuffered else []), *args]
        os.execv(sys.executable, real)
    sock, pid = worker
    for sig in signal.valid_signals() - NOT_PASSED_ON:
        with contextlib.suppress(OSError, ValueError):  # not catchable here
            signal.signal(sig, lambda number, _frame: os.killpg(pid, number))
    said = line(sock)
    if said is None:
        sys.exit("tests/helpers/zygote_exec.py: the server went away")
    end(int(said))


def connect(path: str, args: list[str], unbuffered: bool) -> tuple[socket.socket, int] | None:
    """The connection and the forked worker's pid, or None where the server asks for a new interpreter."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        return None
    request = {"argv": args, "env": dict(os.environ), "cwd": os.getcwd(), "unbuffered": unbuffered, "tied": True}
    socket.send_fds(sock, [json.dumps(request).encode()], [0, 1, 2])
    said = line(sock)
    return None if said in (None, "fresh") else (sock, int(said))


def line(sock: socket.socket) -> str | None:
    """The server's next line (it sends one at a time), or None if it closed the connection first."""
    said = b""
    while not said.endswith(b"\n"):
        chunk = sock.recv(64)
        if not chunk:
            return None
        said += chunk
    return said.decode().strip()


def end(code: int) -> None:
    sys.stdout.flush()
    if code < 0:
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler to put back
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


if __name__ == "__main__":
    main()
