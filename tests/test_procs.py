"""tests/helpers/procs.py, the launcher of every multi-process test: a hang fails within its deadline,
and a command forked from tests/helpers/zygote.py is what a new interpreter would have been."""

from __future__ import annotations

import json
import subprocess
import sys
import time

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
