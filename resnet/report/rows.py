"""Evaluation results: one JSON object per line, appended safely by every run, read back here.

The file is the stable record the tables are built from, so every row carries its
whole protocol (docs/padding.md: "every result row records its protocol"): the
weights and where they came from, the padding they were trained with and the one
they ran under, the resize/crop/interpolation/preprocessing, the crop count, and
the code version. This is the one reader and writer of that file.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from ..padding import BLUR_SITES, resolve_padding

try:
    import fcntl
except ImportError:
    fcntl = None

# Every row has exactly these keys, in this order. Errors are in percent.
ROW_KEYS = (
    "arch",  # our architecture name (resnet.list_archs())
    "weights",  # the weights= value as given: a path, torchvision:<Enum>.<TAG>, timm:<name>, keras:<file>
    "weights_source",  # checkpoint | torchvision | timm | keras | fbtorch | tensornets
    "ema",  # true: a checkpoint's EMA weights (eval.py ema=true), not the weights themselves
    "trained_padding",  # the scheme the weights were trained with / natively use (its name; grid[a,b]: several)
    "padding_name",  # the scheme evaluated under, its Padding.name: "asymmetric", "tf_same[stem_pool=symmetric]"
    "padding",  # {stem_conv, stem_pool, stem_pool_value, block_conv} evaluated under, and *_blur: true where on
    "input_size",  # side of the square the network sees (px); equals crop
    "resize",  # shorter side after resizing, before cropping (px)
    "crop",  # side of each crop (px)
    "interpolation",  # bilinear | bicubic (antialiased)
    "preprocessing",  # torch | caffe | tf (data.normalize)
    "amp",  # none | bf16 | fp16: the autocast dtype the forward ran under
    "crops",  # 1 (centre), 2 (centre and its flip) or 10 (4 corners + centre and their flips); softmax averaged
    "dataset",  # data.name: imagenet | imagefolder | fashion_mnist
    "top1_err",  # %
    "top5_err",  # %
    "n_images",  # images evaluated, over all processes, each exactly once
    "skipped_images",  # unreadable files left out, over all processes (never silently: counted here)
    "date",  # ISO 8601, UTC
    "versions",  # {"torch": ..., "torchvision": ..., "timm": ...} (library_versions())
    "git_commit",  # git_commit()
)
WEIGHTS_SOURCES = ("checkpoint", "torchvision", "timm", "keras", "fbtorch", "tensornets")


def check_row(row: Mapping) -> None:
    """Fail naming the missing and unexpected keys, so that no row silently lacks its protocol."""
    missing, extra = [k for k in ROW_KEYS if k not in row], sorted(set(row) - set(ROW_KEYS))
    if missing or extra:
        raise ValueError(f"results row has missing key(s) {missing} and unexpected key(s) {extra}; see ROW_KEYS")
    if row["weights_source"] not in WEIGHTS_SOURCES:
        raise ValueError(f"weights_source {row['weights_source']!r} is not one of {', '.join(WEIGHTS_SOURCES)}")
    if row["crops"] not in (1, 2, 10):
        raise ValueError(f"crops must be 1, 2 or 10, got {row['crops']!r}")


def append_row(path: str | os.PathLike, row: Mapping) -> Path:
    """Append ``row`` as one JSON line to ``path`` (created with its folders if needed).

    The line goes out in one ``write`` on an ``O_APPEND`` descriptor, under an exclusive
    ``flock``, then ``fsync``: concurrent evaluations never interleave their lines, and a
    row that was reported written survives a crash.
    """
    check_row(row)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps({k: row[k] for k in ROW_KEYS}) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:  # Windows has none: O_APPEND's single write is all there is
            fcntl.flock(fd, fcntl.LOCK_EX)
        written = os.write(fd, line)
        if written != len(line):  # only a full disk does this; say so instead of leaving half a row
            raise OSError(f"wrote {written} of {len(line)} bytes of a results row to {path}")
        os.fsync(fd)
    finally:
        os.close(fd)  # also releases the lock
    return path


def read_rows(path: str | os.PathLike) -> list[dict]:
    """Every row of a results file, in the order written. A missing file has no rows.

    An unterminated last line (a write cut short) is skipped; a corrupt line elsewhere
    fails naming its line number.
    """
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text().split("\n")
    complete, tail = lines[:-1], lines[-1]  # tail is "" when the file ends with a newline
    rows = []
    for number, line in enumerate(complete, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number} is not a JSON row ({err.msg})") from None
    if tail.strip():
        with contextlib.suppress(json.JSONDecodeError):  # a write cut short: the rows before it count
            rows.append(json.loads(tail))
    return rows


PROTOCOL_FIELDS = ("dataset", "input_size", "resize", "crop", "interpolation", "preprocessing", "n_images")


def scheme_label(row: Mapping) -> str:
    """The scheme's name (:attr:`resnet.padding.Padding.name`: ``asymmetric``,
    ``tf_same[stem_pool=symmetric]``, ``symmetric+blur(block_conv)``); a row written before names
    said their sites (``custom``) gets its name from its sites."""
    if row["padding_name"] != "custom":
        return row["padding_name"]
    return resolve_padding(dict(row["padding"])).name


EMA_MARK = " (EMA)"


def weights_label(row: Mapping) -> str:
    """The weights= value, one file one name (:func:`weights_name`), marked ``(EMA)`` for a
    checkpoint's EMA weights: they are other weights."""
    name = weights_name(str(row["weights"]))
    return f"{name}{EMA_MARK}" if row.get("ema") else name


