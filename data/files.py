"""Reading an image file's bytes, bounded: never blocked by a FIFO, never unending on a device,
never a file too large to be an image.

The folder scan keeps regular files only (:mod:`data.folder_scan`), but a file can be replaced
between the listing and the read, and the shard converter reads what it is given: so
:func:`read_file` opens without blocking and refuses, before a byte is read, anything that is not
a regular file or has more than ``limit`` bytes (``data.max_file_mb``): an ``OSError`` naming the
file, which the loader skips and counts like any unreadable image. A tar shard's member is
refused the same way from the size in its header (:func:`check_size`).

Why 64 MiB: ImageNet train's largest JPEG is 15.7 MB and a 30,000-pixel-square PNG bomb 0.5 MB,
while each loader worker that meets a file holds it two or three times over while decoding it:
a 1,000 MiB file raised a worker's peak RSS from 0.94 to 1.85 GB (docs/benchmarks.md, "Files too
large to be images").
"""

from __future__ import annotations

import errno
import os
import stat

MiB = 1 << 20
MAX_FILE_MB = 64  # data.max_file_mb's default: four times ImageNet's largest JPEG (15.7 MB)
MAX_FILE_BYTES = MAX_FILE_MB * MiB


def mib_bytes(mib: float) -> int:
    """A size in MiB (``data.max_file_mb``, ``--max-file-mb``) as bytes."""
    return int(mib * MiB)


def check_size(size: int, where: str, limit: int = MAX_FILE_BYTES) -> None:
    """Refuse an image of ``size`` bytes over ``limit``: an ``OSError`` (``EFBIG``) naming ``where``."""
    if size > limit:
        raise OSError(
            errno.EFBIG,
            f"not read: {size:,} bytes, over the {limit / MiB:g} MiB an image file may have (data.max_file_mb)",
            where,
        )


def read_file(path: str | os.PathLike, offset: int = 0, size: int = -1, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (``size`` >= 0: that many at ``offset``); more than
    ``limit`` bytes are refused before any is read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO would block open() until a writer came
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or socket)", str(path))
        wanted = info.st_size - offset if size < 0 else size
        check_size(wanted, str(path), limit)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=True) as f:
            fd = -1
            f.seek(offset)
            return f.read(wanted)
    finally:
        if fd >= 0:
            os.close(fd)
