"""The files a command writes where ``out=`` says: checked before any work (:func:`out_file`,
:func:`writable_file`, :func:`writable_folder`), written atomically (:func:`write_json`); a bad path is
one :class:`resnet.config.ConfigError` line. Detection (a ranking), re-gridding (a checkpoint),
export (an ONNX file), evaluation's results file and the folders of tables use them."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .config import ConfigError
from .engine.runlog import write_json as write_json_file


def out_file(value: str, suffix: str, example: str) -> Path:
    """``out=value`` as a path, checked before any work: a ``suffix`` file in a writable folder
    (made on writing if missing). ``example``: the override to suggest instead."""
    path = Path(value).expanduser()
    if path.suffix.lower() != suffix or path.is_dir():
        raise ConfigError(f"out={value} must name a {suffix} file, e.g. {example}")
    return writable_file(path, f"out={value}", example)


def writable_file(path: Path, given: str, example: str) -> Path:
    """``path``, checked before any work to be a file this process can write (or append to), in a
    folder it can make: nothing is written to it. ``given``: the setting as the user typed it
    (``results_file=...``), ``example``: what to type instead."""
    if path.is_dir():
        raise ConfigError(f"{given} is a folder, not a file; choose a file, e.g. {example}")
    if path.exists():
        try:  # opened for appending and closed: the file and its time stay as they were
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
        except OSError as err:
            raise ConfigError(
                f"{given}: cannot write {path} ({err.strerror}); choose another file, e.g. {example}"
            ) from None
        return path
    writable_folder(path.parent, given, example, make=False)
    return path


def writable_folder(folder: Path, given: str, example: str, make: bool = True) -> Path:
    """``folder`` checked before any work to be one this process can write in: made (``make``), or
    its nearest existing parent, where it would be made, probed with a real file (root passes
    ``os.access`` even where it cannot write: a read-only mount, /proc)."""
    there = next(p for p in (folder, *folder.parents) if p.exists())
    if not there.is_dir():
        raise ConfigError(f"{given}: {there} is a file, not a folder; choose another path, e.g. {example}")
    try:
        if make:
            folder.mkdir(parents=True, exist_ok=True)
            there = folder
        with tempfile.NamedTemporaryFile(dir=there, prefix=".write-check.", suffix=".probe"):
            pass
    except OSError as err:
        raise ConfigError(
            f"{given}: cannot write in {there} ({err.strerror}); choose a writable folder, e.g. {example}"
        ) from None
    return folder


def write_json(path: Path, record: dict) -> None:
    """``record`` as indented JSON, to a temporary file beside ``path`` then renamed: never half a file.
    A failed write is a :class:`ConfigError` (the ranking was printed already)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_file(path, record)
    except OSError as err:  # the folder checked before the work went away, or the disk is full
        path.with_suffix(path.suffix + ".tmp").unlink(missing_ok=True)
        raise ConfigError(f"cannot write {path}: {err.strerror or err}; choose another out=...json") from None