def weights_name(weights: str) -> str:
    """One name for one file however it was typed (``./x/last.pt``, ``/home/me/x/last.pt``,
    ``checkpoint:x/last.pt``): a file that is here is named by its real path, relative to the
    current folder where it lies below it (``x/last.pt``), else absolute; a ``keras:`` (any
    source's) file keeps its prefix. A row records the path as its user typed it, from a folder
    it does not record: a relative path is looked for from the current folder, and one not
    found there, or a hub name (``timm:resnet50.a1_in1k``), stays as written."""
    from ..weights import WeightsError, parse_weights

    try:
        spec = parse_weights(weights)
        found = spec.path.resolve() if spec.path is not None and spec.path.is_file() else None
    except (WeightsError, OSError):  # no weights= value, a name too long or unreadable here: not a file here
        found = None
    if found is None:
        return weights
    here = Path.cwd().resolve()
    named = found.relative_to(here).as_posix() if found.is_relative_to(here) else str(found)
    return named if spec.source == "checkpoint" else f"{spec.source}:{named}"


def run_labels(keys: Sequence[str], weights: Sequence[str]) -> list[str]:
    """How a table or chart names each run, the one place runs are named (the cross matrix's rows, the bar
    chart's): ``keys[i]`` (a scheme, or ``arch, trained scheme``) where its weights (``weights[i]``, a
    :func:`weights_label`) are the only ones under that key, else ``key (run name)``: by the seed its run
    records (:func:`seed_names`: ``symmetric (seed 1)``), else by its path (:func:`run_names`:
    ``symmetric (12-18-10/0)``, ``symmetric (12-18-10, EMA)``)."""
    groups: dict[str, dict[str, None]] = {}  # each key's distinct weights, in order
    for key, w in zip(keys, weights, strict=True):
        groups.setdefault(key, {})[w] = None
    names = {key: dict(zip(group, seed_names(list(group)) or run_names(list(group))))
             for key, group in groups.items() if len(group) > 1}  # fmt: skip
    return [f"{key} ({names[key][w]})" if key in names else key for key, w in zip(keys, weights)]


def seed_names(weights: Sequence[str]) -> list[str] | None:
    """``seed 1``, ``seed 2``, ... (``seed 1, EMA`` for EMA weights) where every file of
    ``weights`` (:func:`weights_label` values) is here and records the seed its run trained
    with, and no two files share one; None otherwise (a result row does not hold the seed, so
    rows read where their checkpoints are not are named by :func:`run_names`)."""
    files = [w.removesuffix(EMA_MARK) for w in weights]
    seeds = {file: recorded_seed(Path(file)) for file in dict.fromkeys(files)}
    if None in seeds.values() or len(set(seeds.values())) < len(seeds):
        return None
    return [f"seed {seeds[file]}" + (", EMA" if w.endswith(EMA_MARK) else "") for file, w in zip(files, weights)]


