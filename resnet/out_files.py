"""The files a command writes where ``out=`` says: checked before any work (:func:`out_file`),
written atomically (:func:`write_json`); a bad path is one :class:`resnet.config.ConfigError` line.
Detection (a ranking), re-gridding (a checkpoint) and export (an ONNX file) use them."""

from __future__ import annotations

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
    folder = next(p for p in (path.parent, *path.parent.parents) if p.exists())
    if not folder.is_dir():
        raise ConfigError(f"out={value}: {folder} is a file, not a folder; choose another path, e.g. {example}")
    try:  # a real file, not os.access: root passes that check even where it cannot write (/proc, /sys)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as err:
        raise ConfigError(
            f"out={value}: cannot write in {folder} ({err.strerror}); choose a writable folder, e.g. {example}"
        ) from None
    return path


def write_json(path: Path, record: dict) -> None:
    """``record`` as indented JSON, to a temporary file beside ``path`` then renamed: never half a file.
    A failed write is a :class:`ConfigError` (the ranking was printed already)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_file(path, record)
    except OSError as err:  # the folder checked before the work went away, or the disk is full
        path.with_suffix(path.suffix + ".tmp").unlink(missing_ok=True)
        raise ConfigError(f"cannot write {path}: {err.strerror or err}; choose another out=...json") from None
