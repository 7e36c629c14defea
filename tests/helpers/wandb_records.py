"""What an offline W&B run wrote, read back from its ``.wandb`` file: its records, once the run's
exit record is there (wandb's service process writes the file, and may still be flushing when
``run.finish()`` has returned)."""

from __future__ import annotations

import time
from pathlib import Path

from wandb.proto import wandb_internal_pb2 as pb


def read_records(path: Path):
    """The records of a ``.wandb`` file: a 7-byte W&B header, then LevelDB's log format (32 KiB
    blocks of chunks, each a 7-byte header: CRC, little-endian length, type FULL 1, FIRST 2,
    MIDDLE 3, LAST 4), each record a protobuf ``Record``."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run log"
    pos, block, parts = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header: zeros
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:  # zero padding
            continue
        assert kind in (1, 2, 3, 4), f"{path}: chunk type {kind} at {pos}"
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(parts)
            yield record


def finished_log(run_dir: Path, seconds: float = 60.0) -> Path:
    """The run's ``.wandb`` file once it holds the run's exit record: wandb's service process
    writes it, and may still be flushing when ``run.finish()`` has returned (seen on a busy machine)."""
    (log,) = run_dir.glob("run-*.wandb")
    deadline = time.monotonic() + seconds
    while not any(record.WhichOneof("record_type") == "exit" for record in read_records(log)):
        assert time.monotonic() < deadline, f"{log} has no exit record after {seconds:.0f} s"
        time.sleep(0.2)
    return log
