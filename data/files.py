"""Reading an image file's bytes, bounded: never blocked by a FIFO, never unending on a device.

The folder scan keeps regular files only (:mod:`data.folder_scan`), but a file can be replaced
between the listing and the read, and the shard converter reads what it is given: so the read
opens without blocking, refuses anything that is not a regular file, and reads at most
:data:`MAX_FILE_BYTES`. Each refusal is an ``OSError`` naming the file: the loader skips and counts
it like any unreadable image.
"""

from __future__ import annotations

import errno
import os
import stat

MAX_FILE_BYTES = 1 << 30  # 1 GiB: far above any image (a 30,000-pixel-square PNG bomb is 0.5 MB)


def read_file(path: str | os.PathLike, offset: int = 0, size: int = -1) -> bytes:
    """The bytes of the regular file ``path`` (``size`` >= 0: that many at ``offset``)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO would block open() until a writer came
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or socket)", str(path))
        wanted = info.st_size - offset if size < 0 else size
        if wanted > MAX_FILE_BYTES:
            raise OSError(
                errno.EFBIG, f"{wanted:,} bytes, more than the {MAX_FILE_BYTES:,} an image may have", str(path)
            )
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=True) as f:
            fd = -1
            f.seek(offset)
            return f.read(wanted)
    finally:
        if fd >= 0:
            os.close(fd)
