"""tests/helpers/procs.py, the launcher of every multi-process test: a hang fails within its deadline."""

from __future__ import annotations

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
