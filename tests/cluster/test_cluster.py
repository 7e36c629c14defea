"""Who launched a process (torchrun, submitit, srun, python) and the one-line errors of launches
that cannot work. The multi-process runs themselves are in test_train.py (torchrun, the submitit
local launcher), test_slurm.py (sbatch, srun and submitit on a real SLURM) and test_faults.py
(stop signals and requeue)."""

from __future__ import annotations

import os

import pytest
import torch

from resnet.config import ConfigError
from resnet.runtime.device import join_job
from resnet.runtime.distributed import (
    LaunchError,
    cuda_index,
    detect_launch,
    expand_hostlist,
    pick_device,
    tasks_per_node,
)
from tests.helpers.compose import compose_config
from tests.helpers.faults import error_line, launch
from tests.helpers.training import PY, REPO

SRUN_TASK = {  # task 5 of a 2-node x 4-task srun step, on the second node
    "SLURM_JOB_ID": "123456", "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "8", "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_STEP_NODELIST": "gpu[07-08]",
    "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
}  # fmt: skip


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("gpu07", ["gpu07"]),
        ("gpu[07-09,12]", ["gpu07", "gpu08", "gpu09", "gpu12"]),
        ("a[1-2],b3,c[009-010]-ib", ["a1", "a2", "b3", "c009-ib", "c010-ib"]),
    ],
)
def test_slurm_host_lists_expand(nodelist, hosts):
    assert expand_hostlist(nodelist) == hosts


def test_tasks_per_node_reads_the_compact_form():
    assert [tasks_per_node("2(x3),1", node, default=0) for node in range(4)] == [2, 2, 2, 1]


def test_srun_tasks_take_rank_local_rank_world_and_master_from_slurm():
    launch_ = detect_launch(SRUN_TASK)
    assert (launch_.launcher, launch_.rank, launch_.local_rank, launch_.world_size) == ("srun", 5, 1, 8)
    assert (launch_.local_world_size, launch_.master_addr, launch_.job_id) == (4, "gpu07", "123456")
    assert launch_.master_port == detect_launch({**SRUN_TASK, "SLURM_PROCID": "0"}).master_port  # every task alike
    exported = detect_launch({**SRUN_TASK, "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29400"})
    assert (exported.master_addr, exported.master_port) == ("10.0.0.7", 29400)  # the job script's exports win


def test_torchrun_variables_win_over_slurm():
    torchrun = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "3", "MASTER_ADDR": "h", "MASTER_PORT": "1234"}
    launch_ = detect_launch({**SRUN_TASK, **torchrun})
    assert (launch_.launcher, launch_.rank, launch_.world_size, launch_.master_port) == ("torchrun", 3, 4, 1234)


def test_submitit_tasks_take_their_identity_from_submitit(monkeypatch):
    local = {"SUBMITIT_EXECUTOR": "local", "SUBMITIT_LOCAL_JOB_ID": "777", "SUBMITIT_LOCAL_NTASKS": "2",
             "SUBMITIT_LOCAL_JOB_NUM_NODES": "1", "SUBMITIT_LOCAL_NODEID": "0", "SUBMITIT_LOCAL_GLOBALID": "1",
             "SUBMITIT_LOCAL_LOCALID": "1"}  # fmt: skip
    for name, value in local.items():
        monkeypatch.setenv(name, value)
    launch_ = detect_launch(local)
    assert (launch_.launcher, launch_.rank, launch_.world_size, launch_.master_addr) == ("submitit", 1, 2, "127.0.0.1")


def test_plain_python_is_one_process():
    assert detect_launch({}).world_size == 1 and detect_launch({}).launcher == "single"


def test_each_process_gets_its_own_gpu_or_one_line():
    assert [cuda_index(r, 8, visible=8) for r in range(8)] == list(range(8))
    with pytest.raises(LaunchError, match=r"8 processes on this node but 4 GPU\(s\).*--ntasks-per-node=4"):
        cuda_index(0, 8, visible=4)  # every rank fails alike: none waits for the others


@pytest.mark.parametrize("gpus_on_node", ["4", "1", None], ids=["gpus-per-task", "gpu-bind", "visible-devices-wrapper"])
def test_one_gpu_per_task_binding_uses_cuda_0(gpus_on_node, monkeypatch):
    # each task sees its own one GPU, however it was bound and whatever SLURM_GPUS_ON_NODE says
    if gpus_on_node is None:
        monkeypatch.delenv("SLURM_GPUS_ON_NODE", raising=False)
    else:
        monkeypatch.setenv("SLURM_GPUS_ON_NODE", gpus_on_node)
    assert cuda_index(3, 4, visible=1) == 0


