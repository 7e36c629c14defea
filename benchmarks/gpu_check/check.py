"""One run of the check: its options, plan and folders, each step's result (and the exceptions a
step ends with), report.json and summary.md; and the small helpers the steps share."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

import torch

from benchmarks.gpu_check.plan import make_plan

REPO = Path(__file__).resolve().parents[2]


class StepFailed(Exception):
    """The step ran and a check failed (or it could not run): its figures are kept."""

    status = "fail"

    def __init__(self, message: str, figures: dict | None = None, summary: str = ""):
        super().__init__(message)
        self.figures, self.summary = figures or {}, summary


class Inconclusive(StepFailed):
    status = "inconclusive"


class Skipped(StepFailed):
    status = "skipped"


@dataclass
class StepResult:
    status: str = "pending"  # pending | running | ok | fail | inconclusive | skipped
    seconds: float | None = None
    summary: str = ""
    figures: dict = field(default_factory=dict)
    error: str | None = None
    log: str | None = None  # a file beside the report


class Check:
    """One run of the check: its options, plan, folders, results, and what steps hand on."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.plan = make_plan(args.device, args.quick)
        self.device = torch.device(args.device)
        self.out: Path = args.out
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="gpu_check-"))
        self.results = {name: StepResult() for name in args.steps}
        self.started = datetime.now().astimezone()
        self.clock = time.perf_counter()
        self.env: dict = {}
        self.checkpoint: str | None = args.weights
        self.root: Path | None = None  # the generated ImageNet-layout folder (train.data_root)
        self.parity: dict[str, tuple] = {}  # parity.parity_batch's batches, by interpolation

    @property
    def ok(self) -> bool:
        return all(result.status == "ok" for result in self.results.values())

    def write(self, finished: bool = False) -> None:
        """report.json and summary.md as they stand (rewritten after every step)."""
        report = {
            "command": ["python", "-m", "benchmarks.gpu_check", *sys.argv[1:]],
            "device": self.args.device,
            "quick": self.args.quick,
            "started": self.started.isoformat(timespec="seconds"),
            "finished": datetime.now().astimezone().isoformat(timespec="seconds") if finished else None,
            "seconds": time.perf_counter() - self.clock,
            "ok": self.ok,
            "env": self.env,
            "plan": asdict(self.plan),
            "steps": {name: asdict(result) for name, result in self.results.items()},
        }
        _write_atomically(self.out / "report.json", json.dumps(report, indent=2, default=str) + "\n")
        _write_atomically(self.out / "summary.md", self.summary(report))

    def summary(self, report: dict) -> str:
        env = self.env
        where = env.get("device_name", self.args.device)
        versions = ", ".join(f"{k} {env[k]}" for k in ("torch", "torchvision", "cuda", "cudnn") if env.get(k))
        failed = [name for name, r in self.results.items() if r.status not in ("ok", "pending", "running")]
        state = ("in progress" if report["finished"] is None
                 else "every step ok" if self.ok else f"not ok: {', '.join(failed)}")  # fmt: skip
        lines = [
            f"# GPU check: {where}",
            "",
            f"{self.started:%Y-%m-%d %H:%M %Z}; {versions}; {env.get('cpu_cores', '?')} CPU cores. "
            f"`{' '.join(report['command'])}`{' (quick: small, uncompiled; figures are a smoke run)' if self.args.quick else ''}. "  # noqa: E501
            f"{report['seconds']:.0f} s, {state}.",
            "",
            "| step | status | key figures | seconds |",
            "|---|---|---|---|",
        ]
        for name, r in self.results.items():
            seconds = f"{r.seconds:.1f}" if r.seconds is not None else ""
            lines.append(f"| {name} | {r.status} | {_cell(r.summary)} | {seconds} |")
        problems = [(name, r) for name, r in self.results.items() if r.error]
        if problems:
            lines += ["", "## Not ok", ""]
            for name, r in problems:
                lines.append(f"- **{name}** ({r.status}): {r.error}")
        return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def item_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the JPEG header."""
    from data.decode import image_size

    return image_size(data)
