"""Why a checkpoint cannot be used, in one line that names it and says what to do instead.

``torch.load`` on a damaged file raises almost anything (``RuntimeError`` from the zip
reader, ``EOFError``, ``UnpicklingError``, ``KeyError``, ``UnicodeDecodeError``, ...),
with messages that describe its internals ("failed finding central directory") over
several lines. :func:`unreadable` tells the user what the file is instead (cut short,
not a torch file, a zip of something else, pickled code) from the file's first bytes
and the error, and appends torch's own first line, cut short, for the record.
``model.load_state_dict`` lists every differing key on a line of its own;
:func:`key_problems` counts them and names a few.

The two exceptions are here too; the weights loaders (:mod:`resnet.weights`) use these messages as well.
"""

from __future__ import annotations

import os
import pickle
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path

import torch

ZIP_MAGIC = b"PK\x03\x04"  # torch.save's format since 1.6 is a zip archive
PICKLE_MAGIC = b"\x80"  # the legacy format (and a plain pickle) opens with the PROTO opcode
# What torch.save's legacy (pre-1.6) format pickles first: its magic number, as a LONG1 opcode.
LEGACY_MAGIC = b"\x8a\x0a" + torch.serialization.MAGIC_NUMBER.to_bytes(10, "little")
SAID_LIMIT = 150  # characters of torch's own message kept in ours
SHOWN_KEYS, SHOWN_SHAPES = 3, 2  # how many names a key or shape mismatch shows
AGAIN = "copy it again, or pass another checkpoint (train.py keeps <run dir>/last.pt)"
TORCH_FILE = "pass a file written by torch.save, e.g. a train.py <run dir>/last.pt"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class CheckpointError(ValueError):
    """A file that is not a usable checkpoint (or weights file). The message is one line that
    names the file and says what to do instead. A ValueError, so that callers reporting
    ValueErrors in one line (train.py's resume, eval.py's weights=) keep doing so."""


class CheckpointNotFound(CheckpointError, FileNotFoundError):
    """No file at the path given; a FileNotFoundError too, as torch.load's own was."""


def check_before_reading(path: str | os.PathLike) -> None:
    """Raise when ``path`` cannot be a checkpoint before it is even opened: missing, a directory, or empty."""
    path = Path(path)
    if not path.exists():
        raise CheckpointNotFound(f"no checkpoint at {path}; check the path (train.py writes <run dir>/last.pt)")
    if path.is_dir():
        raise CheckpointError(f"{path} is a directory, not a checkpoint; pass the file in it, e.g. {path / 'last.pt'}")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path} is empty (0 bytes): its save or copy did not finish; {AGAIN}")


def unreadable(path: object, err: BaseException) -> str:
    """What ``path`` is, given that ``torch.load(path, weights_only=True)`` raised ``err``."""
    said = f"(torch.load: {error_line(err)})"
    if isinstance(err, (PermissionError, FileNotFoundError, IsADirectoryError)):  # not EINVAL: a seek past a cut end
        return f"cannot read {path} ({err.strerror or err}); check that it exists and that you may read it"
    refused = isinstance(err, pickle.UnpicklingError) and "Weights only load failed" in str(err)
    if refused and "Unsupported operand" not in str(err):  # an object refused, not bytes that are no pickle at all
        return (
            f"refusing to load {path}: it contains pickled objects, not only tensors and plain data, and "
            "unpickling them could run arbitrary code; if you trust the file, load it with "
            f"torch.load(weights_only=False) and re-save its weights with resnet.checkpoint.save_checkpoint {said}"
        )
    head = _head(path)
    if head.startswith(ZIP_MAGIC) and _is_foreign_zip(path):
        return f"{path} is a zip archive but not a torch checkpoint (no data.pkl in it); {TORCH_FILE} {said}"
    if isinstance(err, EOFError):
        return f"{path} is cut short ({_size(path)}): its save or copy did not finish; {AGAIN} {said}"
    if head.startswith(ZIP_MAGIC) and not _is_zip(path):
        return (
            f"{path} is cut short or damaged ({_size(path)}, no zip directory at its end): its save or copy "
            f"did not finish; {AGAIN} {said}"
        )
    if head and not head.startswith((ZIP_MAGIC, PICKLE_MAGIC)):
        return f"{path} is not a torch checkpoint (it starts with {head[:12]!r}); {TORCH_FILE} {said}"
    if head.startswith(PICKLE_MAGIC) and not _is_legacy_torch(head):
        return f"{path} is not a PyTorch checkpoint: a plain pickle, not written by torch.save; {TORCH_FILE} {said}"
    return f"{path} is corrupt ({_size(path)}): torch cannot read it; {AGAIN} {said}"


