"""Listing ``root/<class>/**/<image>``: every real directory once, in a fixed order.

The order is ``os.walk(followlinks=True)``'s with sorted names: a folder's images, then each
of its sub-folders in turn. Directory links are followed, as there, but each real directory
is walked once (its ``(st_dev, st_ino)`` is remembered) and a link that leads back inside the
root is not followed at all: the folder it points to is listed where it is. So
``ln -s .. train/a/up`` (a loop) or a link from one class into another lists no image twice
and relabels none; :meth:`FolderScan.links_line` names each link skipped, in one line.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .file_index import FileIndex

IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp")  # any case


def find_classes(root: Path) -> list[str]:
    """Sorted class folder names under ``root``; a missing or class-less root fails."""
    if not root.is_dir():
        raise FileNotFoundError(f"image folder {root} does not exist; expected {root}/<class>/<image>.JPEG")
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir() and not entry.name.startswith("."))
    if not classes:
        raise FileNotFoundError(
            f"no class folders in {root}; expected {root}/<class>/<image>.JPEG "
            "(a flat ImageNet val/ must first be sorted into class folders)"
        )
    return classes


@dataclass
class _Walk:
    """What the walks of one scan share: the directories seen, and the links skipped."""

    root: str  # the root's real path
    seen: dict[tuple[int, int], str] = field(default_factory=dict)  # (st_dev, st_ino) -> the path walked
    folders: list[str] = field(default_factory=list)  # every directory listed, in order
    links: list[str] = field(default_factory=list)  # "link -> target" of each directory not followed
    special: list[str] = field(default_factory=list)  # image-named entries that are not regular files

    def enter(self, path: str) -> bool:
        """Whether to walk the directory ``path``: not when it was walked already, or when it is a
        link into the root (its target is walked where it is)."""
        try:
            key = _key(path)
        except OSError:
            return False  # gone, or a dangling link: nothing to list, as os.walk
        link = os.path.islink(path)
        real = os.path.realpath(path) if link else ""
        if key in self.seen or real == self.root or real.startswith(self.root + os.sep):
            self.links.append(f"{path} -> {os.readlink(path) if link else self.seen[key]}")
            return False
        self.seen[key] = path
        return True

    def images(self, top: str) -> list[str]:
        """Paths of the image files under ``top`` (already entered), in os.walk's order."""
        found = []
        stack = [top]
        while stack:
            folder = stack.pop()
            try:
                with os.scandir(folder) as listing:
                    entries = [(entry.name, _kind(entry)) for entry in listing]
            except OSError:
                continue  # a folder that cannot be listed is passed over, as os.walk does
            self.folders.append(folder)
            named = sorted(
                (name, kind) for name, kind in entries if kind != "dir" and name.lower().endswith(IMAGE_EXTENSIONS)
            )
            found += [os.path.join(folder, name) for name, kind in named if kind == "file"]
            # a FIFO would block the read for ever, a device (a /dev/zero) never end it, a socket or a
            # dangling link fail it: none is an image, each is named and counted
            self.special += [f"{os.path.join(folder, name)} ({kind})" for name, kind in named if kind != "file"]
            subfolders = [os.path.join(folder, name) for name in sorted(n for n, kind in entries if kind == "dir")]
            stack += reversed([path for path in subfolders if self.enter(path)])
        return found


def _key(path: str | Path) -> tuple[int, int]:
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino


def _kind(entry: os.DirEntry) -> str:
    """``dir``, ``file`` (a regular file, or a link to one), or what else the entry is."""
    try:
        if entry.is_dir():  # follows links, as os.walk's listing does
            return "dir"
        if entry.is_file():
            return "file"
        mode = os.stat(entry.path).st_mode
    except OSError:
        return "a dangling link"
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((kind for test, kind in kinds if test(mode)), "not a regular file")


@dataclass(frozen=True)
class FolderScan:
    """One listing of an image folder: its classes, its images, and what was walked."""

    root: Path
    classes: list[str]  # the class folders listed, sorted
    samples: FileIndex  # every image; its label is a position in ``classes``
    folders: list[str]  # every directory listed, the root first (the cache checks their mtimes)
    links: list[str] = field(default_factory=list)  # "link -> target" of each directory link not followed
    special: list[str] = field(default_factory=list)  # "path (a FIFO)" of each image-named entry skipped

    def lines(self) -> list[str]:
        """A line naming the directory links skipped and one naming the entries skipped as not regular
        files, each where there were any."""
        special = _skipped_line(self.root, self.special, "image-named entries that are not regular files")
        return [line for line in (links_line(self.root, self.links), special) if line]


def links_line(root: Path, links: list[str]) -> str | None:
    """One line naming the directory ``links`` skipped under ``root``; None when there were none."""
    return _skipped_line(
        root,
        links,
        "directory link(s) that lead to folders already listed "
        "(a loop, or a second path to the same images; no image is listed twice)",
    )


def _skipped_line(root: Path, names: list[str], what: str) -> str | None:
    """``<root>: skipped N <what>: a, b, c and M more``; None for no ``names``."""
    if not names:
        return None
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return f"{root}: skipped {len(names)} {what}: {', '.join(names[:3])}{more}"


def walk_images(folder: Path) -> tuple[list[str], list[str]]:
    """(paths of the image files under ``folder`` in os.walk's order, directory links skipped)."""
    walk = _Walk(os.path.realpath(folder))
    walk.seen[_key(folder)] = str(folder)
    return walk.images(str(folder)), walk.links


def scan_folder(root: str | Path, classes: list[str] | None = None) -> FolderScan:
    """List the images of ``classes`` (default: every class folder) under ``root``, in a
    deterministic order; a class folder without images fails, naming it."""
    root = Path(root)
    if classes is None:
        classes = find_classes(root)
    walk = _Walk(os.path.realpath(root))
    walk.seen[_key(root)] = str(root)
    walk.folders.append(str(root))
    paths: list[str] = []
    counts = []
    for name in classes:
        top = str(root / name)
        key = _key(top)
        if key in walk.seen:
            raise ValueError(f"class folder {top} is the same directory as {walk.seen[key]} (a link?); keep one")
        walk.seen[key] = top
        found = walk.images(top)
        if not found:
            raise FileNotFoundError(f"class folder {top} has no images (extensions {', '.join(IMAGE_EXTENSIONS)})")
        paths += found
        counts.append(len(found))
    labels = np.repeat(np.arange(len(classes), dtype=np.int32), counts)
    samples = FileIndex.from_paths(paths, labels, folder_prefix(root))
    return FolderScan(root, list(classes), samples, walk.folders, walk.links, walk.special)


def folder_prefix(root: Path) -> str:
    """What ``root / name`` puts before ``name``: the root and a separator, or nothing for ``.``."""
    return "" if str(root) == "." else os.path.join(str(root), "")


def find_images(root: Path, classes: list[str]) -> FileIndex:
    """(path, class index) for every image file of ``classes``, in a deterministic order; the
    directory links skipped are named in one printed line (:func:`scan_folder`)."""
    return listed_images(root, classes)[0]


def listed_images(root: Path, classes: list[str]) -> tuple[FileIndex, list[str]]:
    """:func:`find_images`, and the image-named entries it skipped as not regular files ("path (a
    FIFO)"), for a shard conversion to record beside its unreadable images."""
    scan = scan_folder(root, classes)
    for line in scan.lines():
        print(line, flush=True)
    return scan.samples, scan.special
