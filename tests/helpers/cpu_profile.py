"""CPU seconds per test, for finding what makes the suite slow (docs/benchmarks.md):

    bash scripts/test.sh -p tests.helpers.cpu_profile --cpu-profile results/test_cpu.jsonl

The suite is CPU-bound on 2 cores, so wall time per test (``--durations``) mostly says what ran
beside it. This counts, around each test, the CPU of the pytest worker, of what it has waited
for, and of its fork server (tests/helpers/zygote.py) with the commands forked from it: one JSON
line per test, then the most costly tests and files at the end of the run. Not counted: processes
nobody waits for during the test (SLURM's tasks, a forkserver's children), nor collection.
"""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

import pytest

TICKS = os.sysconf("SC_CLK_TCK")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-profile", metavar="FILE.jsonl", help="append each test's CPU seconds to this file")


def process_cpu(pid: int) -> float:
    """utime + stime + cutime + cstime of ``pid`` (its own and its waited-for children's), seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(value) for value in fields[11:15]) / TICKS


def cpu_now() -> float:
    from tests.helpers import zygote_client

    server = zygote_client._server.get("proc")
    return process_cpu(os.getpid()) + (process_cpu(server.pid) if server is not None else 0.0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    out = item.config.getoption("--cpu-profile")
    before = cpu_now() if out else 0.0
    yield
    if out:
        with open(out, "a") as f:  # one short line per write: workers append side by side
            f.write(json.dumps({"test": item.nodeid, "cpu_s": round(cpu_now() - before, 2)}) + "\n")


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    out = config.getoption("--cpu-profile")
    if not out or not Path(out).exists() or hasattr(config, "workerinput"):
        return
    rows = [json.loads(line) for line in Path(out).read_text().splitlines()]
    by_file: collections.Counter = collections.Counter()
    for row in rows:
        by_file[row["test"].split("::")[0]] += row["cpu_s"]
    write = terminalreporter.write_line
    write(f"\nCPU seconds counted for {len(rows)} tests: {sum(r['cpu_s'] for r in rows):.0f} ({out})")
    for row in sorted(rows, key=lambda r: -r["cpu_s"])[:15]:
        write(f"{row['cpu_s']:8.1f}  {row['test']}")
    write("by file:")
    for name, seconds in by_file.most_common(10):
        write(f"{seconds:8.1f}  {name}")
