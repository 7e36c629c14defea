"""The raw ILSVRC2012 (ImageNet-1k) download, listed for the shard converter without extracting anything.

Train: ``ILSVRC2012_img_train.tar`` holds one ``<wnid>.tar`` per class, each holding that
class's ``<wnid>_<n>.JPEG``. :func:`train_samples` takes it as downloaded, with its outer
layer extracted (a folder of the 1,000 class tars) or fully extracted (``<wnid>/`` class
folders). An image inside a tar is located by its byte offset and size, and the converter
copies it from there: the 138 GiB are never extracted to disk.

Val: ``ILSVRC2012_img_val.tar`` extracts to a flat ``val/`` of 50,000
``ILSVRC2012_val_00000001.JPEG`` ...; the labels come in one of two files.

* The devkit's (``ILSVRC2012_devkit_t12.tar.gz``) ``data/ILSVRC2012_validation_ground_truth.txt``:
  one ILSVRC2012_ID a line, in file name order. These IDs are *not* indices into the sorted
  wnids (ID 1 is n02119789, kit fox; the first sorted wnid is n01440764, tench): ID -> wnid
  is the ``synsets`` table of the devkit's ``data/meta.mat``, read with scipy.
* Kaggle's ``LOC_val_solution.csv``: ``ImageId,PredictionString``, the wnid first in each
  prediction string. Needs nothing else.
"""

from __future__ import annotations

import csv
import os
import re
import tarfile
from pathlib import Path, PurePosixPath

import numpy as np

from .file_index import FileIndex
from .files import MAX_FILE_BYTES
from .folder_scan import folder_prefix, listed_images
from .imagefolder import IMAGE_EXTENSIONS, ImageFiles, find_classes
from .shards.write import Sample, file_samples, make_keys

NUM_CLASSES = 1000  # ILSVRC2012_IDs 1..1000 are the leaf synsets, the classes; higher IDs are their ancestors
VAL_EXTENSIONS = (".jpeg", ".jpg", ".png")  # any case
GROUND_TRUTH = "ILSVRC2012_validation_ground_truth.txt"
SOLUTION_CSV = "LOC_val_solution.csv"
META = "meta.mat"
LABELS_HINT = f"give the devkit's data/{GROUND_TRUTH} (from ILSVRC2012_devkit_t12.tar.gz) or Kaggle's {SOLUTION_CSV}"
# Where a flat val/'s labels are looked for under data.root (data.val_labels overrides).
VAL_LABELS = (SOLUTION_CSV, GROUND_TRUTH, f"ILSVRC2012_devkit_t12/data/{GROUND_TRUTH}")
TRAIN_HINT = (
    "give ILSVRC2012_img_train.tar, a folder of the <wnid>.tar files it holds, "
    "or a folder of the extracted <wnid>/ class folders"
)


def read_val_labels(labels: Path, devkit: str | Path | None = None) -> tuple[dict[str, str], list[str]]:
    """(val image stem (``ILSVRC2012_val_00000001``) -> wnid, the sorted classes: the devkit's 1,000, or the
    wnids the csv names), from either labels file. ``devkit`` (``.txt`` labels only): the devkit's
    ``data/meta.mat`` or the extracted ``ILSVRC2012_devkit_t12/``; by default ``meta.mat`` is looked for
    next to the labels file and in ``../data/``."""
    if not labels.is_file():
        raise FileNotFoundError(f"labels file {labels} does not exist; {LABELS_HINT}")
    if labels.suffix.lower() == ".csv":
        label_of = _read_solution_csv(labels)
        return label_of, sorted(set(label_of.values()))
    if labels.suffix.lower() == ".txt":
        wnid_of = _read_meta(_find_meta(labels, devkit))
        ids = _read_ground_truth(labels)
        return {f"ILSVRC2012_val_{n:08d}": wnid_of[i] for n, i in enumerate(ids, 1)}, sorted(wnid_of.values())
    raise ValueError(f"labels file {labels} is neither .txt nor .csv; {LABELS_HINT}")


