"""tests/helpers/procs.py, the launcher of every multi-process test: a hang fails within its deadline,
and a command forked from tests/helpers/zygote.py is what a new interpreter would have been."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import procs


@pytest.mark.parametrize(
    "script",
    ["sleep 30 & sleep 30", "sleep 30 & echo started"],
    ids=["leader-and-child-running", "leader-gone-child-holding-the-output"],
)
def test_a_hung_group_is_killed_at_its_deadline_and_fails_the_test(script):
    start = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="hung for 1 s"):
        procs.run(["bash", "-c", script], timeout=1)
    assert time.monotonic() - start < 10  # not the children's 30 s


PROBE = """
import json, os, sys
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "env": os.environ.get("PROBE"),
                  "own_group": os.getpgid(0) == os.getpid(), "name": __name__}))
print("to stderr", file=sys.stderr)
ending = sys.argv[-1]
if ending == "exit-text":
    sys.exit("a message")
if ending == "interrupt":
    raise KeyboardInterrupt
if ending == "raise":
    raise ValueError("boom")
if ending == "term":
    import signal
    os.kill(os.getpid(), signal.SIGTERM)
sys.exit(int(ending))
"""


@pytest.mark.parametrize("ending", ["0", "3", "exit-text", "interrupt", "raise", "term"])
def test_a_forked_command_is_what_a_new_interpreter_gives(ending, tmp_path):
    """tests/helpers/zygote.py: argv, cwd, sys.path[0], environment, own session, both streams and the
    exit status (an uncaught KeyboardInterrupt by SIGINT, as CPython) equal a new interpreter's."""
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    seen = []
    for fresh in (True, False):
        proc = procs.start([sys.executable, script, "x", ending], {"PROBE": "p"}, cwd=tmp_path, fresh=fresh)
        assert isinstance(proc, subprocess.Popen) is fresh  # the second one was forked
        [done] = procs.wait_all([proc], timeout=60)
        last = done.stderr.strip().splitlines()[-1]
        seen.append((done.returncode, done.stdout, done.stderr.splitlines()[0], last))
    assert seen[0] == seen[1]
    if seen[1][1]:  # killed by SIGTERM, a block-buffered stdout is lost (PYTHONUNBUFFERED keeps it), in both
        assert json.loads(seen[1][1])["own_group"] and json.loads(seen[1][1])["path0"] == str(tmp_path)


def test_an_environment_read_at_start_up_gets_a_new_interpreter():
    proc = procs.start([sys.executable, "-c", "pass"], {"PYTHONHASHSEED": "7"})
    assert isinstance(proc, subprocess.Popen)
    procs.wait_all([proc], timeout=60)


def test_a_pythonpath_with_a_sitecustomize_is_applied_by_the_forked_command_as_by_a_new_interpreter(tmp_path):
    # tests/cluster/test_slurm.py's pause hook reaches its jobs' tasks this way
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text("import builtins\nbuiltins.HOOKED = 'yes'\n")
    code = "import sys; print(HOOKED, sys.path.index(sys.argv[1]))"
    seen = []
    for fresh in (True, False):
        proc = procs.start([sys.executable, "-c", code, str(hook)], {"PYTHONPATH": str(hook)}, fresh=fresh)
        assert isinstance(proc, subprocess.Popen) is fresh
        [done] = procs.wait_all([proc], timeout=60)
        seen.append((done.returncode, done.stdout, done.stderr))
    assert seen[0] == seen[1] == (0, "yes 1\n", "")


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/unshare").exists(), reason="needs root and unshare")
def test_a_caller_in_another_network_namespace_gets_a_command_that_runs_in_it(tmp_path):
    # a SLURM task on one of the tests' nodes (tests/cluster/test_slurm.py) calls the server from its
    # node's network namespace: the forked command must see that namespace's interfaces, not ours
    python = procs.forking_python()
    if python is None:
        pytest.skip("the tests' fork server is off (TESTS_FRESH_PROCESSES)")
    code = "import os; print(os.readlink('/proc/self/ns/net'), os.getpid() != int(os.environ['CALLER']))"
    shell = f'readlink /proc/self/ns/net; CALLER=$$ exec {python} -c "$0"'
    done = subprocess.run(["unshare", "--net", "sh", "-c", shell, code], capture_output=True, text=True, timeout=60,
                          env=procs.command_env(None))  # fmt: skip
    assert done.returncode == 0, done.stderr
    caller_ns, command_ns, forked = done.stdout.split()
    assert caller_ns == command_ns != os.readlink("/proc/self/ns/net") and forked == "True"


