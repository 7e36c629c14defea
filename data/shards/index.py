"""The shard format: WebDataset-layout tar files plus an ``index.json``.

A split is a folder of ``<split>-000000.tar``, ``<split>-000001.tar``, ... in which each
sample is two consecutive tar members, ``<key>.jpg`` (the source file's encoded bytes,
unchanged, whatever their format) then ``<key>.cls`` (the class index in ASCII decimal).
That is WebDataset's convention, so other tools read the shards as they are (docs/cluster.md).

``index.json`` says what the tars alone cannot without reading every header: the class
list, each shard's image count (a loader splits the images over ranks and workers before
it opens a shard) and its byte size (:func:`check_shards` catches a truncated copy with one
``stat`` per shard), a checksum of each sample (``crc32``: :func:`sample_checksum`, which
``python -m data.shards check`` compares, catching bytes changed at an unchanged size), and
where the images came from. An index written before checksums has none and still reads.
:func:`records` lists a shard's samples from its tar headers alone, seeking over the image data.

Shards are written by ``python -m data.shards`` (:mod:`data.shards.write`).
"""

from __future__ import annotations

import hashlib
import json
import os
import string
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO

INDEX_NAME = "index.json"
FORMAT = "resnet-padding-shards"
VERSION = 1
DEFAULT_SHARD_SIZE = 1024  # images per shard; why this many: data.shards.write

IMAGE_EXT = "jpg"  # WebDataset's field names: every image is "jpg", even a PNG (the decoder sniffs the bytes)
LABEL_EXT = "cls"
BLOCK = tarfile.BLOCKSIZE
REWRITE = "re-run the conversion (it resumes)"
CONVERT_HINT = "python -m data.shards folder|ilsvrc-train|ilsvrc-val|imagenet ... (--help shows examples)"
CHECKSUM_DIGITS = 8  # hex digits of one sample's checksum (a CRC-32)


class ShardError(ValueError):
    """A shard folder that is missing, incomplete or not in this format; the message names the file and the fix."""


@dataclass(frozen=True)
class ShardInfo:
    name: str  # file name, relative to the index's folder
    count: int  # images
    bytes: int  # file size
    # One sample_checksum per sample, in tar order, joined (one string a shard: ImageNet's 1.28 million
    # would be as many Python objects in every loader process). None: an index without checksums.
    crc32: str | None = None

    def checksums(self) -> list[str] | None:
        """Each sample's recorded checksum, in tar order; None where none were recorded."""
        if self.crc32 is None:
            return None
        return [self.crc32[i : i + CHECKSUM_DIGITS] for i in range(0, len(self.crc32), CHECKSUM_DIGITS)]


@dataclass(frozen=True)
class ShardIndex:
    root: Path  # the folder holding index.json and the shards
    split: str
    classes: list[str]  # label i is classes[i]
    shards: list[ShardInfo]
    source: str  # what was converted (the command's source argument), for provenance
    shard_size: int = DEFAULT_SHARD_SIZE  # images per shard as planned; the last one holds the rest
    seed: int = 0  # of the global shuffle that spread the classes over the shards
    skipped: tuple[str, ...] = ()  # "key: path (reason)" of each source image that could not be read

    @property
    def count(self) -> int:
        return sum(shard.count for shard in self.shards)

    def path(self, shard: ShardInfo) -> Path:
        return self.root / shard.name


def sample_checksum(image: bytes, label: int) -> str:
    """A sample's checksum: the CRC-32 of its image's bytes, continued over its label's (the
    ``.cls`` member's text), as 8 hex digits. CRC-32 finds every burst of up to 32 flipped bits and
    misses random damage once in 4 billion; it guards against corruption, not against tampering."""
    return f"{zlib.crc32(str(label).encode(), zlib.crc32(image)):0{CHECKSUM_DIGITS}x}"


@dataclass(frozen=True)
class Record:
    key: str
    label: int
    offset: int  # of the image member's data in the tar file
    size: int  # of the image, in bytes


