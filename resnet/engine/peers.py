"""When another process of the job stalls or dies: which one, where, at which step, in one line.

A collective waits at most ``dist_timeout`` seconds (:func:`resnet.distributed.init_distributed`).
Past it gloo raises ``Timed out waiting ...``; a peer that died (SIGKILL, the OOM killer, a node
crash) closes its sockets and gloo raises ``Connection reset by peer`` within milliseconds. Either
way the message is gloo's and names no rank, and every survivor would print its 50-line traceback.

:func:`lost_peer` turns such an error into :class:`PeerLost`: each survivor writes its step into
the job's store (it is hosted by torchrun's agent, or by rank 0 under srun, and outlives the other
processes), waits a few seconds for the others to do the same, and names the ranks that did not,
with the host and pid each joined with (a process on this host is looked up: gone or a zombie
is dead, ``T`` is stopped). The run then ends as a stop does: the checkpoint written last is
intact (a step is saved whole or not at all), the lowest surviving rank requeues the SLURM job
(or hands it to submitit), and every rank exits with :data:`REQUEUE_STATUS`, which
``scripts/slurm.sbatch`` also turns into a requeue and ``torchrun --max-restarts`` into a restart.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from datetime import timedelta

from ..distributed import DistEnv
from .checkpointer import RunFailed

REQUEUE_STATUS = 75  # EX_TEMPFAIL: the job may go on from its checkpoint (requeue, restart)
CENSUS_SECONDS = 5.0  # how long a survivor waits for the others to say where they are
# gloo's words (and NCCL's, where a blocking wait reports them) for a peer that did not answer ...
TIMED_OUT = ("Timed out waiting", "timed out", "Timeout", "Watchdog caught collective operation timeout")
# ... and for one whose process or host is gone
CLOSED = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "Connection refused",
          "Socket closed", "Connection timed out", "NCCL communicator was aborted",
          "remote process exited or there was a network error")


class PeerLost(RunFailed):
    """Another process of the job stalled or died; the line names it. Exit :data:`REQUEUE_STATUS`."""

    status = REQUEUE_STATUS


@dataclass
class Position:
    """Where this process is: the optimizer steps it has taken, and since when."""

    step: int = 0
    since: float = 0.0


_position = Position(0, time.monotonic())


def at_step(step: int) -> None:
    """Record the optimizer steps this process has taken (the training loop, before every step)."""
    _position.step, _position.since = step, time.monotonic()


def step() -> int:
    return _position.step


def failure_kind(err: BaseException) -> str | None:
    """``"timeout"`` or ``"closed"`` where ``err`` is a collective failing because of a peer, else None."""
    text = str(err)
    if not isinstance(err, RuntimeError) or "DataLoader worker" in text:
        return None
    if any(words in text for words in CLOSED):
        return "closed"
    if any(words in text for words in TIMED_OUT) and ("gloo" in text or "recv" in text or "send" in text
                                                      or "Watchdog" in text or "NCCL" in text):
        return "timeout"
    return None


def census(env: DistEnv, at: int, seconds: float = CENSUS_SECONDS) -> list[int] | None:
    """The ranks that did not say where they are within ``seconds`` (this one says it is at step
    ``at``); None where the store itself does not answer (its host, rank 0 under srun, is gone)."""
    store = env.store
    if store is None:
        return None
    key = "resnet_padding/lost/{}".format
    try:
        store.set_timeout(timedelta(seconds=max(seconds, 1.0)))
        store.set(key(env.rank), str(at))
        deadline = time.monotonic() + seconds
        missing = list(range(env.world_size))
        while True:
            missing = [r for r in missing if not store.check([key(r)])]
            if not missing or time.monotonic() >= deadline:
                return missing
            time.sleep(0.1)
    except (RuntimeError, OSError):  # DistStoreError, DistNetworkError: the store's host is unreachable
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


def describe(env: DistEnv, kind: str, missing: list[int] | None, at: int) -> str:
    """What happened, from this rank's side: ``rank 1 (host, pid 12) died (after step 43)``, ``at``
    the optimizer steps this rank had taken."""
    timeout = f"dist_timeout={env.timeout:g} s" if env.timeout else "the collective timeout"
    if missing is None:  # the store is gone with its host: rank 0 under srun and submitit, torchrun's agent
        holder = "torchrun's agent" if env.launch is not None and env.launch.launcher == "torchrun" else "rank 0"
        host = env.peers[0][0] if env.peers else "?"
        return (f"rank {env.rank} lost the job's store ({holder} on {host}) after step {at}: "
                f"{'no answer within ' + timeout if kind == 'timeout' else 'its connection closed'}")
    if not missing:  # everyone answered: a collective failed for another reason (a network fault)
        return f"a collective failed on rank {env.rank} after step {at} though every rank still answers ({kind})"
    parts = []
    for rank in missing:
        host, pid = env.peers[rank] if rank < len(env.peers) else ("?", 0)
        state = process_state(host, pid)
        if state == "dead" or (state is None and kind == "closed"):
            what = "died"
        elif state == "stopped":
            what = f"is stopped (SIGSTOP or a debugger): rank {env.rank} waited {timeout}"
        else:
            what = f"stopped responding: rank {env.rank} waited {timeout}"
        parts.append(f"rank {rank} ({host}, pid {pid}) {what}")
    return f"{'; '.join(parts)} (after step {at})"


def lost_peer(err: BaseException, env: DistEnv) -> PeerLost | None:
    """A :class:`PeerLost` (its line still lacks what is kept and what to do) for a collective that
    failed because another process stalled or died; None for any other error."""
    if not env.distributed:
        return None
    kind = failure_kind(err)
    if kind is None:
        return None
    at = step()
    missing = census(env, at)
    lost = PeerLost(describe(env, kind, missing, at))
    lost.missing = missing
    return lost


def first_survivor(env: DistEnv, missing: list[int] | None) -> bool:
    """Whether this rank is the lowest that answered the census (it requeues the job); without a
    census (the store's host, rank 0, is gone): rank 1."""
    gone = missing if missing is not None else [0]
    return env.rank == min((r for r in range(env.world_size) if r not in gone), default=env.rank)


def restarts_left() -> str | None:
    """``restart 1 of 3`` where torchrun (``--max-restarts``) will start the workers again, else None."""
    most = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
    done = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    return f"restart {done + 1} of {most}" if done < most else None