@pytest.mark.parametrize("name, value", [("TORCHINDUCTOR_CACHE_DIR", "/tmp/elsewhere"), ("PYTHONUNBUFFERED", "1")])
def test_an_environment_read_only_at_run_time_is_still_forked(name, value):
    # inductor puts its cache dir in os.environ at a test's first compile; pytest-xdist's workers
    # run with PYTHONUNBUFFERED=1, which the forked child applies to its own streams
    code = f"import os, sys; print(os.environ[{name!r}], sys.stdout.write_through)"
    proc = procs.start([sys.executable, "-c", code], {name: value})
    [done] = procs.wait_all([proc], timeout=60)
    assert not isinstance(proc, subprocess.Popen) and done.returncode == 0, done.stderr
    seen, unbuffered = done.stdout.split()
    assert seen == value
    if name == "PYTHONUNBUFFERED":
        assert unbuffered == "True"  # written through, as a new interpreter's stdout under PYTHONUNBUFFERED


def test_pytest_xdist_workers_and_their_commands_fork_from_the_one_server_their_controller_started(request):
    # tests/conftest.py starts it before the workers exist, and has the workers forked from it too:
    # one interpreter importing torch, not one per worker (each worker its own server under
    # --cpu-profile, which counts a server's children as its worker's)
    from tests.helpers import zygote_client

    proc = procs.start([sys.executable, "-c", "import os; print(os.getppid())"])
    [done] = procs.wait_all([proc], timeout=60)
    server = int(done.stdout)  # a forked command's parent is the server
    parent = int(Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()[1])
    under_xdist = os.environ.get("PYTEST_XDIST_WORKER") and not os.environ.get("TESTS_FRESH_PROCESSES")
    if under_xdist and not request.config.getoption("--cpu-profile", None):
        assert os.environ.get(zygote_client.SHARED)
        assert parent != os.getpid() and os.getppid() == server  # not this worker's: its own parent
    else:
        assert parent == os.getpid()  # this pytest process's own server


def test_a_shared_server_that_died_before_it_was_ready_is_not_waited_for(tmp_path, monkeypatch):
    # a worker attaching to the controller's server reads its pid: ended without a word, the
    # worker starts new interpreters at once instead of waiting out the 5-minute deadline
    from tests.helpers import zygote_client

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for name, text in (("out", ""), ("err", ""), ("pid", str(dead.pid))):
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(zygote_client, "_server", {})
    start = time.monotonic()
    zygote_client._attach(str(tmp_path), proc=None)
    assert time.monotonic() - start < 5 and zygote_client._server["off"].startswith("the server did not start")


