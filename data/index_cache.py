"""An image folder's listing, kept between runs: :func:`load_scan` lists ImageNet's 1.28 M
files once, and a requeued job, a later run and every rank read the result instead.

Where: beside the folder, as ``.<name>.index.npz`` in its parent, when that is writable (every
run on the data then shares it), else in ``cache_dir`` (the run dir: a requeued job finds it
there). The file is not inside the folder, whose mtime it would change.

Valid while the folder's real path, the listing rules (:data:`VERSION`, the image extensions)
and the mtime of every directory listed are what they were: adding, removing or renaming a
file or a folder anywhere below the root changes its directory's mtime. A directory modified
less than :data:`RACY_S` before the listing began could change again within the same mtime
tick, unseen (timestamps are 1 s apart on some file systems, 2 s on FAT; git calls such an
entry "racy"), so such a listing is not kept. Under DDP rank 0 lists and keeps it, and the
other ranks read it (:func:`rank_zero_first`).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import time
import zipfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch.distributed as dist

from .file_index import FileIndex, pack, unpack
from .folder_scan import IMAGE_EXTENSIONS, FolderScan, folder_prefix, scan_folder

FORMAT = "resnet-padding-folder-index"
VERSION = 2  # of the listing rules and the file's layout: a change makes every cache stale
RACY_S = 2.0  # a directory modified this soon before its listing is not trusted to show a later change
T = TypeVar("T")


def cache_paths(root: str | Path, cache_dir: str | Path | None = None) -> list[Path]:
    """Where the listing of ``root`` may be kept, in the order they are tried."""
    real = Path(os.path.realpath(root))
    paths = [real.parent / f".{real.name}.index.npz"] if real.name else []
    if cache_dir is not None:
        digest = hashlib.sha1(os.fsencode(real)).hexdigest()[:12]
        paths.append(Path(cache_dir) / f"index-{real.name or 'root'}-{digest}.npz")
    return paths


def load_scan(
    root: str | Path, cache_dir: str | Path | None = None, log: Callable[[str], None] | None = print
) -> FolderScan:
    """The listing of ``root`` from its cache when that is still valid, else listed now and
    kept; ``log`` gets one line saying which, and one naming any directory link skipped."""
    root = Path(root)
    start = time.perf_counter()
    candidates = cache_paths(root, cache_dir)
    why = "no cached index"
    for path in candidates:
        found = _read(path, root)
        if isinstance(found, FolderScan):
            _say(log, found, f"reused {path} ({time.perf_counter() - start:.1f} s)")
            return found
        if path.exists():
            why = found
    began = time.time_ns()
    scan = scan_folder(root)
    listed = time.perf_counter() - start
    kept = _write(scan, began, candidates)
    _say(log, scan, f"rebuilt in {listed:.1f} s ({why}); {kept}")
    return scan


def _say(log: Callable[[str], None] | None, scan: FolderScan, what: str) -> None:
    if log is None:
        return
    log(f"index of {scan.root}: {len(scan.samples):,} images in {len(scan.classes):,} classes, {what}")
    for line in scan.lines():
        log(line)


def _relative(scan: FolderScan, folder: str) -> str:
    return "" if folder == str(scan.root) else folder[len(scan.samples.prefix) :]


def _meta(root: Path) -> dict:
    """What a kept listing records of how it was made: valid only while all of it is unchanged."""
    return {"format": FORMAT, "version": VERSION, "root": os.path.realpath(root), "extensions": list(IMAGE_EXTENSIONS)}


def _write(scan: FolderScan, began_ns: int, candidates: list[Path]) -> str:
    """Keep ``scan`` in the first writable candidate; what happened, as words for the log line."""
    mtimes = np.array([os.stat(folder).st_mtime_ns for folder in scan.folders], dtype=np.int64)
    if not candidates:
        return "not kept: no writable place beside the folder and no cache dir"
    if mtimes.max() > began_ns - RACY_S * 1e9:
        return f"not kept: a directory was modified less than {RACY_S:g} s before the listing"
    arrays = {
        "meta": np.frombuffer(json.dumps(_meta(scan.root)).encode(), dtype=np.uint8),
        "names": scan.samples.names,
        "starts": scan.samples.starts,
        "labels": scan.samples.labels,
        "mtimes": mtimes,
    }
    for table, values in (
        ("classes", scan.classes),
        ("folders", [_relative(scan, f) for f in scan.folders]),
        ("links", scan.links),
        ("special", scan.special),
    ):
        arrays[f"{table}_names"], arrays[f"{table}_starts"] = pack(values)
    failed = []
    for path in candidates:
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                np.savez(f, **arrays)
            os.replace(tmp, path)  # readers see the old file or the new, never half of one
            return f"saved to {path}"
        except OSError as err:
            with contextlib.suppress(OSError):  # a read-only file system refuses even this: try the next place
                tmp.unlink(missing_ok=True)
            failed.append(f"{path.parent} ({err.strerror or err})")
    return f"not kept: cannot write to {', '.join(failed)}"


def _read(path: Path, root: Path) -> FolderScan | str:
    """The listing kept at ``path`` if it is of ``root`` and still valid, else why not."""
    try:
        with np.load(path, allow_pickle=False) as saved:
            arrays = {key: saved[key] for key in saved.files}
        meta = json.loads(arrays["meta"].tobytes())
    except FileNotFoundError:
        return "no cached index"
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
        return f"{path} unreadable: {type(err).__name__}"
    if meta != _meta(root):
        return f"{path} is of another folder or version"

    def table(name: str) -> list[str]:
        return unpack(arrays[f"{name}_names"], arrays[f"{name}_starts"])

    prefix = folder_prefix(root)
    folders = [str(root) if rel == "" else prefix + rel for rel in table("folders")]
    for folder, mtime in zip(folders, arrays["mtimes"].tolist()):
        try:
            changed = os.stat(folder).st_mtime_ns != mtime
        except OSError:
            changed = True
        if changed:
            return f"{folder} changed since"
    samples = FileIndex(prefix, arrays["names"], arrays["starts"], arrays["labels"])
    return FolderScan(root, table("classes"), samples, folders, table("links"), table("special"))


BUILD_WAIT = timedelta(hours=3)  # how long the other ranks wait for rank 0's listing (a cold ImageNet on NFS)
_builds = itertools.count()  # this process's calls of rank_zero_first: the same sequence on every rank


def rank_zero_first(build: Callable[[], T]) -> T:
    """``build()`` on rank 0, then on the other ranks, which find what it cached (one listing
    of the file system, not one per rank). Alone, or without a process group: ``build()``.

    The others wait on a key of the job's store, up to :data:`BUILD_WAIT`, not at a barrier: a
    collective waits at most the run's ``dist_timeout`` (minutes), and a first listing of a large
    folder on a network file system can take longer."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return build()
    key = f"data/index_built/{next(_builds)}"
    store = _job_store()
    first = dist.get_rank() == 0
    try:
        if first:
            return build()
    finally:  # rank 0 signals also when it failed: the others then fail the same way, rather than wait for ever
        if store is None:
            dist.barrier()
        elif first:
            store.set(key, "1")
        else:
            store.wait([key], BUILD_WAIT)
    return build()


def _job_store():
    """The default process group's store (torch has no public accessor); None where it cannot be had."""
    try:
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):
        return None