def _read_solution_csv(path: Path) -> dict[str, str]:
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = csv.reader(f)
        header = next(rows, None)
        if header != ["ImageId", "PredictionString"]:
            raise ValueError(f"{path} starts with {header}, not ImageId,PredictionString; {LABELS_HINT}")
        labels = {}
        for number, row in enumerate(rows, 2):
            if len(row) != 2 or not row[1].split():
                raise ValueError(f"{path} line {number}: {row} is not ImageId,<wnid> <box> ...; {LABELS_HINT}")
            labels[row[0]] = row[1].split()[0]
    return labels


def _read_ground_truth(path: Path) -> list[int]:
    ids = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.strip()
        if not text:
            continue
        if not (text.isdigit() and 1 <= int(text) <= NUM_CLASSES):
            raise ValueError(f"{path} line {number}: {text!r} is not an ILSVRC2012_ID 1..1000; {LABELS_HINT}")
        ids.append(int(text))
    return ids


def _find_meta(labels: Path, devkit: str | Path | None) -> Path:
    if devkit is None:
        candidates = [labels.parent / META, labels.parent.parent / "data" / META]
    elif Path(devkit).is_dir():
        candidates = [Path(devkit) / "data" / META, Path(devkit) / META]
    elif Path(devkit).suffix == ".mat":
        candidates = [Path(devkit)]
    else:
        raise ValueError(
            f"devkit {devkit}: give the extracted devkit folder or its data/{META} "
            "(tar xzf ILSVRC2012_devkit_t12.tar.gz)"
        )
    for path in candidates:
        if path.is_file():
            return path
    looked = ", ".join(dict.fromkeys(os.path.normpath(path) for path in candidates))
    raise FileNotFoundError(
        f"{labels.name} needs the devkit's data/{META} to map its ILSVRC2012_IDs to wnids, not found at {looked}; "
        f"give the devkit (ILSVRC2012_devkit_t12/, extracted from ILSVRC2012_devkit_t12.tar.gz), "
        f"or use Kaggle's {SOLUTION_CSV} instead"
    )


def _read_meta(path: Path) -> dict[int, str]:
    """ILSVRC2012_ID -> wnid of the 1,000 classes, from the devkit's ``meta.mat``."""
    try:
        import scipy.io
    except ImportError:
        raise ImportError(
            f"reading the devkit's {path} needs scipy: pip install scipy; "
            f"or use Kaggle's {SOLUTION_CSV}, which needs nothing"
        ) from None
    try:
        synsets = scipy.io.loadmat(path, squeeze_me=True)["synsets"]
        table = zip((int(i) for i in synsets["ILSVRC2012_ID"]), (str(w) for w in synsets["WNID"]))
        wnid_of = {i: wnid for i, wnid in table if 1 <= i <= NUM_CLASSES}
    except (OSError, ValueError, KeyError, IndexError, TypeError, scipy.io.matlab.MatReadError) as err:
        raise ValueError(f"{path} is not the ILSVRC2012 devkit's {META} ({type(err).__name__}: {err})") from None
    if len(wnid_of) != NUM_CLASSES or len(set(wnid_of.values())) != NUM_CLASSES:
        raise ValueError(
            f"{path} has {len(set(wnid_of.values()))} distinct wnids for ILSVRC2012_IDs 1..1000, not 1,000: "
            f"not the ILSVRC2012 devkit's data/{META}"
        )
    return wnid_of


