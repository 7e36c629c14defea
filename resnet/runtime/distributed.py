"""Distributed setup shared by training and evaluation: who launched this process, where it runs.

Four launchers, read in this order, the first that applies winning (docs/cluster.md): torchrun's
variables; submitit's ``JobEnvironment`` (``SUBMITIT_EXECUTOR``); srun's task identity
(``SLURM_PROCID``), the port derived from the job id so that it is the same on every task and after
a requeue; plain ``python``, one process.

Each process uses ``cuda:<local rank>`` (or ``cuda:0`` where SLURM bound one GPU per task), NCCL on
GPU, gloo on CPU. Every collective waits at most ``timeout`` seconds (``dist_timeout``) for the
others: past it gloo raises, and :mod:`resnet.job.peers` says which process it waited for. On GPU
the host-side gloo group (every step's agreement) gets that timeout and NCCL's own a minute more, so
that a peer that stalls between steps is reported from Python first; NCCL's watchdog ends one lost
during a GPU wait, in NCCL's words (``TORCH_NCCL_ASYNC_ERROR_HANDLING=3``, set unless the user set
it: the one variable this module sets; docs/faults.md). Not tested here: it needs two GPUs.
"""

from __future__ import annotations

import ctypes
import functools
import ipaddress
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

import torch
import torch.distributed as dist

NCCL_MARGIN = 60.0  # seconds NCCL's watchdog waits beyond the gloo groups' timeout
JOIN_TIMEOUT = 300.0  # seconds the rendezvous waits for every process to start (at least)
T = TypeVar("T")


class LaunchError(RuntimeError):
    """The launcher's environment cannot form a process group; one line says what to do."""


@dataclass(frozen=True)
class Launch:
    """This process's place in the job, as its launcher describes it."""

    launcher: str  # single, torchrun, submitit or srun
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    job_id: str | None = None  # SLURM's (or submitit's) job id: requeues and run dirs key on it


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    launch: Launch | None = None
    # gloo group for small decisions taken on the host every step (resnet.engine.loop): over NCCL
    # they would wait behind the GPU's queue. None: the default group is gloo already (CPU runs).
    host_group: dist.ProcessGroup | None = field(default=None, compare=False, repr=False)
    # the job's key-value store (the rendezvous'), and every rank's (host, pid): who to name when a
    # peer stalls or dies (resnet.job.peers)
    store: dist.Store | None = field(default=None, compare=False, repr=False)
    peers: tuple[tuple[str, int], ...] = ()
    timeout: float | None = None  # seconds a collective waits for the others (dist_timeout)

    @classmethod
    def of(cls, launch: Launch, device: torch.device, **group) -> DistEnv:
        """This process's place as ``launch`` says, on ``device``; ``group``: the fields a process group gives."""
        return cls(launch.rank, launch.world_size, launch.local_rank, device, launch, **group)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def local_world_size(self) -> int:
        """Processes of this job on this node."""
        return self.launch.local_world_size if self.launch is not None else 1


def detect_launch(environ: Mapping[str, str] | None = None) -> Launch:
    """Read the launcher's variables (see the module docstring for the order)."""
    env = os.environ if environ is None else environ
    if "RANK" in env and "WORLD_SIZE" in env:
        world = int(env["WORLD_SIZE"])
        return Launch(
            "torchrun",
            rank=int(env["RANK"]),
            world_size=world,
            local_rank=int(env.get("LOCAL_RANK", "0")),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", world)),
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(env.get("MASTER_PORT", "29500")),
        )
    if env.get("SUBMITIT_EXECUTOR"):
        return _submitit_launch(env)
    if "SLURM_PROCID" in env:
        return _srun_launch(env)
    return Launch("single", job_id=env.get("SLURM_JOB_ID"))


