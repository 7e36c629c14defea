"""Timing scripts, run as modules: ``python -m benchmarks.model_step``."""

import json
from pathlib import Path


def save_result(result: dict, out: Path) -> None:
    """Write one benchmark's result as JSON (results/ is gitignored) and say where."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"saved {out}")
