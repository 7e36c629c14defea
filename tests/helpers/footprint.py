"""What a test session leaves on disk, removed (tests/conftest.py's hooks use these): the shared
folders no failed test used, and the run folders SLURM test jobs write in the checkout."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def paths_among(values: Iterable) -> set[Path]:
    """The paths among a test's arguments, and inside its tuples, lists and dicts."""
    found = set()
    for value in values:
        inner = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else [value]
        found.update(Path(os.fspath(v)) for v in inner if isinstance(v, (str, os.PathLike)) and os.sep in os.fspath(v))
    return found


def remove_unkept(basetemp: Path, kept: Iterable[Path]) -> list[Path]:
    """Remove each folder of ``basetemp`` that holds none of ``kept``; the removed, sorted."""
    base = basetemp.resolve()
    tops = {rel.parts[0] for p in kept if (rel := _relative(Path(p).resolve(), base)) is not None and rel.parts}
    removed = sorted(p for p in basetemp.iterdir() if p.is_dir() and not p.is_symlink() and p.name not in tops)
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def _relative(path: Path, base: Path) -> Path | None:
    return path.relative_to(base) if path.is_relative_to(base) else None


def remove_run_dirs(folder: Path, which) -> None:
    """Remove the entries of ``folder`` that ``which`` picks, then ``folder`` and its parents up to
    the checkout while they are empty."""
    if folder.is_dir():
        for path in [p for p in folder.iterdir() if which(p)]:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    while folder != REPO and folder.is_dir() and not any(folder.iterdir()):
        try:
            folder.rmdir()
        except OSError:  # written to meanwhile
            return
        folder = folder.parent
