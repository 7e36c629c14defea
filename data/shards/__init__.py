"""WebDataset-layout tar shards: the format, and the converter that writes them.

>>> from data.shards import read_index, check_shards
>>> index = read_index("/shards/imagenet/train")   # ShardIndex: classes, shards, count
>>> check_shards(index)                             # every shard present and whole

:mod:`.index` is the format, :mod:`.write` the converter (``python -m data.shards --help``), :mod:`.read`
the reader training and evaluation use.
"""

from .index import (
    FORMAT,
    INDEX_NAME,
    VERSION,
    Record,
    ShardError,
    ShardIndex,
    ShardInfo,
    check_shards,
    read_index,
    records,
    write_index,
)
from .write import Sample, convert, file_samples, read_bytes

__all__ = [
    "FORMAT",
    "INDEX_NAME",
    "VERSION",
    "Record",
    "Sample",
    "ShardError",
    "ShardIndex",
    "ShardInfo",
    "check_shards",
    "convert",
    "file_samples",
    "read_bytes",
    "read_index",
    "records",
    "write_index",
]