def test_more_tasks_than_gpus_is_a_config_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(LaunchError, match="start at most 2 per node"):
        pick_device("auto", local_rank=3, local_world_size=4)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SLURM_JOB_ID": "9", "SLURM_NTASKS": "4", "SLURM_PROCID": "0"}, "not started by srun"),
        ({k: v for k, v in SRUN_TASK.items() if k != "SLURM_LOCALID"}, "lacks SLURM_LOCALID"),
        ({k: v for k, v in SRUN_TASK.items() if k != "SLURM_STEP_NODELIST"}, "lacks SLURM_STEP_NODELIST"),
    ],
    ids=["batch-script-without-srun", "no-local-id", "no-node-list"],
)
def test_launches_without_the_needed_variables_are_one_line(env, message, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "SUBMITIT_EXECUTOR", *(k for k in SRUN_TASK)):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=message):
        join_job("cpu", workers=0)


def test_an_srun_step_with_more_tasks_than_gpus_is_one_line_before_joining(monkeypatch):
    # 4 tasks on this node (SRUN_TASK: 4 per node) but 2 GPUs: refused while choosing the device,
    # before the process group would wait for the other tasks.
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SUBMITIT_EXECUTOR", "SLURM_GPUS_ON_NODE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in SRUN_TASK.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match=r"4 processes on this node but 2 GPU\(s\).*--ntasks-per-node=2"):
        join_job("auto", workers=0)


@pytest.mark.slow
def test_a_multi_task_batch_script_running_python_fails_in_one_line_not_a_hang(tmp_path):
    # `python train.py` in an 8-task sbatch script, without srun: one line, exit 2, at once.
    env = {"SLURM_JOB_ID": "9", "SLURM_NTASKS": "8", "SLURM_PROCID": "0", "SLURM_NNODES": "2"}
    line = error_line(launch([PY, "train.py", "epochs=1", f"hydra.run.dir={tmp_path / 'run'}"], timeout=60, **env))
    assert "not started by srun" in line and "srun python train.py" in line


def test_the_readme_submitit_sweep_composes():
    # The documented command, as Hydra composes each of its jobs (the first value of each sweep).
    readme = (REPO / "README.md").read_text()
    start = readme.index("python train.py -m hydra/launcher=submitit_slurm")
    command = readme[start : readme.index("\n```", start)].replace("\\\n", " ").split()
    overrides = [arg.split(",")[0] for arg in command[3:]]
    assert not any(arg.startswith("+hydra.launcher") for arg in overrides)  # those keys exist: no '+'
    cfg = compose_config("train", *overrides, hydra=True)
    launcher = cfg.hydra.launcher
    assert (launcher.nodes, launcher.tasks_per_node, launcher.gpus_per_node) == (2, 8, 8)
    assert launcher.max_num_timeout > 0 and cfg.resume is True and cfg.checkpoint_minutes > 0  # requeued, resumed


@pytest.mark.parametrize(
    "submitit_does, said, requeued",
    [
        ("requeue", "requeued by submitit", True),  # submitit requeues, then exits
        ("refuse", "submitit will not requeue it (Job not requeued because: timed-out too many times)", False),
    ],
)
def test_under_submitit_the_stop_signal_is_handed_to_submitits_own_requeue(submitit_does, said, requeued):
    # submitit installs its checkpoint-and-requeue handler on USR2 before calling train.py; the run
    # records the signal, saves at the next step boundary, then calls that handler, which requeues
    # (and exits) or says why it will not; either way the run learns which, and no rank just exits.
    import signal

    from resnet.job.preempt import StopRequest
    from resnet.runtime.distributed import DistEnv, Launch

    calls = []

    def submitit_handler(signum, frame):
        calls.append(signum)
        if submitit_does == "requeue":
            raise SystemExit(-1)
        raise RuntimeError("Job not requeued because: timed-out too many times.")  # its UncompletedJobError

    previous = signal.signal(signal.SIGUSR2, submitit_handler)
    try:
        env = DistEnv(0, 1, 0, torch.device("cpu"), launch=Launch("submitit", job_id="42"))
        stop = StopRequest(env).install()
        signal.raise_signal(signal.SIGUSR2)
        assert stop.requested and calls == []  # recorded only: nothing requeues mid-step
        done = stop.hand_over()
        assert done.text.startswith(said) and done.requeued is requeued and calls == [signal.SIGUSR2]
        assert signal.getsignal(signal.SIGUSR2) is submitit_handler  # handed back
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_the_sbatch_run_dir_differs_between_clusters_and_array_tasks_that_share_a_job_id(tmp_path):
    # Job ids start again on another cluster or after a controller reset: the default run dir names the cluster.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "srun").write_text('#!/bin/sh\nfor a in "$@"; do case $a in hydra.run.dir=*) '
                                           'echo "${a#hydra.run.dir=}";; esac; done\n')  # fmt: skip
    (tmp_path / "bin" / "srun").chmod(0o755)
    base = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "SLURM_JOB_ID": "1234", "SLURM_JOB_NAME": "resnet-padding",
            "SLURM_SUBMIT_DIR": str(tmp_path)}  # fmt: skip
    dirs = {}
    for name, extra in {"a": {"SLURM_CLUSTER_NAME": "alpha"}, "b": {"SLURM_CLUSTER_NAME": "beta"},
                        "array": {"SLURM_CLUSTER_NAME": "alpha", "SLURM_ARRAY_JOB_ID": "1230",
                                  "SLURM_ARRAY_TASK_ID": "4"}}.items():  # fmt: skip
        proc = launch(["bash", str(REPO / "scripts" / "slurm.sbatch")], **base, **extra)
        assert proc.returncode == 0, proc.stderr
        dirs[name] = proc.stdout.strip()
    assert dirs == {"a": "outputs/slurm/alpha/resnet-padding-1234", "b": "outputs/slurm/beta/resnet-padding-1234",
                    "array": "outputs/slurm/alpha/resnet-padding-1230_4"}  # fmt: skip