def _submitit_launch(env: Mapping[str, str]) -> Launch:
    import submitit  # present whenever submitit started this process

    job = submitit.JobEnvironment()
    nodes = max(job.num_nodes, 1)
    return Launch(
        "submitit",
        rank=job.global_rank,
        world_size=job.num_tasks,
        local_rank=job.local_rank,
        local_world_size=max(job.num_tasks // nodes, 1),
        master_addr=env.get("MASTER_ADDR") or ("127.0.0.1" if nodes == 1 else job.hostnames[0]),
        master_port=int(env.get("MASTER_PORT") or port_for_job(job.job_id)),
        job_id=job.job_id,
    )


def _srun_launch(env: Mapping[str, str]) -> Launch:
    job_tasks = int(env.get("SLURM_NTASKS", "1"))
    if "SLURM_STEP_NUM_TASKS" not in env:
        if job_tasks > 1:  # the batch script itself (or salloc's shell), not one of srun's tasks
            raise LaunchError(
                f"this SLURM job has {job_tasks} tasks but this process was not started by srun; "
                "launch it as `srun python train.py ...` (see scripts/slurm.sbatch)"
            )
        return Launch("single", job_id=env.get("SLURM_JOB_ID"))
    missing = [name for name in ("SLURM_LOCALID", "SLURM_JOB_ID") if name not in env]
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist and "MASTER_ADDR" not in env:
        missing.append("SLURM_STEP_NODELIST (or MASTER_ADDR)")
    if missing:
        raise LaunchError(
            f"srun task {env['SLURM_PROCID']} lacks {', '.join(missing)}; run under `srun` inside an "
            "sbatch/salloc allocation, or export MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and LOCAL_RANK yourself"
        )
    world = int(env["SLURM_STEP_NUM_TASKS"])
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", "")
    per_node = tasks_per_node(spec, node=int(env.get("SLURM_NODEID", "0")), default=world)
    hosts = expand_hostlist(nodelist) if nodelist else []
    return Launch(
        "srun",
        rank=int(env["SLURM_PROCID"]),
        world_size=world,
        local_rank=int(env["SLURM_LOCALID"]),
        local_world_size=per_node,
        master_addr=env.get("MASTER_ADDR") or ("127.0.0.1" if len(set(hosts)) == 1 else hosts[0]),
        master_port=int(env.get("MASTER_PORT") or port_for_job(env["SLURM_JOB_ID"])),
        job_id=env["SLURM_JOB_ID"],
    )


@functools.cache
def launch_time() -> datetime:
    """When this launch started: now, at the first call in this process; under torchrun, the time of
    whichever worker asked first, read from torchrun's store by every worker, so that every process
    names the same run dir (``${launch_time:...}`` in train.yaml), across ``--max-restarts`` too.
    Hydra's ``${now:...}`` is each process's own clock: a worker a second late made a folder of its own."""
    now = datetime.now()
    env = os.environ
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and "MASTER_ADDR" in env and "MASTER_PORT" in env:
        try:
            store = dist.TCPStore(
                env["MASTER_ADDR"], int(env["MASTER_PORT"]), is_master=False, timeout=timedelta(seconds=30)
            )
            first = store.compare_set("resnet_padding/launch_time", "", now.isoformat())
            now = datetime.fromisoformat(first.decode())
        except (RuntimeError, ValueError, OSError):  # no store to ask: this process's own time
            pass
    return now


def port_for_job(job_id: str) -> int:
    """A port in [20000, 40000) that every task of a job computes alike (and again after a requeue)."""
    digits = re.sub(r"\D", "", str(job_id)) or "0"
    return 20000 + int(digits) % 20000


def expand_hostlist(nodelist: str) -> list[str]:
    """SLURM's compact host list to host names: ``gpu[01-03,07],login1`` -> gpu01, gpu02, gpu03, gpu07, login1."""
    hosts: list[str] = []
    for prefix, ranges, suffix in re.findall(r"([^,\[]+)(?:\[([^\]]+)\])?([^,\[]*)", nodelist):
        if not ranges:
            hosts.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            first, _, last = part.partition("-")
            for number in range(int(first), int(last or first) + 1):
                hosts.append(f"{prefix}{number:0{len(first)}d}{suffix}")
    return hosts


def tasks_per_node(spec: str, node: int, default: int) -> int:
    """This node's task count from SLURM's ``2(x3),1`` form (3 nodes of 2 tasks, then one of 1)."""
    counts: list[int] = []
    for item in filter(None, spec.split(",")):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
        if match is None:
            return default
        counts += [int(match[1])] * int(match[2] or 1)
    return counts[node] if node < len(counts) else default


def pick_device(preference: str = "auto", local_rank: int = 0, local_world_size: int = 1) -> torch.device:
    """``preference``: a run config's ``device`` (auto, cpu, cuda), which its schema has checked."""
    if preference == "cuda" and not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        raise LaunchError(
            f"device=cuda but no CUDA device is visible{where}; pass device=cpu, or device=auto "
            "(CUDA where there is one)"
        )
    if preference == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", cuda_index(local_rank, local_world_size, torch.cuda.device_count()))


def cuda_index(local_rank: int, local_world_size: int, visible: int) -> int:
    """``local_rank`` when the node's GPUs are all visible; 0 when this process sees one GPU, a binding
    of one GPU per task whatever ``SLURM_GPUS_ON_NODE`` says (docs/gpu.md). Otherwise more processes
    on a node than GPUs is an error, not a shared GPU."""
    if local_world_size <= visible:
        return local_rank
    if visible == 1:
        return 0
    raise LaunchError(
        f"{local_world_size} processes on this node but {visible} GPU(s) visible to local rank {local_rank}: "
        f"start at most {visible} per node, one per GPU (--ntasks-per-node={visible}, "
        f"hydra.launcher.tasks_per_node={visible} or torchrun --nproc_per_node={visible})"
    )


def init_distributed(device: str = "auto", timeout: float | None = None) -> DistEnv:
    """Join the job's process group (or run alone when launched by plain python); ``timeout``:
    the seconds a collective waits for the others (None: torch's default)."""
    launch = detect_launch()
    dev = pick_device(device, launch.local_rank, launch.local_world_size)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if launch.world_size == 1:
        return DistEnv(rank=0, world_size=1, local_rank=launch.local_rank, device=dev, launch=launch)
    wait = {"timeout": timedelta(seconds=timeout)} if timeout else {}
    store = None
    if not dist.is_initialized():
        check_gloo_interface(launch)
        backend = "nccl" if dev.type == "cuda" else "gloo"
        kwargs: dict = {"device_id": dev} if dev.type == "cuda" else {}
        if dev.type == "cuda" and timeout:
            os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")  # a timed-out collective ends the process
            kwargs["timeout"] = timedelta(seconds=timeout + NCCL_MARGIN)
        else:
            kwargs.update(wait)
        store = job_store(launch, timeout)
        dist.init_process_group(backend=backend, store=store, rank=launch.rank, world_size=launch.world_size, **kwargs)
        kept_to_the_end(dist.group.WORLD)
    # new_group is a collective: every rank, in the same order
    host_group = kept_to_the_end(dist.new_group(backend="gloo", **wait)) if dist.get_backend() == "nccl" else None
    peers: list = [None] * launch.world_size
    dist.all_gather_object(peers, (socket.gethostname(), os.getpid()), group=host_group)
    peers_of = tuple(tuple(p) for p in peers)
    return DistEnv.of(launch, dev, host_group=host_group, store=store, peers=peers_of, timeout=timeout)


def check_gloo_interface(launch: Launch, environ: Mapping[str, str] | None = None) -> None:
    """A job over several nodes whose host name resolves to loopback (Debian's and Ubuntu's 127.0.1.1),
    where gloo listens, would hang at its first collective: one line instead (docs/gpu.md). A master on
    loopback too means every "node" is this host, as in a simulation: nothing to refuse."""
    env = os.environ if environ is None else environ
    if launch.world_size <= launch.local_world_size or env.get("GLOO_SOCKET_IFNAME"):
        return  # one node: loopback reaches every process
    name = socket.gethostname()
    try:
        address = socket.gethostbyname(name)
        master = socket.gethostbyname(launch.master_addr)
    except OSError:
        return  # gloo reports what it cannot resolve itself
    if ipaddress.ip_address(address).is_loopback and not ipaddress.ip_address(master).is_loopback:
        raise LaunchError(
            f"this host's name {name} resolves to {address} (loopback), so the other nodes could not reach this "
            "process: export GLOO_SOCKET_IFNAME=<the interface of the cluster network> (`ip -br addr` lists them), "
            "or fix the name in /etc/hosts"
        )


def job_store(launch: Launch, timeout: float | None = None, client: bool = False) -> dist.Store:
    """The job's key-value store, which the process group rendezvous through and which stays
    reachable when a peer dies (:mod:`resnet.job.peers` asks it who is still there); ``client``:
    another connection to it, for a thread that must not wait behind the main thread's requests.

    torchrun: its agent's store where the agent offers it, else a store on ``MASTER_ADDR`` hosted by
    rank 0 (what ``env://`` would make). The agent keeps one store across ``--max-restarts``;
    workers of a restarted attempt would read the dead attempt's addresses from it and fail to
    connect (pytorch/pytorch#135712), so each attempt gets a prefix of its own. srun and submitit:
    rank 0 hosts it on the master node."""
    wait = timedelta(seconds=timeout if client else max(timeout or 0.0, JOIN_TIMEOUT))
    agent = launch.launcher == "torchrun" and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    hosts = launch.rank == 0 and not agent and not client
    store = dist.TCPStore(
        launch.master_addr, launch.master_port, None if client else launch.world_size, is_master=hosts, timeout=wait
    )
    if not agent:
        return store
    return dist.PrefixStore(f"resnet_padding/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)


def all_reduce_sum(values: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """Sum a tensor over all processes (a no-op alone). Returns the summed tensor."""
    if env.distributed:
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def all_reduce_host(values: list[float], env: DistEnv) -> list[float]:
    """Sum a few host-side numbers over all processes (gloo, CPU), so that every process takes the
    same branch without waiting for its GPU. Alone: the values as they are."""
    if not env.distributed:
        return list(values)
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=env.host_group)
    return tensor.tolist()


def gather_objects(obj: object, env: DistEnv) -> list:
    """Every process's ``obj`` (picklable), in rank order, on every process. Alone: ``[obj]``."""
    if not env.distributed:
        return [obj]
    everyone: list = [None] * env.world_size
    dist.all_gather_object(everyone, obj)
    return everyone


def gather_flat(items: list, env: DistEnv) -> list:
    """Every process's ``items``, in rank order, as one list on every process."""
    return [item for each in gather_objects(items, env) for item in each]


def on_rank0(env: DistEnv, decide: Callable[[], T], refusal: type[Exception] | tuple[()] = ()) -> T:
    """``decide()``'s value, worked out on rank 0, on every rank; where it raises ``refusal`` (or a
    subclass), every rank raises a new error of its class with its line. A collective (one broadcast):
    every rank calls it, and none returns before rank 0 has decided."""
    found = [(None, None)]
    if env.is_main:
        try:
            found = [(decide(), None)]
        except refusal as err:
            found = [(None, (type(err), str(err)))]
    if env.distributed:
        dist.broadcast_object_list(found, src=0)
    value, refused = found[0]
    if refused is not None:
        kind, line = refused
        raise kind(line)
    return value


def kept_to_the_end(group: dist.ProcessGroup) -> dist.ProcessGroup:
    """``group``, never freed: the process's end releases it, not Python's. A gloo group's destructor
    joins its worker threads while holding the GIL, and a worker still freeing the tensors of a
    collective that just ended waits for the GIL (torch 2.12): a process ending right after one (every
    rank stopping on the same line) could hang there until torchrun killed it (exit -9). A group of a
    lost peer can hang in its destructor too. :func:`shutdown` still leaves the group."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(group))
    return group


def shutdown(env: DistEnv) -> None:
    if env.distributed and dist.is_initialized():
        dist.destroy_process_group()