def val_samples(
    val_dir: str | Path, labels: str | Path, devkit: str | Path | None = None
) -> tuple[list[str], FileIndex]:
    """(classes, (path, class index) of each image sorted by file name) for the flat ILSVRC2012 ``val/``."""
    val_dir, labels = Path(val_dir), Path(labels)
    if not val_dir.is_dir():
        raise FileNotFoundError(
            f"val folder {val_dir} does not exist; expected the flat ILSVRC2012 val/ "
            "(ILSVRC2012_val_00000001.JPEG ..., extracted from ILSVRC2012_img_val.tar)"
        )
    entries = [entry for entry in os.scandir(val_dir) if not entry.name.startswith(".")]
    images = sorted(e.name for e in entries if e.is_file() and e.name.lower().endswith(VAL_EXTENSIONS))
    folders = sorted(e.name for e in entries if e.is_dir())
    if folders:
        state = "both images and class folders (a partly sorted val/?)" if images else "class folders"
        raise ValueError(
            f"{val_dir} holds {state} ({folders[0]}/, ...), not the flat ILSVRC2012 val/: a val/ sorted into "
            f"class folders is an image folder (data=imagenet reads it; python -m data.shards folder converts it)"
        )
    if not images:
        raise FileNotFoundError(f"no images in {val_dir}; expected ILSVRC2012_val_00000001.JPEG ...")
    label_of, classes = read_val_labels(labels, devkit)
    if labels.suffix.lower() == ".txt" and len(label_of) != len(images):
        raise ValueError(
            f"{labels} has {len(label_of):,} labels for {val_dir}'s {len(images):,} images; "
            f"it labels the whole val/ (a partial val/ converts with Kaggle's {SOLUTION_CSV})"
        )
    unlabelled = [name for name in images if Path(name).stem not in label_of]
    if unlabelled:
        more = f" and {len(unlabelled) - 3:,} more" if len(unlabelled) > 3 else ""
        raise ValueError(
            f"{len(unlabelled):,} of the {len(images):,} images in {val_dir} have no label in {labels}: "
            f"{', '.join(unlabelled[:3])}{more}; is it the ILSVRC2012 val/?"
        )
    index = {wnid: i for i, wnid in enumerate(classes)}
    labels = np.array([index[label_of[Path(name).stem]] for name in images], dtype=np.int32)
    return classes, FileIndex.from_paths([str(val_dir / name) for name in images], labels, folder_prefix(val_dir))


def is_flat_val(val_dir: Path) -> bool:
    """Images straight in ``val_dir`` and no class folders: the raw ILSVRC2012 val/."""
    entries = list(os.scandir(val_dir))
    return not any(e.is_dir() for e in entries) and any(e.name.lower().endswith(IMAGE_EXTENSIONS) for e in entries)


def open_flat_val(
    root: str | Path,
    val_dir: Path,
    transform,
    val_labels: str | None = None,
    devkit: str | None = None,
    max_file_bytes: int = MAX_FILE_BYTES,
) -> ImageFiles:
    """The flat ILSVRC2012 val/ as a dataset, labelled by ``val_labels`` (the devkit's ground truth or
    Kaggle's solution csv), looked for under ``root`` when not given; ``max_file_bytes``: as
    :class:`ImageFiles`'."""
    if val_labels is None:
        found = [Path(root) / name for name in VAL_LABELS if (Path(root) / name).is_file()]
        if not found:
            raise FileNotFoundError(
                f"{val_dir} is the flat ILSVRC2012 val/ (no class folders); say where its labels are: "
                f"data.val_labels=/path/to/{SOLUTION_CSV} or .../{GROUND_TRUTH} "
                "(with data.devkit=/path/to/ILSVRC2012_devkit_t12)"
            )
        val_labels = str(found[0])
    classes, samples = val_samples(val_dir, val_labels, devkit)
    return ImageFiles(samples, classes, transform, max_file_bytes)


def train_samples(src: str | Path) -> tuple[list[str], list[Sample], list[str]]:
    """(sorted wnids, samples, skipped) of the ILSVRC2012 train set in any of its three forms;
    ``skipped``: "<where> (<what>)" of each image-named tar member that is not a regular file (a
    link, a FIFO, a device: never read, counted in the index and the converter's summary)."""
    src = Path(src)
    if src.is_file():
        return _outer_tar_samples(src)
    if not src.is_dir():
        raise FileNotFoundError(f"{src} does not exist; {TRAIN_HINT}")
    entries = [entry for entry in os.scandir(src) if not entry.name.startswith(".")]
    tars = sorted(Path(e.path) for e in entries if e.is_file() and e.name.endswith(".tar"))
    folders = sorted(e.name for e in entries if e.is_dir())
    if tars and folders:
        raise ValueError(
            f"{src} holds both class tars ({tars[0].name}, ...) and class folders ({folders[0]}/, ...): "
            "finish extracting the tars (and delete them), or delete the folders"
        )
    if tars:
        return _class_tar_samples(tars)
    if not folders:
        raise FileNotFoundError(f"{src} holds no class tars or class folders; {TRAIN_HINT}")
    classes = find_classes(src)
    files, skipped = listed_images(src, classes)
    return classes, file_samples(src, files), skipped


WNID = re.compile(r"n\d{8}")  # an ImageNet class: WordNet's noun id