def test_a_multi_node_job_on_a_host_named_for_loopback_is_one_line_not_a_hang(monkeypatch):
    # Debian's /etc/hosts maps the host's own name to 127.0.1.1: gloo would listen there, out of the other nodes' reach.
    from resnet.runtime.distributed import Launch, check_gloo_interface

    addresses = {"gpu07": "127.0.1.1", "gpu01": "10.0.0.1"}  # this node's name; the master node's
    monkeypatch.setattr("socket.gethostname", lambda: "gpu07")
    monkeypatch.setattr("socket.gethostbyname", lambda name: addresses.get(name, name))
    two_nodes = Launch("srun", rank=5, world_size=8, local_rank=1, local_world_size=4, master_addr="gpu01")
    with pytest.raises(LaunchError, match=r"gpu07 resolves to 127\.0\.1\.1.*export GLOO_SOCKET_IFNAME="):
        check_gloo_interface(two_nodes, {})
    check_gloo_interface(two_nodes, {"GLOO_SOCKET_IFNAME": "ib0"})  # the user picked the interface
    addresses["gpu07"] = "10.0.0.7"
    check_gloo_interface(two_nodes, {})  # a name that resolves to the host's real address
    addresses["gpu07"] = "127.0.1.1"
    one_node = Launch("srun", rank=1, world_size=4, local_rank=1, local_world_size=4, master_addr="gpu01")
    check_gloo_interface(one_node, {})  # one node: loopback reaches everyone
    simulated = Launch("srun", rank=1, world_size=2, local_rank=0, local_world_size=1, master_addr="127.0.0.1")
    check_gloo_interface(simulated, {})  # every "node" on this host


SCONTROL = """#!/bin/sh
# a scripted scontrol: `show job` answers the first state until a requeue was tried, the second after
if [ "$1" = show ]; then
    if [ -e {tried} ]; then echo "JobId=$4 JobState={after} Restarts={restarts}"
    else echo "JobId=$4 JobState={before} Restarts={before_restarts}"; fi
    exit 0
fi
touch {tried}
exit {status}
"""


@pytest.mark.parametrize(
    ("before", "status", "after", "restarts", "said"),
    [
        ("REQUEUED", 0, "REQUEUED", 0, "requeued SLURM job 9 (by SLURM)"),  # slurmctld's came before the check
        ("RUNNING", 1, "PENDING", 1, "requeued SLURM job 9 (by SLURM)"),  # ...between the check and ours
        ("RUNNING", 1, "COMPLETING", 1, "requeued SLURM job 9 (by SLURM)"),  # ...and is still ending the old start
        ("RUNNING", 0, "PENDING", 1, "requeued SLURM job 9"),
        ("RUNNING", 1, "RUNNING", 0, "not requeued: scontrol requeue 9 failed (no message); submit with --requeue"),
        ("COMPLETING", 0, "COMPLETING", 0, "not requeued: SLURM job 9 is COMPLETING (cancelled, or ending)"),
        # `scontrol requeue` by an admin: this start (SLURM_RESTART_COUNT 0) is ending, and slurmctld
        # already counts the next one
        ("COMPLETING 1", 0, "COMPLETING", 1, "requeued SLURM job 9 (by SLURM)"),
    ],
)
def test_a_requeue_that_slurm_made_itself_is_a_requeue(tmp_path, monkeypatch, before, status, after, restarts, said):
    # Stock preemption (PreemptMode=REQUEUE): slurmctld requeues the job itself while rank 0 saves,
    # and rank 0's own `scontrol requeue` then fails. The job is requeued all the same: exit 0.
    from resnet.job.preempt import requeue

    script = tmp_path / "scontrol"
    before, _, before_restarts = before.partition(" ")
    script.write_text(SCONTROL.format(tried=tmp_path / "tried", before=before, after=after, restarts=restarts,
                                      status=status, before_restarts=before_restarts or 0))  # fmt: skip
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    outcome = requeue("9")
    assert (outcome.text, outcome.requeued) == (said, said.startswith("requeued"))
