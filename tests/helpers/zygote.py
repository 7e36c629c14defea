"""A process that has already imported torch, and forks a fresh child per command the tests start.

Half the CPU of a test that runs ``python train.py ...`` is the interpreter importing torch,
torchvision and Hydra (about 3.5 s on the 2-core runner), and the suite starts such commands
about a hundred times. This server imports them once per pytest worker; each command is then a
``fork`` of it that sets up exactly what a new interpreter would have (argv, environment, working
directory, ``sys.path[0]``, standard streams on the caller's pipes, its own session) and runs the
script or module as ``__main__``. Exit status, signals, process group, ``atexit`` handlers and
output are those of the command run on its own: the child *is* a separate process. A caller in
other network and mount namespaces (a SLURM task on one of the tests' nodes) gets a child that
has joined them; a ``$PYTHONPATH`` the server lacks is applied by the child as ``site`` would.

What a fork cannot give, a fresh interpreter does (tests/helpers/procs.py decides): anything
other than ``python script.py ...``, ``python -m module ...``, ``python -c code ...`` or a console
script of this Python; an environment that differs from the server's in what is read while
importing (other ``PYTHON*``, thread counts, ``TORCH*``, the loader's variables); and a test that
asks for ``fresh=True`` because start-up itself is what it checks. The server is not used at all if importing wrote
anything to its stderr (a warning a new interpreter would print at every start).

Protocol over a Unix socket, one connection per command: the client sends one JSON request
(argv, env, cwd; optionally ``unbuffered``, and ``tied``: kill the child when the connection
ends) with three file descriptors (stdin, stdout, stderr); the server answers with the child's
pid as one line (or ``fresh`` for a command it will not fork), and later with its exit code (as
``Popen.returncode``) as another.
"""

from __future__ import annotations

import array
import contextlib
import gc
import io
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time

# Third-party only: the project's own modules are imported by each child, as by a new interpreter
# (a test that checks what a command imports, or refuses to, sees them imported for real).
PRELOAD = ("torch", "torchvision", "hydra", "omegaconf", "numpy", "PIL.Image")
# Not timm (2 s of CPU per worker): it imports wandb, whose module-level temporary media folder the
# first child to exit would delete for all the others (seen: W&B tables failing to find their file).

# Variables that the interpreter, the dynamic loader, OpenMP or torch read while starting or
# importing: a child whose environment differs in any of them gets a new interpreter instead.
STARTUP_PREFIXES = ("PYTHON", "OMP_", "MKL_", "KMP_", "GOMP_", "TORCH", "LD_", "MALLOC_", "CUDA_", "NCCL_")
# ...except these, never read while importing: torchrun's, read when it starts a worker or set for
# it; torch's, read once a process group, an error report, a hub download or an inductor compile
# is made (inductor sets its cache dir in os.environ at the first compile: every later command of
# that pytest process has it); the device list, read when CUDA is first used (which the server
# never does); and PYTHONUNBUFFERED, which each child applies to the streams it makes
# (:func:`output_stream`).
RUNTIME_PREFIXES = ("PYTHON_EXEC", "TORCHELASTIC_", "TORCH_NCCL_", "TORCH_HOME", "TORCHINDUCTOR_CACHE_DIR",
                    "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED")  # fmt: skip
# scripts/slurm.sbatch's interpreter, which no interpreter reads; and PYTHONPATH, which a child
# applies itself where the server has none (:func:`python_path`).
RUNTIME_NAMES = ("PYTHON", "PYTHONPATH")
NAMESPACES = ("net", "mnt")  # joined where the caller's differ (:func:`join_namespaces`)


def startup_env(env: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in env.items() if key.startswith(STARTUP_PREFIXES)
            and not key.startswith(RUNTIME_PREFIXES) and key not in RUNTIME_NAMES}  # fmt: skip


def reproducible(request: dict, own: dict[str, str], peer: int) -> bool:
    """Whether a fork can be what a new interpreter would be for this request: the same start-up
    variables (PYTHONPATH only where the server has none), and the caller's namespaces joinable."""
    if startup_env(request["env"]) != own:
        return False
    if "PYTHONPATH" in os.environ and request["env"].get("PYTHONPATH") != os.environ["PYTHONPATH"]:
        return False
    try:
        return os.geteuid() == 0 or not foreign_namespaces(peer)
    except OSError:  # the caller's namespaces cannot be read (it is gone): a new interpreter, never the wrong ones
        return False


def foreign_namespaces(peer: int) -> list[str]:
    """The namespaces of the caller (``peer``, its pid) that are not ours: a SLURM task of the tests'
    cluster runs in its node's network namespace and a mount namespace with the node's /etc/hosts."""
    return [ns for ns in NAMESPACES if os.readlink(f"/proc/{peer}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}")]


