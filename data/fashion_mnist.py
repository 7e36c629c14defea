"""Fashion-MNIST (Xiao et al. 2017), the built-in dataset: 60,000 train / 10,000 test
grey 28x28 images of 10 clothing classes, read from the original idx ``.gz`` files.

Where the files are looked for, first hit wins:

0. ``data.root`` when set (``root`` here), and then only there;
1. ``$FASHION_MNIST_ROOT`` when set (and then only there);
2. ``/usr/share/datasets/fashion-mnist``: Debian's ``dataset-fashion-mnist`` package;
3. ``~/.cache/resnet-padding/fashion-mnist``: where ``python -m data.fashion_mnist --download`` puts them.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from .registry import InMemory

APT_ROOT = Path("/usr/share/datasets/fashion-mnist")
CACHE_ROOT = Path("~/.cache/resnet-padding/fashion-mnist").expanduser()

CLASS_NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]

# The dataset has no val split; "val" is the official test set, the one results are quoted on.
SPLIT_PREFIX = {"train": "train", "val": "t10k", "test": "t10k"}
FILES = [
    f"{prefix}-{kind}-idx{dims}-ubyte.gz"
    for prefix in ("train", "t10k")
    for kind, dims in (("images", 3), ("labels", 1))
]


def find_root(root: str | Path | None = None) -> Path:
    """The folder holding all four idx files: ``root`` (``data.root``) when given, else the first
    of the folders above; fails with one line saying what to type instead."""
    if root is not None:
        root = Path(root)
        missing = [name for name in FILES if not (root / name).is_file()]
        if not missing:
            return root
        where = f"lacks {', '.join(missing)}" if root.is_dir() else "is not a folder"
        raise FileNotFoundError(
            f"data.root={root} {where}: Fashion-MNIST needs a folder holding {', '.join(FILES)}; pass "
            "data.root=<that folder>, or data.root=null to look in $FASHION_MNIST_ROOT, "
            f"{APT_ROOT} and {CACHE_ROOT}"
        )
    override = os.environ.get("FASHION_MNIST_ROOT")
    candidates = [Path(override)] if override else [APT_ROOT, CACHE_ROOT]
    for root in candidates:
        if all((root / name).is_file() for name in FILES):
            return root
    where = " or ".join(str(root) for root in candidates)
    raise FileNotFoundError(
        f"Fashion-MNIST not found in {where}: run `sudo apt-get install dataset-fashion-mnist` "
        "or `python -m data.fashion_mnist --download`" + (" (or unset FASHION_MNIST_ROOT)" if override else "")
    )


def read_idx(path: Path) -> np.ndarray:
    """An idx file (LeCun's MNIST format): magic 0 0 <dtype 0x08 = uint8> <ndim>, big-endian
    int32 sizes, then the data."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = data[0:2], data[2], data[3]
    if zero != b"\0\0" or dtype != 0x08:
        raise ValueError(f"{path} is not a uint8 idx file (magic {data[:4].hex()})")
    shape = tuple(np.frombuffer(data, dtype=">i4", count=ndim, offset=4))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_fashion_mnist(split: str, root: str | Path | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``split`` in train / val / test (val = test) -> images uint8 [N, 1, 28, 28], labels int64 [N];
    read from ``root`` (``data.root``) when given, else from where :func:`find_root` looks."""
    if split not in SPLIT_PREFIX:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLIT_PREFIX)}")
    root, prefix = find_root(root), SPLIT_PREFIX[split]
    images = read_idx(root / f"{prefix}-images-idx3-ubyte.gz")
    labels = read_idx(root / f"{prefix}-labels-idx1-ubyte.gz")
    if len(images) != len(labels):
        raise ValueError(f"{root}: {len(images)} images but {len(labels)} labels in split {split!r}")
    return torch.from_numpy(images.copy()).unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


DATASET = InMemory(
    "fashion_mnist", tuple(CLASS_NAMES), in_chans=1, image_size=28, load=load_fashion_mnist, find_root=find_root
)


def download(dest: Path | None = None) -> Path:
    """Fetch the four ``.gz`` files with torchvision's downloader (checksummed) into ``dest``,
    by default ``$FASHION_MNIST_ROOT`` or the cache folder."""
    from torchvision.datasets import FashionMNIST  # only needed here

    dest = dest or Path(os.environ.get("FASHION_MNIST_ROOT") or CACHE_ROOT)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        FashionMNIST(tmp, train=True, download=True)  # downloads both splits
        for name in FILES:
            shutil.move(os.path.join(tmp, "FashionMNIST", "raw", name), dest / name)
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--download", action="store_true", help=f"fetch the files into $FASHION_MNIST_ROOT or {CACHE_ROOT}"
    )
    args = parser.parse_args()
    if args.download:
        print(f"Fashion-MNIST downloaded to {download()}")
    for split in ("train", "test"):
        images, labels = load_fashion_mnist(split)
        print(f"{split}: {tuple(images.shape)} images, {labels.bincount().tolist()} per class, from {find_root()}")


if __name__ == "__main__":
    main()