def _outer_tar_samples(path: Path) -> tuple[list[str], list[Sample], list[str]]:
    """ILSVRC2012_img_train.tar itself: each member is a class tar, read in place; the classes in
    wnid order (as the class tars' and folders' forms), whatever order or folder the members have."""
    try:
        with tarfile.open(path, "r:") as outer:
            members = [m for m in outer.getmembers() if m.isreg()]
    except tarfile.TarError as err:
        raise ValueError(f"{path} is not an uncompressed tar ({err}); {TRAIN_HINT}") from None
    for member in members:
        name = PurePosixPath(member.name)
        if name.is_absolute() or ".." in name.parts:  # a hostile archive: no member may name a place outside
            raise ValueError(
                f"{path} holds a member named {member.name!r}, a path out of the archive: refused; "
                f"its members are <wnid>.tar files; {TRAIN_HINT}"
            )
        if name.suffix != ".tar":
            raise ValueError(
                f"{path} holds {member.name}, not a <wnid>.tar of one class; {TRAIN_HINT} "
                "(the val tar's images convert with ilsvrc-val, once extracted)"
            )
        if not WNID.fullmatch(name.stem):
            raise ValueError(
                f"{path} holds {member.name}: {name.stem!r} is not an ImageNet class (n and 8 digits, "
                f"e.g. n01440764.tar); {TRAIN_HINT}"
            )
    members.sort(key=lambda m: PurePosixPath(m.name).stem)
    classes = [PurePosixPath(m.name).stem for m in members]
    if len(set(classes)) < len(classes):
        raise ValueError(f"{path} holds a class tar twice (appended to?); {TRAIN_HINT}")
    with open(path, "rb") as f:
        found = [
            _tar_images(f, f"{path}:{member.name}", str(path), label, member.offset_data, member.size)
            for label, member in enumerate(members)
        ]
    return _samples(classes, found)


def _class_tar_samples(tars: list[Path]) -> tuple[list[str], list[Sample], list[str]]:
    """A folder of the per-class ``<wnid>.tar`` files."""
    found = []
    for label, path in enumerate(tars):
        with open(path, "rb") as f:
            found.append(_tar_images(f, str(path), str(path), label, 0, path.stat().st_size))
    return _samples([path.stem for path in tars], found)


def _tar_images(
    f, where: str, path: str, label: int, start: int, size: int
) -> tuple[list[tuple[str, int, str, int, int]], list[str]]:
    """(member name, label, path, offset, size) of each image in the tar of ``size`` bytes at byte
    ``start`` of ``f``; and "<where>:<member> (<what>)" of each image-named member that is not a
    regular file (a symlink, a hard link, a FIFO, a device), never read."""
    f.seek(start)  # a TarFile opened on f starts where f is, so its members' offsets are positions in f
    try:
        with tarfile.open(fileobj=f, mode="r:") as tar:
            named = [m for m in tar.getmembers() if m.name.lower().endswith(IMAGE_EXTENSIONS)]
    except tarfile.TarError as err:
        raise ValueError(f"{where} cannot be read as an uncompressed tar ({err}); {TRAIN_HINT}") from None
    members = [m for m in named if m.isreg()]
    skipped = [f"{where}:{m.name} ({_member_kind(m)})" for m in named if not m.isreg()]
    if not members:
        raise ValueError(f"{where} holds no images (extensions {', '.join(IMAGE_EXTENSIONS)}); {TRAIN_HINT}")
    if members[-1].offset_data + members[-1].size > start + size:
        raise ValueError(f"{where} is truncated: {members[-1].name} runs past its end; download it again")
    return [(m.name, label, path, m.offset_data, m.size) for m in members], skipped


def _member_kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"a symbolic link to {member.linkname}"
    if member.islnk():
        return f"a hard link to {member.linkname}"
    if member.isfifo():
        return "a FIFO"
    if member.isdev():
        return "a device"
    return "not a regular file"


def _samples(classes: list[str], tars: list[tuple[list, list[str]]]) -> tuple[list[str], list[Sample], list[str]]:
    """(classes, samples, skipped) of the class tars' :func:`_tar_images`."""
    found = [image for images, _ in tars for image in images]
    keys = make_keys([f"{classes[label]}/{PurePosixPath(name).name}" for name, label, *_ in found])
    samples = [Sample(key, label, path, offset, size) for key, (_, label, path, offset, size) in zip(keys, found)]
    return classes, samples, [line for _, skipped in tars for line in skipped]