WORKER = """
import json, os, sys, time
# one write, the newline included: print() makes two, and the other rank's line may come between
sys.stdout.write(json.dumps({"rank": os.environ["RANK"], "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0],
                             "unbuffered": not sys.stdout.line_buffering and sys.stdout.write_through,
                             "preloaded": "torch" in sys.modules}) + "\\n")
Path = __import__("pathlib").Path
Path(f"pid{os.environ['RANK']}.tmp").write_text(str(os.getpid()))
os.rename(f"pid{os.environ['RANK']}.tmp", f"pid{os.environ['RANK']}")  # whole, or not there
if sys.argv[-1] == "sleep":
    time.sleep(60)
if os.environ["RANK"] == "1":  # rank 0 ends first: a rank 1 that fails while rank 0 still runs has torchrun
    while not Path("pid0").exists():  # stop rank 0 with SIGTERM, and report that too, as timing falls
        time.sleep(0.01)
    stat = Path(f"/proc/{Path('pid0').read_text()}/stat")
    while True:
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
        except OSError:  # gone
            break
        time.sleep(0.01)
    time.sleep(0.5)  # and its exit has reached torchrun (through the stand-in, where forked)
sys.exit(int(sys.argv[-1]) if os.environ["RANK"] == "1" else 0)
"""


def torchrun(tmp_path, ending: str, new_workers: bool) -> subprocess.Popen:
    (tmp_path / "worker.py").write_text(WORKER)
    env = {"PYTHON_EXEC": sys.executable} if new_workers else {}
    return procs.start([*procs.torchrun_here(), "worker.py", "x", ending], env, cwd=tmp_path)


def test_torchruns_workers_are_forked_and_torchrun_sees_what_new_interpreters_give(tmp_path):
    """tests/helpers/zygote_exec.py: each worker is forked from the server with torchrun's argv, cwd
    and unbuffered streams, and torchrun's report of its exit status is that of a new interpreter."""
    seen = []
    for new_workers in (True, False):
        [done] = procs.wait_all([torchrun(tmp_path, "3", new_workers)], timeout=120)
        lines = sorted((json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")),
                       key=lambda line: line["rank"])  # fmt: skip
        assert [line.pop("preloaded") for line in lines] == [not new_workers] * 2  # forked from the server
        seen.append((done.returncode, lines, re.findall(r"exitcode +: \S+", done.stderr)))
    assert seen[0] == seen[1]
    assert seen[1][0] != 0 and seen[1][2] == ["exitcode  : 3"] and len(seen[1][1]) == 2
    assert seen[1][1][0]["unbuffered"] and seen[1][1][0]["path0"] == str(tmp_path)


def test_a_killed_stand_in_takes_its_forked_worker_with_it(tmp_path):
    proc = torchrun(tmp_path, "sleep", new_workers=False)
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"pid{rank}").exists() for rank in (0, 1)) and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = [int((tmp_path / f"pid{rank}").read_text()) for rank in (0, 1)]
    stand_ins = [int(pid) for pid in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
    assert len(stand_ins) == 2 and not set(stand_ins) & set(workers)  # the workers are the server's children
    os.kill(stand_ins[1], signal.SIGKILL)
    [done] = procs.wait_all([proc], timeout=60)  # torchrun stops rank 0 (SIGTERM through its stand-in)
    assert "Signal 9 (SIGKILL)" in done.stderr
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)


SPIN = """
import subprocess, sys, time


def test_spins_here():
    end = time.process_time() + 0.5
    while time.process_time() < end:
        pass


def test_spins_in_a_child():
    spin = "import time\\nend = time.process_time() + 0.5\\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", spin])


def test_sleeps():
    time.sleep(0.5)
"""


def test_the_cpu_profile_counts_a_tests_own_cpu_and_its_childrens(tmp_path):
    """tests/helpers/cpu_profile.py, the measure behind docs/benchmarks.md's per-test figures."""
    (tmp_path / "test_spin.py").write_text(SPIN)
    out = tmp_path / "cpu.jsonl"
    done = procs.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                      "-p", "tests.helpers.cpu_profile", "--cpu-profile", out, tmp_path / "test_spin.py"])  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    cpu = {json.loads(line)["test"].split("::")[1]: json.loads(line)["cpu_s"] for line in out.read_text().splitlines()}
    assert cpu["test_spins_here"] >= 0.4 and cpu["test_spins_in_a_child"] >= 0.4 and cpu["test_sleeps"] < 0.2
    assert "CPU seconds counted for 3 tests" in done.stdout
