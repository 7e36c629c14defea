"""When another process of the job stalls or dies: which one, where, at which step, in one line.

Past ``dist_timeout`` (:func:`resnet.runtime.distributed.init_distributed`: a peer stalled) or within
milliseconds (a peer died, its sockets closed), a collective raises gloo's words, which name no rank,
and every survivor would print its 50-line traceback. :func:`lost_peer` turns such an error into
:class:`PeerLost` through a census of the job's store (hosted by torchrun's agent, or by rank 0
under srun; it outlives the other processes). Every process beats into it each second
(:class:`Heartbeat`); each survivor writes its step, waits a few seconds for the others, and names
the ranks whose heartbeat stood still, or that recorded an error of their own (:func:`record_failure`),
with the host and pid each joined with (a process on this host is looked up: gone or a zombie is
dead, ``T`` is stopped). Where every process still beats, the one behind the others is named. The
run then ends as a stop does (the last checkpoint intact, the job requeued by the lowest surviving
rank), every rank exiting with :data:`REQUEUE_STATUS` (docs/faults.md).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from ..runtime.distributed import DistEnv
from .checkpointer import RunFailed

REQUEUE_STATUS = 75  # EX_TEMPFAIL: the job may go on from its checkpoint (requeue, restart)
CENSUS_SECONDS = 5.0  # how long a survivor waits for the others to say where they are
HEARTBEAT_S = 1.0  # between two heartbeats: a census of 5 s sees several
# gloo's words (and NCCL's, where a blocking wait reports them) for a peer that did not answer ...
TIMED_OUT = ("Timed out waiting", "timed out", "Timeout", "Watchdog caught collective operation timeout")
COLLECTIVE = ("gloo", "NCCL", "ProcessGroup", "c10d")  # the marks of a collective's error (gloo's: its source path)
# ... and for one whose process or host is gone
CLOSED = (
    "Connection reset by peer",
    "Connection closed by peer",
    "Broken pipe",
    "Connection refused",
    "Socket closed",
    "Connection timed out",
    "NCCL communicator was aborted",
    "remote process exited or there was a network error",
)


class PeerLost(RunFailed):
    """Another process of the job stalled, died or failed; the line names it. ``census``: who was
    still there (None: the store was gone too). Exit ``status``: :data:`REQUEUE_STATUS`, or 1
    where a process failed on an error of its own, which going on would meet again."""

    def __init__(self, message: str, census: Census | None = None, status: int = REQUEUE_STATUS):
        super().__init__(message)
        self.census, self.status = census, status


_steps = [0]  # the optimizer steps this process has taken: what its line and its heartbeat say


def at_step(step: int) -> None:
    """Record the optimizer steps this process has taken (the training loop, before every step)."""
    _steps[0] = step


def failure_kind(err: BaseException) -> str | None:
    """``"timeout"`` or ``"closed"`` where ``err`` is a collective failing because of a peer, else
    None: any other error, a failure of this run's own (a checkpoint write on a lost NFS mount says
    "Connection timed out" too), or one without gloo's or NCCL's mark."""
    text = str(err)
    if not isinstance(err, RuntimeError) or isinstance(err, RunFailed) or "DataLoader worker" in text:
        return None
    if type(err).__name__ in ("NonFiniteLoss", "Stopped") or not any(mark in text for mark in COLLECTIVE):
        return None
    if any(words in text for words in CLOSED):
        return "closed"
    if any(words in text for words in TIMED_OUT):
        return "timeout"
    return None


KEY = "resnet_padding/{}/{}".format  # (what, rank): lost (a survivor's step), alive (heartbeats), failed (its line)


@dataclass
class Census:
    """Who answered after a collective failed: ``gone``, the ranks whose heartbeat stopped (dead or
    stopped: nobody else is to blame); ``failed``, ranks that ended on an error of their own (its
    line); ``steps``, the step each live rank's heartbeat last carried."""

    gone: list[int]
    failed: dict[int, str]
    steps: dict[int, int]

    @property
    def missing(self) -> list[int]:
        return sorted({*self.gone, *self.failed})


class Heartbeat:
    """A daemon thread that writes a counter and this process's step into the job's store every
    :data:`HEARTBEAT_S` seconds, on a connection of its own, so that a survivor can tell a process
    that is gone or stopped (its counter stands still) from one blocked in the same collective as
    itself (which a ring all-reduce over three or more processes leaves waiting behind the dead
    one's neighbours). No clock is compared between hosts."""

    def __init__(self, env: DistEnv):
        self.env, self.stop = env, threading.Event()
        self.thread = None
        if env.distributed and env.launch is not None and env.store is not None:
            self.thread = threading.Thread(target=self._beat, name="resnet-heartbeat", daemon=True)
            self.thread.start()

    def _beat(self) -> None:
        from ..runtime.distributed import job_store

        try:
            store = job_store(self.env.launch, HEARTBEAT_S * 5, client=True)  # not behind the main thread's
            count = 0
            while not self.stop.is_set():
                count += 1
                store.set(KEY("alive", self.env.rank), f"{count} {_steps[0]}")
                self.stop.wait(HEARTBEAT_S)
        except (RuntimeError, OSError):  # the store is gone (its host died): the census says so itself
            return

    def close(self) -> None:
        self.stop.set()


