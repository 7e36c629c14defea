"""Against a real SLURM: slurmctld and two slurmd nodes, each node in its own network namespace
(tests/cluster/slurm_up.sh). Every job here is submitted to slurmctld and checked there
(``scontrol show job``), so a stand-in srun or scontrol cannot pass these tests.

- the README's ``sbatch scripts/slurm.sbatch`` on 2 nodes x 1 task, its two tasks in two network
  namespaces, preempted the stock way (SIGTERM from slurmctld) mid-epoch: the job saves, is
  requeued, and resumes in the same run dir to the weights of a 2-process torchrun run of the
  same config;
- a stop signal at any moment of a 1-task job (the batch shell 1 s in, the task starting up,
  ``scancel --signal=USR1 --batch`` mid-epoch: the real ``scontrol requeue``) ends COMPLETED with
  the uninterrupted weights; a requeued COMPLETED job keeps every file;
- the README's ``hydra/launcher=submitit_slurm`` sweep (2 jobs x 2 tasks) runs through submitit's
  SLURM executor, each job one 2-process group.

The tasks are forked from the tests' server (tests/helpers/zygote.py), which joins each task's node
namespaces, except the first start of a job whose start-up is signalled: a new interpreter, as
on a real cluster. Skipped, with one line saying how to enable them, where SLURM is not installed or we are not root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from resnet.engine.run import train
from tests.helpers import procs, submitit_tasks
from tests.helpers.compose import compose_config
from tests.helpers.faults import WRAPPER

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
UP = REPO / "tests" / "cluster" / "slurm_up.sh"

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.xdist_group("slurm")]

TASK_PYTHON = """#!/bin/sh
# PYTHON for the sbatch script: note where this task runs (if TASK_LOG is set), then run Python.
[ -z "$TASK_LOG" ] || echo "$SLURM_PROCID $SLURMD_NODENAME $(readlink /proc/self/ns/net) \\
    $(getent hosts "$(hostname)" | cut -d' ' -f1)" >> "$TASK_LOG"
{fresh}exec {python} "$@"
"""
FRESH_FIRST = """# the job's first start: a new interpreter
[ "${{SLURM_RESTART_COUNT:-0}}" != 0 ] || exec {python} "$@"
"""

SITE_PAUSE = """\"\"\"sitecustomize for the jobs of a test: rank 0 of the first job whose training gets to its
8th loss waits there until a stop signal has arrived (a marker file holds its job id, once).\"\"\"
import importlib.abc
import importlib.util
import os
import sys
import time
from pathlib import Path


def pause_at_the_8th_loss(run):
    from resnet.job import signals

    real, calls, marker = run.loss_and_augment, [0], Path(os.environ["PAUSE_MARKER"])

    def loss_and_augment(cfg, num_classes, device):
        loss_fn, augment = real(cfg, num_classes, device)

        def loss(logits, labels):
            calls[0] += 1
            if calls[0] == 8 and os.environ.get("SLURM_PROCID") == "0":
                try:
                    fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    return loss_fn(logits, labels)
                array = os.environ.get("SLURM_ARRAY_JOB_ID")  # scancel <array id> would signal every task
                job = f"{array}_{os.environ['SLURM_ARRAY_TASK_ID']}" if array else os.environ["SLURM_JOB_ID"]
                os.write(fd, job.encode())
                os.close(fd)
                deadline = time.monotonic() + 90
                while signals.pending() is None and time.monotonic() < deadline:
                    time.sleep(0.05)
            return loss_fn(logits, labels)

        return loss, augment

    run.loss_and_augment = loss_and_augment


class AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "resnet.engine.run":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            pause_at_the_8th_loss(module)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("PAUSE_MARKER"):
    sys.meta_path.insert(0, AfterImport())
