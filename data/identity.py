"""What a training set is, in values a checkpoint records: its image count, a fingerprint of its
images' names (relative to the root, so a node-local copy elsewhere matches) and labels, and, where
the set already holds one, a fingerprint of their content (shards: each shard's byte size and each
sample's checksum, from index.json; image folders have none: a stat of every file would cost a
network mount minutes at every start).

A resume against another set would train on a schedule planned for the old size: images added, and
OneCycleLR refuses the steps past its plan mid-run; removed, and the run ends early, its LR never
annealed. ``resnet.job.resume`` compares the two and refuses in one line.
"""

from __future__ import annotations

import hashlib

import numpy as np
from torch.utils.data import Dataset

from .file_index import FileIndex


def train_identity(dataset: Dataset) -> dict:
    """``{"train_images": N, "train_fingerprint": <12 hex digits>}`` of a training dataset: image
    folders (names and labels), shards (each shard's name and count), in-memory sets (labels); for
    shards also ``"train_content"``: each shard's byte size and its samples' checksums."""
    digest = hashlib.sha1()
    samples = getattr(dataset, "samples", None)
    if isinstance(samples, FileIndex):
        digest.update(np.ascontiguousarray(samples.names).tobytes())
        digest.update(np.ascontiguousarray(samples.starts).tobytes())
        digest.update(np.ascontiguousarray(samples.labels).astype(np.int64).tobytes())
        count = len(samples.labels)
    elif hasattr(dataset, "counts") and hasattr(dataset, "index"):  # shards: what the conversion wrote
        content = hashlib.sha1()
        for shard in dataset.index.shards:
            digest.update(f"{shard.name}:{shard.count}\n".encode())
            content.update(f"{shard.name}:{shard.bytes}:{shard.crc32 or ''}\n".encode())
        count = int(np.asarray(dataset.counts).sum())
        return {"train_images": count, "train_fingerprint": digest.hexdigest()[:12],
                "train_content": content.hexdigest()[:12]}  # fmt: skip
    elif hasattr(dataset, "labels"):
        labels = np.asarray(dataset.labels).astype(np.int64)
        digest.update(labels.tobytes())
        count = len(labels)
    else:
        count = len(dataset)
        digest.update(str(count).encode())
    return {"train_images": count, "train_fingerprint": digest.hexdigest()[:12]}