def record_failure(env: DistEnv, err: BaseException) -> None:
    """Before a process of a job ends on an error of its own: its line in the store, so that the
    others say it failed (and do not requeue a job that would fail the same way), not that it died."""
    if not env.distributed or env.store is None:
        return
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    line = f"{type(err).__name__}: {text}" if not isinstance(err, RunFailed) else text
    with contextlib.suppress(RuntimeError, OSError):
        env.store.set_timeout(timedelta(seconds=5))
        env.store.set(KEY("failed", env.rank), line[:400])


def census(env: DistEnv, at: int, seconds: float = CENSUS_SECONDS) -> Census | None:
    """Who is still there: this rank says it is at step ``at``, then reads the others for
    ``seconds``; None where the store itself does not answer (its host, rank 0 under srun, is gone)."""
    store = env.store
    if store is None:
        return None

    def read(what: str, rank: int) -> str | None:
        return store.get(KEY(what, rank)).decode() if store.check([KEY(what, rank)]) else None

    others = [r for r in range(env.world_size) if r != env.rank]
    try:
        store.set_timeout(timedelta(seconds=max(seconds, 1.0)))
        store.set(KEY("lost", env.rank), str(at))
        first = {r: read("alive", r) for r in others}
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not all(read("lost", r) for r in others):
            time.sleep(0.1)
        result = Census([], {}, {})
        for r in others:
            failed, beat, said = read("failed", r), read("alive", r), read("lost", r)
            if failed is not None:
                result.failed[r] = failed
            elif said is not None:  # a survivor too
                result.steps[r] = int(said)
            elif beat is None or beat == first[r]:  # its heartbeat stood still: gone, or stopped
                result.gone.append(r)
            else:
                result.steps[r] = int(beat.split()[1])
        return result
    except (RuntimeError, OSError, ValueError):  # DistStoreError, DistNetworkError: the store's host is unreachable
        return None


def process_state(host: str, pid: int) -> str | None:
    """What a process on this host is doing: ``"dead"`` (gone, or a zombie), ``"stopped"``
    (SIGSTOP, a debugger), ``"running"``; None for another host's."""
    if host != socket.gethostname():
        return None
    try:
        stat = open(f"/proc/{pid}/stat").read()  # noqa: SIM115 (one read)
    except OSError:
        return "dead"
    state = stat.rpartition(")")[2].split()[0]
    return {"Z": "dead", "X": "dead", "T": "stopped", "t": "stopped"}.get(state, "running")


def describe(env: DistEnv, kind: str, found: Census | None, at: int) -> str:
    """What happened, from this rank's side: ``rank 1 (host, pid 12) died (after step 43)``, ``at``
    the optimizer steps this rank had taken."""
    timeout = f"dist_timeout={env.timeout:g} s" if env.timeout else "the collective timeout"
    if found is None:  # the store is gone with its host: rank 0 under srun and submitit, torchrun's agent
        holder = "torchrun's agent" if env.launch is not None and env.launch.launcher == "torchrun" else "rank 0"
        host = env.peers[0][0] if env.peers else "?"
        return (
            f"rank {env.rank} lost the job's store ({holder} on {host}) after step {at}: "
            f"{'no answer within ' + timeout if kind == 'timeout' else 'its connection closed'}"
        )
    parts = []
    for rank in found.missing:
        host, pid = env.peers[rank] if rank < len(env.peers) else ("?", 0)
        state = process_state(host, pid)
        if rank in found.failed:
            what = f"failed: {found.failed[rank]}"
        elif state == "dead" or (state is None and kind == "closed"):
            what = "died"
        elif state == "stopped":
            what = f"is stopped (SIGSTOP or a debugger): rank {env.rank} waited {timeout}"
        else:
            what = f"stopped responding: rank {env.rank} waited {timeout}"
        parts.append(f"rank {rank} ({host}, pid {pid}) {what}")
    if not parts:  # every process still beats: one is stuck behind the others (a hung read, a deadlock)
        behind = [r for r, s in found.steps.items() if s < at]
        if not behind:
            return (
                f"a collective failed on rank {env.rank} after step {at} though every rank still answers "
                f"({'no answer within ' + timeout if kind == 'timeout' else 'a connection closed'})"
            )
        parts = [f"rank {r} ({env.peers[r][0]}, pid {env.peers[r][1]}) is stuck at step {found.steps[r]}: rank "
                 f"{env.rank} waited {timeout}" for r in behind]  # fmt: skip
    return f"{'; '.join(parts)} (after step {at})"


def lost_peer(err: BaseException, env: DistEnv) -> PeerLost | None:
    """A :class:`PeerLost` (its line still lacks what is kept and what to do) for a collective that
    failed because another process stalled or died; None for any other error."""
    if not env.distributed:
        return None
    kind = failure_kind(err)
    if kind is None:
        return None
    at = _steps[0]
    found = census(env, at)
    return PeerLost(describe(env, kind, found, at), found)


def first_survivor(env: DistEnv, found: Census | None) -> bool:
    """Whether this rank is the lowest still there (it requeues the job); without a census (the
    store's host is gone) every survivor requeues: a second request finds the job requeued."""
    if found is None:
        return True
    return env.rank == min((r for r in range(env.world_size) if r not in found.missing), default=env.rank)


def restarts_left() -> str | None:
    """``restart 1 of 3`` where torchrun (``--max-restarts``) will start the workers again, else None."""
    most = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
    done = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    return f"restart {done + 1} of {most}" if done < most else None