def recorded_seed(checkpoint: Path) -> int | None:
    """The ``seed`` the train.py run that wrote ``checkpoint`` was started with: from Hydra's
    record beside it (``.hydra/config.yaml``), else from the checkpoint's own ``config`` (read
    without running pickled code, its tensors left on disk); None where neither says."""
    from ..checkpoint.read import read_torch_file
    from ..job.latest_run import hydra_record

    try:
        seed = (hydra_record(checkpoint.parent) or {}).get("seed")
        if seed is None and checkpoint.is_file():
            saved = read_torch_file(checkpoint, mmap=True)
            seed = ((saved.get("config") if isinstance(saved, dict) else None) or {}).get("seed")
    except Exception:  # noqa: BLE001 (not a checkpoint of ours, an unreadable record: no seed to name it by)
        return None
    return seed if type(seed) is int else None


def run_names(weights: Sequence[str]) -> list[str]:
    """Short names that tell distinct weights apart (:func:`weights_label` values), e.g.
    ``multirun/2026-11-28/12-18-10/0/last.pt``, ``.../1/last.pt`` and
    ``outputs/2026-11-28/12-18-10/last.pt`` -> ``12-18-10/0``, ``12-18-10/1``, ``12-18-10``:

    * a file name all of them share (``last.pt``) goes, and so do the folders all of them
      start with; of what is left, each takes its shortest tail that no other path ends with;
    * a number alone names a job of a Hydra sweep, not a run: its folder (the sweep's time)
      comes with it, even one all of them start with;
    * a hub name (``timm:resnet50.a1_in1k``) has no folders: it is its own name;
    * EMA weights are named as their file, then ``, EMA``.
    """
    ema = [w.endswith(EMA_MARK) for w in weights]
    paths = [tuple(w.removesuffix(EMA_MARK).replace("\\", "/").split("/")) for w in weights]
    distinct = list(dict.fromkeys(paths))
    if len(distinct) == 1:  # one file: its folder names it (results/demo/train_symmetric/last.pt)
        parts = distinct[0]
        trimmed, lead = [list(parts[:-1] if len(parts) > 1 else parts)], 0
    else:
        shared_file = len({p[-1] for p in distinct}) == 1 and all(len(p) > 1 for p in distinct)
        trimmed = [list(p[:-1]) if shared_file else list(p) for p in distinct]
        lead = 0  # folders all of them start with, leaving each at least one part
        while all(len(p) > lead + 1 for p in trimmed) and len({p[lead] for p in trimmed}) == 1:
            lead += 1
    short = {}
    for path, parts in zip(distinct, trimmed):
        others = [o for o in trimmed if o is not parts]
        size, distinct_parts = 1, len(parts) - lead  # beyond them every path reads alike
        while size < len(parts) and (
            parts[-size].isdigit() or (size < distinct_parts and any(o[-size:] == parts[-size:] for o in others))
        ):
            size += 1
        short[path] = "/".join(parts[-size:])
    return [short[p] + (", EMA" if e else "") for p, e in zip(paths, ema)]


def protocol_label(row: Mapping) -> str:
    """How the images became input, e.g. ``resize 256 → crop 224, bilinear, torch, 50000 images``
    (the dataset is a column of its own)."""
    parts = []
    if row.get("resize") is not None:
        parts.append(f"resize {row['resize']} → crop {row.get('crop')}")
    if row.get("crop") != row["input_size"]:
        parts.append(f"input {row['input_size']}")
    parts += [str(row[name]) for name in ("interpolation", "preprocessing") if row.get(name) is not None]
    if row.get("amp") not in (None, "none"):
        parts.append(f"{row['amp']} autocast")
    return ", ".join(parts) + f", {row['n_images']} images"


def _date(row: Mapping) -> datetime:
    stamp = datetime.fromisoformat(str(row["date"]).replace("Z", "+00:00"))
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)  # naive = UTC