def serve(path: str, own: dict[str, str]) -> None:
    """Fork a child per request whose start-up variables are ``own`` (the server's, as it started);
    answer ``fresh`` to any other."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)  # the client waits for this line on our stdout
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    tied: dict[socket.socket, int] = {}  # a stand-in's connection: its end kills the worker's group
    parent = os.getppid()
    while os.getppid() == parent:  # the pytest worker is gone: so are we
        for key, _ in selector.select(timeout=0.05):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                selector.register(conn, selectors.EVENT_READ)
                continue
            conn = key.fileobj
            if conn in tied:  # a stand-in (zygote_exec.py) that ended before its worker: killed
                selector.unregister(conn)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(tied.pop(conn), signal.SIGKILL)
                continue
            selector.unregister(conn)
            request = receive(conn)
            if request is None:
                conn.close()
                continue
            peer = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]
            request[0]["peer"] = peer
            if not reproducible(request[0], own, peer):
                for fd in request[1]:
                    os.close(fd)
                conn.sendall(b"fresh\n")
                conn.close()
                continue
            sys.stdout.flush(), sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                conn.close()
                selector.close()
                child(*request)  # never returns
            for fd in request[1]:
                os.close(fd)
            conn.sendall(f"{pid}\n".encode())
            children[pid] = conn
            if request[0].get("tied"):
                tied[conn] = pid
                selector.register(conn, selectors.EVENT_READ)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = children.pop(pid)
            if tied.pop(conn, None) is not None:
                selector.unregister(conn)
            with contextlib.suppress(OSError):  # the caller stopped listening: reaped all the same
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            conn.close()


def receive(conn: socket.socket) -> tuple[dict, list[int]] | None:
    fds = array.array("i")
    data, ancdata, _, _ = conn.recvmsg(1 << 20, socket.CMSG_LEN(3 * fds.itemsize))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if not data or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return None
    return json.loads(data), list(fds)


def child(request: dict, fds: list[int]) -> None:
    """Become the command: a new session, the caller's streams, argv, environment and cwd."""
    code = 1
    try:
        join_namespaces(request["peer"])  # first: joining a mount namespace resets the working directory
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        own_path = os.environ.get("PYTHONPATH")  # the server's: already in sys.path
        os.environ.clear()
        os.environ.update(request["env"])
        time.tzset()  # a new interpreter reads TZ as it starts: local time is the command's, not ours
        sys.stdin = sys.__stdin__ = open(0, closefd=False)  # noqa: SIM115 - the process's own streams
        unbuffered = bool(request.get("unbuffered") or os.environ.get("PYTHONUNBUFFERED"))
        sys.stdout = sys.__stdout__ = output_stream(1, unbuffered)
        sys.stderr = sys.__stderr__ = output_stream(2, unbuffered)
        if own_path is None:
            python_path(os.environ.get("PYTHONPATH", ""))
        code = run(request["argv"])
    except BaseException:  # noqa: BLE001 - as the interpreter: print it and exit 1
        sys.excepthook(*sys.exc_info())
    os._exit(code)


def join_namespaces(peer: int) -> None:
    """Enter the caller's network and mount namespaces where they are not ours (as root: the
    server answered ``fresh`` otherwise). A forked child has one thread, as ``setns`` needs."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for ns in foreign_namespaces(peer):
        fd = os.open(f"/proc/{peer}/ns/{ns}", os.O_RDONLY)
        if libc.setns(fd, 0) != 0:
            raise OSError(ctypes.get_errno(), f"setns into the caller's {ns} namespace")
        os.close(fd)


def python_path(value: str) -> None:
    """What a new interpreter does with ``$PYTHONPATH`` as it starts (the server had none): its
    folders go after the script's own in ``sys.path``, and a ``sitecustomize`` among them is
    imported (a test's hook: tests/cluster/test_slurm.py)."""
    folders = [folder for folder in value.split(os.pathsep) if folder]
    if not folders:
        return
    sys.path[1:1] = folders
    if any(os.path.exists(os.path.join(folder, "sitecustomize.py")) for folder in folders):
        sys.modules.pop("sitecustomize", None)
        __import__("sitecustomize")


def output_stream(fd: int, unbuffered: bool) -> io.TextIOWrapper:
    """stdout or stderr as the interpreter makes them: unbuffered under ``-u`` or PYTHONUNBUFFERED, else
    stdout line-buffered on a terminal only and stderr always; stderr's errors backslash-escaped."""
    errors = "backslashreplace" if fd == 2 else "strict"
    if unbuffered:
        raw = io.FileIO(fd, "w", closefd=False)
        return io.TextIOWrapper(raw, errors=errors, line_buffering=False, write_through=True)
    line = fd == 2 or os.isatty(fd)
    return open(fd, "w", buffering=1 if line else -1, errors=errors, closefd=False)  # noqa: SIM115


def run(argv: list[str]) -> int:
    import atexit
    import runpy
    import threading
    import traceback
    import types

    interrupted = False
    try:
        try:
            if argv[0] == "-c":
                sys.argv = ["-c", *argv[2:]]
                sys.path[0] = ""
                main = types.ModuleType("__main__")
                main.__builtins__ = __builtins__
                sys.modules["__main__"] = main
                exec(compile(argv[1], "<string>", "exec"), main.__dict__)
            elif argv[0] == "-m":
                sys.argv = [argv[1], *argv[2:]]
                sys.path[0] = os.getcwd()
                runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            else:
                sys.argv = list(argv)
                sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
                runpy.run_path(argv[0], run_name="__main__")
            code = 0
        except SystemExit as stop:
            code = exit_code(stop.code)
        except KeyboardInterrupt:
            traceback.print_exc()
            code, interrupted = 1, True
        except BaseException:  # noqa: BLE001
            sys.excepthook(*sys.exc_info())
            code = 1
        threading._shutdown()  # as at interpreter exit: wait for non-daemon threads, then atexit
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    if interrupted:  # an uncaught KeyboardInterrupt ends the process by SIGINT, as CPython does
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def main() -> None:
    path = sys.argv[1]
    own = startup_env(dict(os.environ))  # before importing: torch sets some of its own
    for name in PRELOAD:
        __import__(name)
    gc.freeze()  # each child's collections leave the preloaded heap alone, and so do not copy its pages
    sys.stderr.flush()
    serve(path, own)


if __name__ == "__main__":
    main()
