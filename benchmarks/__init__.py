"""Timing scripts, run as modules from a checkout (not installed): ``python -m benchmarks`` runs
them all, ``python -m benchmarks.<name>`` one: model_step, input_pipeline, decode_alternatives,
end_to_end (with baseline_loops, the plain loops it compares with), shards; gpu and gpu_check on
a CUDA device. What they measured, and when: docs/benchmarks.md."""

import json
from pathlib import Path


def save_result(result: dict, out: Path) -> None:
    """Write one benchmark's result as JSON (results/ is gitignored) and say where."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"saved {out}")