def read_index(root: str | Path) -> ShardIndex:
    """The index of the shard folder ``root`` (or of the ``index.json`` file itself)."""
    root = Path(root)
    if root.name == INDEX_NAME:
        root = root.parent
    path = root / INDEX_NAME
    if not path.is_file():
        where = f"no {INDEX_NAME} in {root}" if root.is_dir() else f"shard folder {root} does not exist"
        raise ShardError(f"{where}; convert the images into it first: {CONVERT_HINT}")
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ShardError(f"cannot read {path} ({err}); {REWRITE}") from None
    if isinstance(meta, dict) and "checksum" in meta and meta["checksum"] != index_checksum(meta):
        raise ShardError(
            f"{path} was changed since the conversion wrote it (its checksum does not match: a class "
            f"name, a count, a shard's checksums); {REWRITE}"
        )
    if not isinstance(meta, dict) or (meta.get("format"), meta.get("version")) != (FORMAT, VERSION):
        found = (meta.get("format"), meta.get("version")) if isinstance(meta, dict) else type(meta).__name__
        raise ShardError(
            f"{path} is not a {FORMAT} version {VERSION} index (found {found}); "
            f"convert the images with this version: {CONVERT_HINT}"
        )
    try:
        index = ShardIndex(
            root=root,
            split=str(meta["split"]),
            classes=[str(name) for name in meta["classes"]],
            shards=[ShardInfo(str(s["name"]), int(s["count"]), int(s["bytes"]), _checksums(s)) for s in meta["shards"]],
            source=str(meta["source"]),
            shard_size=int(meta["shard_size"]),
            seed=int(meta["seed"]),
            skipped=tuple(str(s) for s in meta.get("skipped", ())),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ShardError(f"{path} is damaged ({type(err).__name__}: {err}); {REWRITE}") from None
    if index.count != meta.get("count"):
        raise ShardError(
            f"{path} is damaged: its shards hold {index.count} images, its count says {meta.get('count')}; {REWRITE}"
        )
    return index


def index_checksum(meta: dict) -> str:
    """The SHA-256 of an index's entries but its own ``checksum``, as canonical JSON: the class
    list, the counts and the samples' checksums, so that none changes unseen."""
    body = {key: value for key, value in meta.items() if key != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _checksums(shard: dict) -> str | None:
    """A shard entry's ``crc32``: absent (an older index), or 8 hex digits per sample; else ValueError."""
    digits = shard.get("crc32")
    if digits is None:
        return None
    if (not isinstance(digits, str) or len(digits) != CHECKSUM_DIGITS * int(shard["count"])
            or not set(digits) <= set(string.hexdigits)):  # fmt: skip
        raise ValueError(f"{shard['name']}'s crc32 is not {CHECKSUM_DIGITS} hex digits for each of its samples")
    return digits


def write_index(index: ShardIndex) -> None:
    """Write ``index.json`` atomically: a reader sees the old index or the new, never half."""
    meta: dict = {
        "format": FORMAT,
        "version": VERSION,
        "split": index.split,
        "classes": index.classes,
        "shards": [{k: v for k, v in asdict(s).items() if v is not None} for s in index.shards],  # crc32: if any
        "count": index.count,
        "source": index.source,
        "shard_size": index.shard_size,
        "seed": index.seed,
        "skipped": list(index.skipped),
    }
    meta["checksum"] = index_checksum(meta)
    path = index.root / INDEX_NAME
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(meta, indent=1) + "\n")
    os.replace(tmp, path)


def check_shards(index: ShardIndex) -> None:
    """Every shard file exists and has the size the index recorded (one ``stat`` each)."""
    for shard in index.shards:
        path = index.path(shard)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise ShardError(f"shard {path} is missing; {REWRITE}") from None
        if size != shard.bytes:
            state = "truncated" if size < shard.bytes else "wrong size"
            raise ShardError(f"shard {path} {state}: {size} bytes, {INDEX_NAME} says {shard.bytes}; {REWRITE}")


def records(fileobj: BinaryIO, name: str) -> list[Record]:
    """The samples of one shard, in tar order, from its headers alone.

    ``fileobj``: the shard opened for binary reading (a file, or ``io.BytesIO`` of all its
    bytes); ``name`` is for messages. One 1 KiB read per member, its header block and the
    block after, which holds a ``.cls`` member's few bytes; image data is seeked over:
    faster than ``tarfile``, which decodes every header field.
    """
    found = []
    image = None  # (key, offset, size) of the image whose .cls comes next
    for member, offset, size, head in _members(fileobj, name):
        key, _, ext = member.partition(".")  # WebDataset: the key ends at the first dot
        if ext not in (IMAGE_EXT, LABEL_EXT):
            raise ShardError(
                f"{name}: unexpected member {member} (a sample is <key>.{IMAGE_EXT} then <key>.{LABEL_EXT}); {REWRITE}"
            )
        if image is not None and (key, ext) != (image[0], LABEL_EXT):
            raise ShardError(f"{name}: {image[0]}.{IMAGE_EXT} is not followed by its .{LABEL_EXT}; {REWRITE}")
        if ext == IMAGE_EXT:
            image = (key, offset, size)
            continue
        if image is None:
            raise ShardError(f"{name}: {member} has no {key}.{IMAGE_EXT} before it; {REWRITE}")
        if not head[:size].isdigit():
            raise ShardError(f"{name}: {member} holds {head[:size][:20]!r}, not a class index; {REWRITE}")
        found.append(Record(key, int(head[:size]), *image[1:]))
        image = None
    if image is not None:
        raise ShardError(f"{name}: {image[0]}.{IMAGE_EXT} is not followed by its .{LABEL_EXT}; {REWRITE}")
    return found


def _members(fileobj: BinaryIO, name: str) -> Iterator[tuple[str, int, int, bytes]]:
    """(member name, data offset, data size, up to 512 bytes of data) of each tar member."""
    end = fileobj.seek(0, os.SEEK_END)
    pos = 0
    while True:
        fileobj.seek(pos)
        blocks = fileobj.read(2 * BLOCK)
        if len(blocks) < BLOCK:
            what = "too short for a tar file" if pos == 0 else "truncated: it ends without the tar end-of-archive block"
            raise ShardError(f"{name} is {what}; {REWRITE}")
        header = blocks[:BLOCK]
        if header.count(0) == BLOCK:  # end of archive
            return
        try:
            member, size, kind = _parse_header(header)
        except ValueError as err:
            what = "is not a tar file" if pos == 0 else f"has a corrupt tar header at byte {pos} ({err})"
            raise ShardError(f"{name} {what}; {REWRITE}") from None
        if kind not in (tarfile.REGTYPE, tarfile.AREGTYPE):
            raise ShardError(f"{name}: member {member} is not a regular file; {REWRITE}")
        if pos + BLOCK + size > end:
            raise ShardError(f"{name} is truncated: {member} runs past its end at byte {end}; {REWRITE}")
        yield member, pos + BLOCK, size, blocks[BLOCK:]
        pos += BLOCK + -(-size // BLOCK) * BLOCK


def _parse_header(header: bytes) -> tuple[str, int, bytes]:
    """(name, size, type flag) of a ustar or GNU tar header; ValueError if it is not one."""
    size = int(header[124:136].strip(b" \0") or b"0", 8)
    checksum = int(header[148:156].strip(b" \0"), 8)
    if checksum != sum(header[:148]) + 8 * ord(" ") + sum(header[156:]):  # summed with the field as spaces
        raise ValueError("bad checksum")
    name = header[:100].split(b"\0", 1)[0]
    if header[257:263] == b"ustar\0" and header[345]:  # POSIX ustar: a long name's directories
        name = header[345:500].split(b"\0", 1)[0] + b"/" + name
    return name.decode(), size, header[156:157]