"""


def pausing(tmp_path: Path, marker: Path) -> dict[str, str]:
    """The environment under which a job's rank 0 pauses at its 8th loss until a stop signal (:data:`SITE_PAUSE`)."""
    (tmp_path / "hook").mkdir(exist_ok=True)
    (tmp_path / "hook" / "sitecustomize.py").write_text(SITE_PAUSE)
    return {"PYTHONPATH": str(tmp_path / "hook"), "PAUSE_MARKER": str(marker)}


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, str]]:
    """The environment that reaches the test cluster (SLURM_CONF), started if it is not up."""
    missing = [tool for tool in ("slurmctld", "slurmd", "munged", "sbatch") if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        pytest.skip("real SLURM tests need root and `apt-get install slurm-wlm munge` (scripts/test.sh does it "
                    "where apt works); then `bash tests/cluster/slurm_up.sh`")  # fmt: skip
    up = subprocess.run(["bash", str(UP)], capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    conf = re.fullmatch(r"export SLURM_CONF=(\S+)\n", up.stdout)
    assert conf, up.stdout
    yield {"SLURM_CONF": conf.group(1), "OMP_NUM_THREADS": "1"}
    if "already up" not in up.stderr:  # started here: stopped here, the machine left as it was found
        subprocess.run(["bash", str(UP.with_name("slurm_down.sh"))], capture_output=True, timeout=120)


def config(data: Path) -> list[str]:
    """6 steps of 2 x 2 images per epoch; with scripts/slurm.sbatch's own resume= and checkpoint_every=."""
    return ["model=resnet_tiny", "data=imagefolder", f"data.root={data}", "data.num_classes=3",
            "data.image_size=32", "data.workers=0", "batch_size=2", "epochs=2", "seed=3", "log_every=2",
            "resume=true", "checkpoint_every=500"]  # fmt: skip


@pytest.fixture(scope="module")
def torchrun_reference(tiny_folder, tmp_path_factory) -> dict:
    """The same config as a 2-process torchrun run on this host: the weights every job must reach."""
    run_dir = tmp_path_factory.mktemp("torchrun") / "run"
    args = [*procs.torchrun_here(), "train.py", *config(tiny_folder), f"hydra.run.dir={run_dir}"]
    proc = procs.run(args, {"OMP_NUM_THREADS": "1"}, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(run_dir / "last.pt", weights_only=True)


def sbatch(env: dict, *args: str) -> str:
    done = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True, cwd=REPO, timeout=60,
                          env={**os.environ, **env})  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def job_fields(env: dict, job: str) -> dict[str, str]:
    shown = subprocess.run(["scontrol", "show", "job", "--oneliner", job], capture_output=True, text=True,
                           timeout=30, env={**os.environ, **env})  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    return dict(field.split("=", 1) for field in shown.stdout.split() if "=" in field)


def wait_for_end(env: dict, job: str, log: Path, timeout: float = 300) -> dict[str, str]:
    """Poll slurmctld until the job has ended for good; cancelled if it does not within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fields = job_fields(env, job)
        if fields["JobState"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            return fields
        time.sleep(0.5)
    subprocess.run(["scancel", job], env={**os.environ, **env}, timeout=30)
    pytest.fail(f"SLURM job {job} still {fields['JobState']} after {timeout} s\n{read(log)[-3000:]}")


def read(path: Path) -> str:
    return path.read_text().replace("\r", "\n") if path.exists() else f"({path} not written)"


def assert_same_weights(a: dict, b: dict) -> None:
    assert (a["epoch"], a["step"]) == (b["epoch"], b["step"])
    for key, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][key]), key
    untimed = [[{k: v for k, v in row.items() if not k.endswith(("_per_s", "_seconds"))} for row in run["history"]]
               for run in (a, b)]  # fmt: skip
    assert untimed[0] == untimed[1]  # each epoch's loss and val errors too, bit for bit


def task_python(tmp_path: Path, fresh_first: bool = False) -> str:
    """PYTHON for the sbatch script: each task forked from the tests' server, which joins the task's
    node (its network and mount namespaces: tests/helpers/zygote.py), as a new interpreter would run
    there; a new interpreter where the server is not used. ``fresh_first``: a new interpreter at the
    job's first start, whose start-up a test signals; a requeued start is forked."""
    fork = procs.forking_python()
    if fork is None:
        return PY
    shim = tmp_path / ("python-fresh-first" if fresh_first else "python")
    shim.write_text(TASK_PYTHON.format(python=fork, fresh=FRESH_FIRST.format(python=PY) if fresh_first else ""))
    shim.chmod(0o755)
    return str(shim)


def test_two_nodes_over_a_real_interface_preempted_by_sigterm_requeue_and_resume_exactly(
    cluster, tiny_folder, torchrun_reference, tmp_path
):
    # The README's sbatch on 2 nodes x 1 task in `low`, each task in its own network namespace, whose
    # only link is the bridge: the rendezvous and gloo's traffic cannot go over loopback. Stock
    # preemption (PreemptType=preempt/partition_prio, PreemptMode=REQUEUE, GraceTime=20, no
    # preempt_send_user_signal): a job in `high` that needs node1 makes slurmctld send SIGTERM to
    # both tasks mid-epoch. The job saves, is requeued, resumes in the same run dir, and ends with
    # the weights of a 2-process torchrun run of the same config.
    run_dir, log, marker, tasks = tmp_path / "run", tmp_path / "job.out", tmp_path / "paused", tmp_path / "tasks.log"
    env = {**cluster, "PYTHON": task_python(tmp_path), "TASK_LOG": str(tasks), "RUN_DIR": str(run_dir),
           **pausing(tmp_path, marker)}  # fmt: skip
    job = sbatch(env, "--partition=low", "--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=0", "--cpus-per-task=1",
                 f"--output={log}", "scripts/slurm.sbatch", *config(tiny_folder))  # fmt: skip
    wait_for_marker(env, job, marker, log)  # rank 0 waits mid-epoch 1 until a stop signal has reached it
    high = sbatch(env, "--partition=high", "--nodelist=node1", "--nodes=1", "--exclusive", "--gpus-per-node=0",
                  "--ntasks=1", f"--output={tmp_path / 'high.out'}", "--wrap=true")  # fmt: skip
    fields = wait_for_end(env, job, log)
    out = read(log)
    assert fields["JobState"] == "COMPLETED" and int(fields["Restarts"]) >= 1, out[-3000:]
    assert fields["NodeList"] == "node[1-2]", out[-3000:]
    assert f"stopped by SIGTERM: saved {run_dir / 'last.pt'}; requeued SLURM job {job}" in out
    assert f"resumed from {run_dir / 'last.pt'} after batch 2 of epoch 2 (step 8)" in out
    ranks = {tuple(line.split()[i] for i in (0, 1, 3)): line.split()[2] for line in tasks.read_text().splitlines()}
    assert sorted(ranks) == [("0", "node1", "10.231.0.1"), ("1", "node2", "10.231.0.2")]  # both runs alike
    assert ranks["0", "node1", "10.231.0.1"] != ranks["1", "node2", "10.231.0.2"]  # two network namespaces
    results = json.loads((run_dir / "results.json").read_text())
    assert (results["world_size"], results["global_batch"], results["n_val_images"]) == (2, 4, 7)
    assert_same_weights(torchrun_reference, torch.load(run_dir / "last.pt", weights_only=True))
    assert wait_for_end(env, high, tmp_path / "high.out")["JobState"] == "COMPLETED"


@pytest.fixture(scope="module")
def one_task_reference(tiny_folder, tmp_path_factory) -> dict:
    """The same config uninterrupted as one process, run here (one thread, as the jobs' tasks)."""
    run_dir = tmp_path_factory.mktemp("one_task") / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(compose_config("train", *config(tiny_folder), f"run_dir={run_dir}"))
    finally:
        torch.set_num_threads(threads)
    return torch.load(run_dir / "last.pt", weights_only=True)


def test_a_stop_signal_at_any_moment_ends_completed_with_the_uninterrupted_weights(
    cluster, tiny_folder, one_task_reference, tmp_path
):
    # 1-task jobs, each stopped once: (signal, when, who gets it). The batch shell alone 1 s after the
    # job started (before or just after it started srun); the task alone 3 s after (python starting
    # up); the batch shell alone while rank 0 waits at its 8th loss, mid-epoch (SLURM's time-limit
    # warning, --signal=B:USR1@120, forwarded by the script to srun). Each saves or not, is requeued,
    # and ends COMPLETED with the weights of the uninterrupted run, bit for bit.
    marker = tmp_path / "paused"
    cases = [("USR1", 1, "--batch"), ("TERM", 3, ""), ("USR1", marker, "--batch")]
    jobs = []
    for n, (name, _, _) in enumerate(cases):
        log = tmp_path / f"job{n}.out"
        # the first two are signalled as they start: new interpreters, as a real job's
        env = {**cluster, "PYTHON": task_python(tmp_path, fresh_first=n < 2),
               **(pausing(tmp_path, marker) if n == 2 else {})}  # fmt: skip
        if n < 2:  # the last job keeps the script's own run dir: outputs/slurm/<cluster>/<job name>-<job id>
            env["RUN_DIR"] = str(tmp_path / f"run{n}")
        job = sbatch(env, "--nodes=1", "--ntasks-per-node=1", "--gpus-per-node=0", "--cpus-per-task=1",
                     f"--output={log}", f"--job-name=stop-{name.lower()}", "scripts/slurm.sbatch",
                     *config(tiny_folder))  # fmt: skip
        jobs.append((job, log, env))
    started: dict[int, float] = {}
    pending = dict(enumerate(cases))
    deadline = time.monotonic() + 300
    while pending and time.monotonic() < deadline:
        for n, (name, after, whom) in list(pending.items()):
            job = jobs[n][0]
            if n not in started and job_fields(cluster, job)["JobState"] == "RUNNING":
                started[n] = time.monotonic()
            if marker.exists() if isinstance(after, Path) else n in started and time.monotonic() >= started[n] + after:
                sent = subprocess.run(["scancel", f"--signal={name}", *filter(None, [whom]), job], capture_output=True,
                                      text=True, timeout=30, env={**os.environ, **cluster})  # fmt: skip
                assert sent.returncode == 0, sent.stderr
                del pending[n]
        time.sleep(0.1)
    assert not pending, f"jobs never got to their signal: {pending}"
    default_dir = REPO / "outputs" / "slurm" / "resnet-test" / f"stop-usr1-{jobs[2][0]}"
    try:
        for n, (job, log, env) in enumerate(jobs):
            fields = wait_for_end(env, job, log)
            out = read(log)
            assert fields["JobState"] == "COMPLETED", out[-3000:]
            assert "Traceback" not in out and "User defined signal" not in out and "Terminated" not in out, out[-3000:]
            run_dir = Path(env["RUN_DIR"]) if "RUN_DIR" in env else default_dir
            assert_same_weights(one_task_reference, torch.load(run_dir / "last.pt", weights_only=True))
            results = json.loads((run_dir / "results.json").read_text())
            assert results["epochs"] == 2 and results["n_val_images"] == 7 and results["top1_err"] is not None
            if fields["Restarts"] != "0":  # stopped before the end: requeued by the script or by rank 0
                assert f"requeued SLURM job {job}" in out, out[-3000:]
            if n == 2:  # stopped mid-epoch: saved there, requeued by slurmctld, resumed from that step
                assert fields["Restarts"] == "1", out[-3000:]
                assert f"stopped by SIGUSR1: saved {run_dir / 'last.pt'}; requeued SLURM job {job}" in out
                assert "DUE TO JOB REQUEUE" in out  # slurmstepd's own words: the real scontrol requeue ended it
                assert f"resumed from {run_dir / 'last.pt'} after batch 8 of epoch 1 (step 8)" in out, out[-3000:]

        # `scontrol requeue` of a COMPLETED job: it runs again, finds its run finished, and keeps every file.
        job, log, env = jobs[0]
        run_dir = Path(env["RUN_DIR"])
        files = {path.name: path.read_bytes() for path in run_dir.iterdir() if path.is_file()}
        restarts = int(job_fields(cluster, job)["Restarts"])
        requeue = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=30,
                                 env={**os.environ, **env})  # fmt: skip
        assert requeue.returncode == 0, requeue.stderr
        fields = wait_for_end(env, job, log)
        assert (fields["JobState"], int(fields["Restarts"])) == ("COMPLETED", restarts + 1), read(log)[-3000:]
        top1 = f"{json.loads(files['results.json'])['top1_err']:.2f}%"
        assert f"run in {run_dir} already finished: top-1 err {top1}; results.json kept" in read(log)
        assert {path.name: path.read_bytes() for path in run_dir.iterdir() if path.is_file()} == files
    finally:
        shutil.rmtree(default_dir, ignore_errors=True)


def test_a_dead_task_an_admin_requeue_a_full_scancel_and_a_reused_job_id_each_go_on_exactly(
    cluster, tiny_folder, torchrun_reference, one_task_reference, tmp_path
):
    # Four jobs at once, each ending COMPLETED with the uninterrupted run's weights:
    # - dead: 2 tasks on 2 nodes; task 1 is SIGKILLed before its 9th step (once). Task 0 names it,
    #   says what is kept and requeues the job; the requeued job resumes from the epoch's checkpoint.
    # - admin: 1 task paused mid-epoch; an admin's `scontrol requeue`. The task saves and says the job
    #   was requeued by SLURM (not "not requeued ... COMPLETING"). It runs in the script's default run
    #   dir, where a folder of an earlier job with its id (a controller reset) waits: it writes beside
    #   it, and its requeued start finds its own folder again.
    # - full: 1 task paused mid-epoch; `scancel --signal=TERM --full` (srun gets the TERM too and
    #   kills its task at once). The batch script requeues the job, which goes on from the last save.
    wrapper = tmp_path / "faulty_train.py"
    wrapper.write_text(WRAPPER)
    fork = procs.forking_python() or PY
    faulty = tmp_path / "python-faulty"
    faulty.write_text(f'#!/bin/sh\nexec {fork} {wrapper} "$@"\n')
    faulty.chmod(0o755)
    common = ("--gpus-per-node=0", "--cpus-per-task=1", "scripts/slurm.sbatch", *config(tiny_folder))
    dead_env = {**cluster, "PYTHON": str(faulty), "RUN_DIR": str(tmp_path / "dead"), "FAULT": "step:9",
                "FAULT_RANK": "1", "FAULT_ONCE": str(tmp_path / "killed_once")}  # fmt: skip
    dead = sbatch(dead_env, "--nodes=2", "--ntasks-per-node=1", f"--output={tmp_path / 'dead.out'}", *common)
    envs, jobs = {"dead": dead_env}, {"dead": dead}
    for name in ("admin", "full"):
        envs[name] = {**cluster, "PYTHON": task_python(tmp_path), **pausing(tmp_path, tmp_path / f"{name}.paused")}
        if name == "full":
            envs[name]["RUN_DIR"] = str(tmp_path / name)
        jobs[name] = sbatch(envs[name], "--hold", "--nodes=1", "--ntasks-per-node=1", f"--job-name=reused-{name}",
                            f"--output={tmp_path / name}.out", *common)  # fmt: skip
    earlier = REPO / "outputs" / "slurm" / "resnet-test" / f"reused-admin-{jobs['admin']}"
    earlier.mkdir(parents=True)
    (earlier / "results.json").write_text('{"epochs": 2, "top1_err": 1.0}')  # an earlier job's finished run
    try:
        for name in ("admin", "full"):
            released = subprocess.run(["scontrol", "release", jobs[name]], capture_output=True, text=True, timeout=30,
                                      env={**os.environ, **cluster})  # fmt: skip
            assert released.returncode == 0, released.stderr
        for name, command in (("admin", ["scontrol", "requeue"]), ("full", ["scancel", "--signal=TERM", "--full"])):
            wait_for_marker(cluster, jobs[name], tmp_path / f"{name}.paused", tmp_path / f"{name}.out")
            sent = subprocess.run([*command, jobs[name]], capture_output=True, text=True, timeout=30,
                                  env={**os.environ, **cluster})  # fmt: skip
            assert sent.returncode == 0, sent.stderr
        outs = {}
        for name, job in jobs.items():
            fields = wait_for_end(cluster, job, tmp_path / f"{name}.out")
            outs[name] = read(tmp_path / f"{name}.out")
            assert (fields["JobState"], fields["Restarts"]) == ("COMPLETED", "1"), outs[name][-3000:]

        dead_dir = tmp_path / "dead"
        assert re.search(
            rf"error: rank 1 \(\S+, pid \d+\) died \(after step 8\); last\.pt saved after epoch 1 "
            rf"\(step 6\) is intact; requeued SLURM job {dead}(?!\d)",
            outs["dead"],
        ), outs["dead"][-3000:]
        assert "Traceback" not in outs["dead"] and "GLHF" not in outs["dead"]
        assert f"resumed from {dead_dir / 'last.pt'} after epoch 1 (step 6)" in outs["dead"]
        assert_same_weights(torchrun_reference, torch.load(dead_dir / "last.pt", weights_only=True))

        [admin_dir] = [p for p in earlier.parent.glob(f"{earlier.name}.*")]  # beside the earlier job's folder
        assert f"note: outputs/slurm/resnet-test/{earlier.name} is an earlier job's" in outs["admin"]
        assert f"stopped by SIGTERM: saved {admin_dir / 'last.pt'}; requeued SLURM job " \
               f"{jobs['admin']} (by SLURM)" in outs["admin"], outs["admin"][-3000:]  # fmt: skip
        assert "after batch 8 of epoch 1 (step 8)" in outs["admin"]
        assert_same_weights(one_task_reference, torch.load(admin_dir / "last.pt", weights_only=True))
        assert sorted(p.name for p in earlier.iterdir()) == ["results.json"]  # the earlier job's, untouched

        assert f"srun ended with status 137; requeued SLURM job {jobs['full']}" in outs["full"], outs["full"][-3000:]
        assert_same_weights(one_task_reference, torch.load(tmp_path / "full" / "last.pt", weights_only=True))
    finally:
        for folder in earlier.parent.glob(f"{earlier.name}*"):
            shutil.rmtree(folder, ignore_errors=True)


def test_a_time_limit_no_longer_than_the_warnings_lead_is_one_line_not_a_requeue_loop(cluster, tiny_folder, tmp_path):
    # --time=1 (60 s) with --signal=USR1@120: the warning would come at every start, and each start
    # would requeue itself before training anything. The script refuses it instead.
    log = tmp_path / "job.out"
    job = sbatch({**cluster, "PYTHON": PY, "RUN_DIR": str(tmp_path / "run")}, "--time=1", "--nodes=1",
                 "--ntasks-per-node=1", "--gpus-per-node=0", "--cpus-per-task=1", f"--output={log}",
                 "scripts/slurm.sbatch", *config(tiny_folder))  # fmt: skip
    fields = wait_for_end(cluster, job, log, timeout=120)
    assert (fields["JobState"], fields["Restarts"]) == ("FAILED", "0"), read(log)
    assert "no longer than its --signal lead of 120 s" in read(log) and not (tmp_path / "run").exists()


def wait_for_marker(env: dict, job: str, marker: Path, log: Path) -> None:
    deadline = time.monotonic() + 300  # a busy machine: the job may wait for the last one's node
    while not marker.exists():
        assert time.monotonic() < deadline and job_fields(env, job)["JobState"] in ("PENDING", "RUNNING"), read(log)
        time.sleep(0.2)


def test_the_readme_submitit_sweep_runs_and_a_usr2_with_a_short_timeout_ends_in_one_line(cluster, tiny_folder,
                                                                                         tmp_path):  # fmt: skip
    # The README's sweep, 2 jobs x 2 tasks through submitit's SLURM executor, with timeout_min=5: submitit
    # then counts every signal as a time-out, and with max_num_timeout=0 it will not requeue. The job
    # paused mid-epoch gets USR2: every rank saves and ends with its result file, the other job trains
    # on to its results, and the sweep ends in one line saying why nothing was requeued (no accounting
    # database here: submitit reads result files, and would wait forever for a missing one).
    sweep, marker = tmp_path / "sweep", tmp_path / "paused"
    # The pause hook reaches the tasks through the job script's set-up lines; the sweep process has
    # its own PYTHONPATH, whose hook has submitit start the tasks forked (tests/helpers/submitit_tasks.py).
    pause = pausing(tmp_path, marker)
    env = {**cluster, "PAUSE_MARKER": pause["PAUSE_MARKER"], **submitit_tasks.sweep_env(tmp_path / "site")}
    args = [PY, "train.py", "-m", "hydra/launcher=submitit_slurm", "hydra.launcher.nodes=1",
            "hydra.launcher.tasks_per_node=2", "hydra.launcher.cpus_per_task=1", "hydra.launcher.timeout_min=5",
            f"hydra.launcher.setup=['export PYTHONPATH={pause['PYTHONPATH']}']",
            f"hydra.sweep.dir={sweep}", *config(tiny_folder)[:-2], "+padding=symmetric,asymmetric"]  # fmt: skip
    sweep_proc = procs.start(args, env)
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert time.monotonic() < deadline and sweep_proc.poll() is None, sweep_proc.communicate()
        time.sleep(0.2)
    paused = marker.read_text()
    sent = subprocess.run(["scancel", "--signal=USR2", paused], capture_output=True, text=True, timeout=30,
                          env={**os.environ, **cluster})  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    [proc] = procs.wait_all([sweep_proc], timeout=240)  # bounded: a rank without its result file would hang it
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("stopped by SIGUSR2")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "submitit will not requeue it (Job not requeued because: timed-out too many times)" in lines[0]
    assert "raise hydra.launcher.max_num_timeout" in lines[0]
    jobs = sorted(path.name for path in (sweep / ".submitit").iterdir() if re.fullmatch(r"\d+_\d+", path.name))
    assert len(jobs) == 2, jobs  # one SLURM job array, a task each
    for job in jobs:  # slurmctld ran each as one 2-task job; every task wrote its result file
        fields = wait_for_end(cluster, job, sweep / ".submitit" / job / f"{job}_0_log.err", timeout=60)  # exiting
        assert fields["NumTasks"] == "2" and fields["Restarts"] == "0", fields
        assert sorted(p.name for p in (sweep / ".submitit" / job).glob("*_result.pkl")) == [
            f"{job}_0_result.pkl", f"{job}_1_result.pkl"]  # fmt: skip
    finished = [n for n in (0, 1) if (sweep / str(n) / "results.json").exists()]
    assert len(finished) == 1, finished
    results = json.loads((sweep / str(finished[0]) / "results.json").read_text())
    scheme = ("symmetric", "asymmetric")[finished[0]]
    assert (results["padding_name"], results["world_size"], results["global_batch"]) == (scheme, 2, 4)
    assert results["n_val_images"] == 7
    stopped = torch.load(sweep / str(1 - finished[0]) / "last.pt", weights_only=True)
    assert stopped["epoch_partial"]["batches"] == 2  # saved after the step it was in: batch 2 of the epoch
