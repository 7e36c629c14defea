"""Timing scripts, run as modules from a checkout (not installed): ``python -m benchmarks`` runs
them all, ``python -m benchmarks.<name>`` one: model_step, input_pipeline, decode_alternatives,
end_to_end (with baseline_loops, the plain loops it compares with), shards; gpu and gpu_check on
a CUDA device. What they measured, and when: docs/benchmarks.md."""

import json
import os
import sys
from pathlib import Path


def interpreter() -> str:
    """The Python that benchmarks start their commands with: ``$PYTHON_EXEC`` where it is set (the
    variable torchrun reads for the same purpose), else this one."""
    return os.environ.get("PYTHON_EXEC") or sys.executable


def save_result(result: dict, out: Path) -> None:
    """Write one benchmark's result as JSON (results/ is gitignored) and say where."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"saved {out}")


def print_ratios(result: dict, width: int = 40, digits: int = 4, value_width: int = 12) -> None:
    """Each of ``result["ratios"]`` on a line, with its goal where ``result["goals"]`` has one."""
    for label, value in result["ratios"].items():
        goal = result["goals"].get(label)
        print(f"{label:<{width}}{value:>{value_width}.{digits}f}" + (f"   goal {goal}" if goal else ""))
