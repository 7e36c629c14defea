"""Faults injected into train.py: the test-only wrapper that SIGKILLs (or signals) a run at a
chosen call, launching a command with a fault, and checking how it ended: its exit status, its
one ``error:`` line, a resumed run's training equal to an uninterrupted one's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import torch

from resnet.engine import run as engine_run
from tests.helpers import procs

WRAPPER = '''"""Test-only: run the train.py given as argv[1], with one fault from $FAULT.

FAULT=step:N  SIGKILL before the N-th training step (loss) of this process
FAULT=stall:N  SIGSTOP before the N-th training step (a hung read, GPU or deadlock, from outside)
FAULT=hup:N  SIGHUP (a closed terminal or ssh session) at the N-th loss
FAULT=raise:N  raise a RuntimeError of its own at the N-th loss (a bug, an out-of-memory error)
FAULT=pause:N  at the N-th loss, create the file $FAULT_MARKER, then wait (60 s at most) for a stop signal
FAULT=save:N  SIGKILL halfway through writing the N-th checkpoint (torch.save)
FAULT=eval:N  SIGKILL at the N-th validation pass
FAULT=usr1:N  SIGUSR1 (SLURM's warning before a time limit or preemption) at the N-th loss
FAULT=term:N  SIGTERM (a stock preemption, docker stop) at the N-th loss; int:N SIGINT (Ctrl-C)
FAULT=int2:N  SIGINT twice at the N-th loss (a person who insists)
FAULT=usr1val:N  SIGUSR1 at the N-th validation pass (the last one: after the last epoch's training)
FAULT=termstart:N  SIGTERM while the N-th model is being built (start-up, before the first step)
FAULT=finish:N  SIGKILL at the N-th results write (after the last checkpoint, before results.json)
FAULT=worker:N  a DataLoader worker process SIGKILLs itself at the N-th image it reads (the OOM killer)
FAULT_RANK=R  only in the process of rank R (default 0; RANK or SLURM_PROCID)
FAULT_ONCE=F  only if file F does not exist yet, and create it (once over restarts)
"""
import io
import os
import runpy
import signal
import sys
from pathlib import Path

import torch

import resnet.engine.run as engine_run

KIND, N = os.environ.get("FAULT", "none:0").split(":")
calls = 0


def due():
    global calls
    calls += 1
    rank = os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))
    if calls != int(N) or rank != os.environ.get("FAULT_RANK", "0"):
        return False
    once = os.environ.get("FAULT_ONCE")
    if once and Path(once).exists():
        return False
    if once:
        Path(once).touch()
    return True


def die():
    os.kill(os.getpid(), signal.SIGKILL)


SIGNALS = {"usr1": [signal.SIGUSR1], "term": [signal.SIGTERM], "int": [signal.SIGINT],
           "int2": [signal.SIGINT, signal.SIGINT], "hup": [signal.SIGHUP], "stall": [signal.SIGSTOP]}

if KIND in ("step", "pause", "raise") or KIND in SIGNALS:
    real_loss_and_augment = engine_run.loss_and_augment

    def loss_and_augment(cfg, num_classes, device):
        loss_fn, augment = real_loss_and_augment(cfg, num_classes, device)

        def loss(logits, labels):
            if not due():
                return loss_fn(logits, labels)
            if KIND == "step":
                die()
            if KIND == "raise":
                raise RuntimeError("out of memory on this rank (injected)")
            if KIND == "pause":
                import time

                from resnet.job import signals

                Path(os.environ["FAULT_MARKER"]).touch()
                deadline = time.monotonic() + 60
                while signals.pending() is None and time.monotonic() < deadline:
                    time.sleep(0.05)
            for signum in SIGNALS.get(KIND, []):
                os.kill(os.getpid(), signum)
            return loss_fn(logits, labels)

        return loss, augment

    engine_run.loss_and_augment = loss_and_augment
elif KIND == "usr1val":
    real_evaluate = engine_run.evaluate

    def evaluate(*args, **kwargs):
        if due():
            os.kill(os.getpid(), signal.SIGUSR1)
        return real_evaluate(*args, **kwargs)

    engine_run.evaluate = evaluate
elif KIND == "termstart":
    real_build = engine_run.build_run_model

    def build_run_model(cfg):
        if due():
            os.kill(os.getpid(), signal.SIGTERM)
        return real_build(cfg)

    engine_run.build_run_model = build_run_model
elif KIND == "finish":
    from resnet.engine.runlog import RunLogger

    real_finish = RunLogger.finish

    def finish(self, *args, **kwargs):
        if due():
            die()
        return real_finish(self, *args, **kwargs)

    RunLogger.finish = finish
elif KIND == "save":
    real_save = torch.save

    def save(obj, f, *args, **kwargs):
        if not due():
            return real_save(obj, f, *args, **kwargs)
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        f.write(buffer.getvalue()[: buffer.tell() // 2])
        f.flush()
        die()

    torch.save = save
elif KIND == "worker":
    import torch.utils.data
    from data.imagefolder import ImageFiles

    real_getitem = ImageFiles.__getitem__

    def getitem(self, index):
        if torch.utils.data.get_worker_info() is not None and due():
            die()
        return real_getitem(self, index)

    ImageFiles.__getitem__ = getitem
elif KIND == "eval":
    real_evaluate = engine_run.evaluate

    def evaluate(*args, **kwargs):
        if due():
            die()
        return real_evaluate(*args, **kwargs)

    engine_run.evaluate = evaluate

sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''
TIMING = ("train_images_per_s", "epoch_seconds", "val_images_per_s")  # differ between any two runs


def stand_in_scontrol(tmp_path: Path, state: str = "RUNNING") -> dict[str, str]:
    """A SLURM job's environment whose ``scontrol`` is a stand-in: ``show job`` answers ``state``,
    ``requeue`` is recorded in ``tmp_path/scontrol.log``. Returns the variables (PATH first)."""
    script = tmp_path / "bin" / "scontrol"
    script.parent.mkdir(exist_ok=True)
    script.write_text(f'#!/bin/sh\nif [ "$1" = show ]; then echo "JobId=$4 JobState={state}"; exit 0; fi\n'
                      f'echo "$@" >> {tmp_path / "scontrol.log"}\n')  # fmt: skip
    script.chmod(0o755)
    return {"PATH": f"{script.parent}:{os.environ['PATH']}", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}


def launch(args: list[str], fault: str = "none:0", timeout: int = 180, **env: str) -> subprocess.CompletedProcess:
    """Run to the end with ``fault`` injected (the wrapper's $FAULT); a hang fails the test
    (tests/helpers/procs.py kills the whole process group, torchrun's workers too)."""
    return procs.run(args, {"FAULT": fault, **env}, timeout)


def assert_status(proc: subprocess.CompletedProcess, status: int) -> None:
    assert proc.returncode == status, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"


def error_line(proc: subprocess.CompletedProcess, status: int = 2) -> str:
    """The one ``error:`` line a failed run printed; no traceback."""
    assert_status(proc, status)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr[-3000:]
    return errors[0]


def assert_same_training(a: dict, b: dict) -> None:
    assert a["epoch"] == b["epoch"] and a["step"] == b["step"]
    for key, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][key]), key

    def untimed(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]

    assert untimed(a["history"]) == untimed(b["history"])  # every epoch's loss and val errors, bit for bit


def nan_at(monkeypatch, n: int, onwards: bool = False) -> None:
    """The ``n``-th loss of the next in-process run is NaN (``onwards``: and every later one)."""
    real = engine_run.loss_and_augment

    def loss_and_augment(cfg, num_classes, device):
        loss_fn, augment = real(cfg, num_classes, device)
        calls = [0]

        def loss(logits, labels):
            calls[0] += 1
            due = calls[0] >= n if onwards else calls[0] == n
            return loss_fn(logits, labels) * (float("nan") if due else 1.0)

        return loss, augment

    monkeypatch.setattr(engine_run, "loss_and_augment", loss_and_augment)