def _evaluation_key(row: Mapping) -> tuple:
    # a blur site that is off counts as absent: rows from before the blur sites, and rows that spell it out, agree
    padding = json.dumps({k: v for k, v in row["padding"].items() if k not in BLUR_SITES or v}, sort_keys=True)
    model = (row["arch"], weights_label(row), row["weights_source"], row["trained_padding"])
    return (*model, row["padding_name"], padding, int(row["crops"]), *(row.get(f) for f in PROTOCOL_FIELDS))


def latest_rows(rows: Iterable[Mapping]) -> list[dict]:
    """One row per evaluation: the latest ``date`` wins; ties go to the later row."""
    kept: dict[tuple, tuple[datetime, dict]] = {}
    for row in rows:
        key, when = _evaluation_key(row), _date(row)
        if key not in kept or when >= kept[key][0]:
            kept[key] = (when, dict(row))
    return [row for _, row in kept.values()]


def git_commit() -> str:
    """The commit the code runs from (with '+dirty' if changed), or 'unknown'."""

    def git(*args: str) -> str:
        here = Path(__file__).resolve().parent
        return subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=5).stdout.strip()

    try:
        sha = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha + ("+dirty" if dirty else "")) if sha else "unknown"


def library_versions() -> dict[str, str]:
    """The versions a number depends on beyond the code: torch, torchvision, timm."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("torch", "torchvision", "timm"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "absent"
    return found


# The closing table each command prints: heading -> key of its results row.
TRAIN_SUMMARY = {
    "arch": "arch", "padding": "trained_padding", "dataset": "dataset", "epochs": "epochs", "weights": "weights",
    "amp": "amp", "top1_err %": "top1_err", "top5_err %": "top5_err", "val images": "n_val_images",
    "train img/s": "train_images_per_s", "wall s": "wall_seconds",
}  # fmt: skip
EVAL_SUMMARY = {
    "arch": "arch", "weights": "weights", "trained": "trained_padding", "padding": "padding_name",
    "protocol": "protocol", "crops": "crops", "dataset": "dataset", "top1_err %": "top1_err",
    "top5_err %": "top5_err", "images": "n_images", "img/s": "images_per_s",
}  # fmt: skip


# An error % as stored: float noise (0.27000000000000357) goes, and no count of up to 10^8 images changes;
# tables and charts show fewer (resnet.report.console, resnet.report.charts).
ERROR_DECIMALS = 6


def results_row(meta, dataset: str, amp: str, metrics: Mapping, **fields) -> dict:
    """A results row, ``train.py``'s (results.json) and ``eval.py``'s (:data:`ROW_KEYS`) alike:
    the architecture and the padding ``meta`` (:class:`resnet.model.ModelMeta`) ran under, the
    data, the errors of ``metrics``, when, and with which code; ``fields`` add what only one of
    them records (an ``eval.py`` row is then put in :data:`ROW_KEYS`' order by the caller).

    ``trained_padding`` is the scheme the weights were trained under: ``eval.py`` gives it; for a
    training run it is ``meta``'s preset, or ``grid[a,b]`` where ``fields`` hold the run's
    ``grid`` (each step drew one of them; ``padding_name`` is the first, the one it was
    validated under). Error percentages (``*_err``) are rounded to :data:`ERROR_DECIMALS`."""
    from ..grid import grid_name

    trained = fields.pop("trained_padding", None) or (grid_name(fields["grid"]) if fields.get("grid") else None)
    row = {
        "arch": meta.arch,
        "trained_padding": trained or meta.padding_name,
        "padding_name": meta.padding_name,
        "padding": meta.padding.as_dict(),
        "dataset": dataset,
        "amp": amp,
        "top1_err": metrics.get("top1_err"),
        "top5_err": metrics.get("top5_err"),
        **fields,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": library_versions(),
        "git_commit": git_commit(),
    }
    for key, value in row.items():
        if key.endswith("_err") and value is not None:
            row[key] = round(float(value), ERROR_DECIMALS)
    return row
