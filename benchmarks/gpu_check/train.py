"""The ``train`` step: a short ``train.py +experiment=tv_v1`` on generated JPEGs (or ``--data-root``)
in its own process; and what the ``eval`` step shares with it: the data folder, the logged run."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
from pathlib import Path

from benchmarks import interpreter
from benchmarks.gpu_check.check import REPO, Check, StepFailed


def data_root(check: Check) -> tuple[Path, int]:
    """The ImageNet-layout folder for train and eval, and its class count."""
    if check.args.data_root is not None:
        train = check.args.data_root / "train"
        classes = sorted(p for p in train.iterdir() if p.is_dir()) if train.is_dir() else []
        return check.args.data_root, max(len(classes), 1)  # a missing folder: train.py says so
    if check.root is None:
        from benchmarks.input_pipeline import write_jpegs

        root, plan = check.work / "data", check.plan
        for c in range(plan.classes):
            write_jpegs(root / "train" / f"class{c}", plan.train_per_class, 500, 375, seed=c, grain=40)
            write_jpegs(root / "val" / f"class{c}", plan.val_per_class, 500, 375, seed=1000 + c, grain=40)
        check.root = root
    return check.root, check.plan.classes


def step_train(check: Check) -> tuple[dict, str]:
    root, classes = data_root(check)
    run_dir = check.work / "train"
    overrides = [*check.plan.train_overrides, f"data.root={root}", f"data.num_classes={classes}",
                 f"hydra.run.dir={run_dir}"]  # fmt: skip
    log = run_logged(check, "train", ["train.py", *overrides], check.plan.train_timeout)
    results = json.loads((run_dir / "results.json").read_text())
    check.checkpoint = str(run_dir / "last.pt")
    figures = {key: results.get(key) for key in ("arch", "epochs", "global_batch", "amp", "top1_err", "top5_err",
                                                 "train_images_per_s", "val_images_per_s", "n_val_images",
                                                 "skipped_images", "wall_seconds")}  # fmt: skip
    figures["overrides"] = overrides
    figures["generated_data"] = check.args.data_root is None
    summary = (f"tv_v1 {figures['arch']}, {figures['epochs']} epochs: {_num(figures['train_images_per_s'])} img/s "
               f"(last epoch), top-1 err {_num(figures['top1_err'], '.1f')}%")  # fmt: skip
    return figures, summary + (" (chance: generated images)" if figures["generated_data"] else "") + (f"; log {log}")


def _num(value, spec: str = ".0f") -> str:
    return "?" if value is None else format(value, spec)


ERROR_LINE = re.compile(r"^(\S+: )?error: |^[\w.]*(Error|Exception)\b")  # train.py's one line, a traceback's last


def run_logged(check: Check, name: str, command: list[str], timeout: float) -> str:
    """Run ``python <command>`` from the repository root in its own session, stdout and stderr to
    ``<out>/<name>.log``; its last lines printed. Past ``timeout`` the whole group is killed. Raises
    :class:`StepFailed` with the command's last error line unless it exits 0."""
    log = check.out / f"{name}.log"
    args = [interpreter(), "-u", *command]  # -u: the log has every line up to a crash
    with open(log, "w") as f:
        f.write("$ " + shlex.join(args) + "\n")
        f.flush()
        proc = subprocess.Popen(args, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # its loader workers too
            proc.wait()
    lines = log.read_text(errors="replace").splitlines()
    print("\n".join(lines[-12:]), flush=True)
    if rc != 0:
        errors = [line for line in lines if ERROR_LINE.match(line)] or [line for line in lines if line.strip()]
        reason = errors[-1].strip() if errors else "no output"
        what = f"timed out after {timeout:.0f} s" if rc is None else f"exited with status {rc}"
        raise StepFailed(f"{command[0]} {what}: {reason} (log {log.name})", summary=f"log {log.name}")
    return log.name