def error_line(err: BaseException) -> str:
    """'RuntimeError: <the informative first line>', at most :data:`SAID_LIMIT` characters.

    For torch's ``weights_only`` refusal that is the unpickler's own reason, not the
    paragraph about PyTorch 2.6's defaults that precedes it."""
    text = _ANSI.sub("", str(err))
    text = text.split("WeightsUnpickler error:", 1)[-1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__
    return line if len(line) <= SAID_LIMIT else line[: SAID_LIMIT - 3] + "..."


def describe(obj: object) -> str:
    """'a tensor of shape (3,)', 'a list of 2 items', 'a str': what a file held instead."""
    if isinstance(obj, torch.Tensor):
        return f"a tensor of shape {tuple(obj.shape)}"
    if isinstance(obj, (list, tuple, dict)):
        return f"a {type(obj).__name__} of {len(obj)} item{'s' if len(obj) != 1 else ''}"
    return f"a {type(obj).__name__}"


def key_problems(want: Mapping[str, tuple], got: Mapping[str, tuple]) -> str:
    """'4 missing keys (a, b, c and 1 more), 2 shape mismatches (fc.weight [3, 64] vs the
    model's [10, 64], ...)' from key -> shape maps; empty when ``got`` fits ``want``."""
    missing = [key for key in want if key not in got]
    unexpected = [key for key in got if key not in want]
    wrong = [key for key in want if key in got and want[key] != got[key]]
    shown = [f"{printable(key)} {list(got[key])} vs the model's {list(want[key])}" for key in wrong[:SHOWN_SHAPES]]
    parts = (
        _few("missing key", missing, SHOWN_KEYS),
        _few("unexpected key", unexpected, SHOWN_KEYS),
        _few("shape mismatch", wrong, SHOWN_SHAPES, shown, plural="shape mismatches"),
    )
    return ", ".join(part for part in parts if part)


def printable(text: str) -> str:
    """``text``, or its repr when a newline or another control character would break the line."""
    return text if text.isprintable() else repr(text)


def _few(what: str, items: list[str], limit: int, shown: list[str] | None = None, plural: str = "") -> str:
    """'40 missing keys (a, b, c and 37 more)': how many, and a few by name."""
    if not items:
        return ""
    shown = (shown or [printable(item) for item in items[:limit]])[:limit]
    more = f" and {len(items) - len(shown)} more" if len(items) > len(shown) else ""
    name = what if len(items) == 1 else plural or f"{what}s"
    return f"{len(items)} {name} ({', '.join(shown)}{more})"


def _head(path: object) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(32)
    except (OSError, TypeError):  # gone meanwhile, or a file-like object rather than a path
        return b""


def _is_legacy_torch(head: bytes) -> bool:
    """Does a pickle stream open with torch's magic number (the legacy format), after its PROTO
    opcode and, from pickle protocol 4 on, a FRAME opcode? A plain ``pickle.dump`` does not."""
    body = head[2:]
    if body[:1] == b"\x95":  # FRAME and its 8-byte length
        body = body[9:]
    return body.startswith(LEGACY_MAGIC)


def _is_zip(path: object) -> bool:
    """Does ``path`` end with a zip archive's directory (a zip cut short does not)?"""
    try:
        return zipfile.is_zipfile(path)
    except Exception:
        return False


def _is_foreign_zip(path: object) -> bool:
    """A complete zip archive without torch's ``<name>/data.pkl`` record."""
    try:
        with zipfile.ZipFile(path) as archive:
            return not any(name.endswith("data.pkl") for name in archive.namelist())
    except Exception:  # a damaged archive raises BadZipFile, NotImplementedError ("zip file version"), ...
        return False


def _size(path: object) -> str:
    try:
        return f"{os.path.getsize(path):,} bytes"
    except (OSError, TypeError):
        return "size unknown"
