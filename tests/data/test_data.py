"""The data package: datasets, loaders, transforms and normalisation, on tiny generated folders."""

from __future__ import annotations

import gzip
import io
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as T
import torchvision.transforms.v2.functional as TF
from PIL import Image

from data import (
    Normalize,
    RandomResizedCropFlip,
    ResizeCenterCrop,
    ShardSampler,
    SkipLog,
    build_loaders,
    collate,
    fashion_mnist,
    random_crop_flip,
)
from data.decode import decode_resized_crop, decode_rgb, open_header
from data.fashion_mnist import load_fashion_mnist
from data.imagefolder import ImageFolder
from data.registry import names
from data.samplers import spread
from resnet.config import data_config
from tests.helpers.builtin_data import require_fashion_mnist
from tests.helpers.imagegen import jpeg_bytes, make_folder, smooth_image

# --- Fashion-MNIST -------------------------------------------------------------------


def test_fashion_mnist_loads():
    require_fashion_mnist()
    for split, n in (("train", 60000), ("test", 10000)):
        images, labels = load_fashion_mnist(split)
        assert images.shape == (n, 1, 28, 28) and images.dtype == torch.uint8
        assert labels.shape == (n,) and labels.dtype == torch.int64
        assert labels.unique().tolist() == list(range(10))
        assert images.float().mean().item() > 50  # real pixels, not zeros


def test_fashion_mnist_loaders():
    require_fashion_mnist()
    loaders = build_loaders(data_config("fashion_mnist", workers=4), batch_size=500, world_size=3, rank=1)
    assert (loaders.num_classes, loaders.in_chans, loaders.image_size, loaders.val_size) == (10, 1, 28, 10000)
    loaders.set_epoch(0)
    batch = next(iter(loaders.train))
    assert batch.images.shape == (500, 1, 28, 28) and batch.images.dtype == torch.uint8
    assert batch.labels.dtype == torch.int64 and batch.skipped == 0
    assert sum(len(b.labels) for b in loaders.val) == len(range(1, 10000, 3))


def test_fashion_mnist_errors(monkeypatch, tmp_path):
    monkeypatch.setenv("FASHION_MNIST_ROOT", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="python -m data.fashion_mnist --download"):
        load_fashion_mnist("train")
    with pytest.raises(ValueError, match="train, val, test"):
        load_fashion_mnist("validation")


def write_idx(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + np.array(array.shape, dtype=">i4").tobytes()
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_fashion_mnist_download_and_idx_parsing(monkeypatch, tmp_path):
    """``--download``'s file handling and the idx reader, on a fake torchvision download."""

    class FakeFashionMNIST:  # what torchvision leaves behind: <root>/FashionMNIST/raw/*.gz
        def __init__(self, root: str, train: bool, download: bool):
            raw = Path(root, "FashionMNIST", "raw")
            raw.mkdir(parents=True)
            for prefix, n in (("train", 5), ("t10k", 3)):
                write_idx(raw / f"{prefix}-images-idx3-ubyte.gz", np.arange(n * 28 * 28).reshape(n, 28, 28) % 251)
                write_idx(raw / f"{prefix}-labels-idx1-ubyte.gz", np.arange(n) % 10)

    monkeypatch.setattr(torchvision.datasets, "FashionMNIST", FakeFashionMNIST)
    monkeypatch.setenv("FASHION_MNIST_ROOT", str(tmp_path / "fmnist"))
    assert fashion_mnist.download() == tmp_path / "fmnist"
    assert sorted(p.name for p in (tmp_path / "fmnist").iterdir()) == sorted(fashion_mnist.FILES)
    images, labels = load_fashion_mnist("val")
    assert images.shape == (3, 1, 28, 28) and images.dtype == torch.uint8 and labels.tolist() == [0, 1, 2]
    assert images[1, 0, 0, 0] == 28 * 28 % 251


# --- bad files ------------------------------------------------------------------------


def test_bad_images_are_skipped_and_counted_across_workers(tmp_path):
    make_folder(tmp_path / "train", {"a": 5, "b": 4})
    make_folder(tmp_path / "val", {"a": 2, "b": 2})
    good = jpeg_bytes(smooth_image(64, 48), quality=90)
    (tmp_path / "train" / "a" / "zero.JPEG").write_bytes(b"")
    (tmp_path / "train" / "b" / "truncated.JPEG").write_bytes(good[: len(good) // 2])
    (tmp_path / "train" / "b" / "corrupt.JPEG").write_bytes(b"\xff\xd8\xff\xe0 this is not a JPEG" * 20)
    loaders = build_loaders(data_config("imagefolder", root=str(tmp_path), workers=2, image_size=32), batch_size=4)
    skips = SkipLog()
    images = 0
    for epoch in range(2):  # persistent workers: the second epoch reports again
        loaders.set_epoch(epoch)
        skips.reset()
        for batch in loaders.train:  # 12 files, 3 full batches: nothing dropped by drop_last
            skips.add(batch)
            images += len(batch.labels)
            assert batch.images.shape[1:] == (3, 32, 32) and batch.skipped == len(batch.skipped_paths)
        assert skips.count == 3
    assert images == 2 * 9
    assert sorted(Path(p.split(" (")[0]).name for p in skips.first) == ["corrupt.JPEG", "truncated.JPEG", "zero.JPEG"]
    assert "skipped 3 unreadable image(s)" in str(skips)


def test_all_bad_batch_is_empty(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.jpg").write_bytes(b"")
    dataset = ImageFolder(tmp_path, ResizeCenterCrop(16))
    batch = collate([dataset[0], dataset[0]])
    assert len(batch.labels) == 0 and batch.skipped == 2 and "empty file" in batch.skipped_paths[0]


# --- odd but valid files ----------------------------------------------------------------


ODD_FILES = {
    "gray": lambda im: jpeg_bytes(im.convert("L"), quality=90),
    "cmyk": lambda im: jpeg_bytes(im.convert("CMYK"), quality=90),
    "png_named_jpeg": lambda im: jpeg_bytes(im, format="PNG"),
    "progressive": lambda im: jpeg_bytes(im, quality=90, progressive=True),
    "bmp_named_jpeg": lambda im: jpeg_bytes(im, format="BMP"),  # only PIL reads BMP
}


@pytest.mark.parametrize("kind", list(ODD_FILES))
@pytest.mark.parametrize("size", [(61, 47), (17, 300), (640, 480)])
def test_odd_files_load_as_rgb(tmp_path, kind, size):
    image = smooth_image(*size)
    data = ODD_FILES[kind](image)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x.JPEG").write_bytes(data)
    for transform in (RandomResizedCropFlip(32), ResizeCenterCrop(32)):
        sample = ImageFolder(tmp_path, transform)[0]
        assert isinstance(sample, tuple), sample
        assert sample[0].shape == (3, 32, 32) and sample[0].dtype == torch.uint8
    decoded = decode_rgb(data)
    reference = np.array(Image.open(io.BytesIO(data)).convert("RGB"))
    assert torch.equal(decoded.permute(1, 2, 0), torch.from_numpy(reference))  # same pixels as PIL
    if kind == "gray":
        assert torch.equal(decoded[0], decoded[1]) and torch.equal(decoded[1], decoded[2])


def test_reduced_jpeg_decode_matches_full_decode():
    """The DCT-scaled path (1/4 or 1/8) maps the crop box correctly: its output is close to
    cropping and resizing the full-resolution decode, much closer than the same crop moved
    by 8 pixels."""
    data = jpeg_bytes(smooth_image(800, 600, seed=3), quality=95)
    full = decode_rgb(data)
    for top, left, height, width in [(0, 0, 600, 800), (100, 200, 400, 300), (37, 411, 150, 260)]:
        header = open_header(data)
        reduced = decode_resized_crop(data, header, (top, left, height, width), 32).float()
        assert header.size != (800, 600)  # the reduced decode did run
        exact = TF.resized_crop(full, top, left, height, width, [32, 32], antialias=True).float()
        moved = TF.resized_crop(full, top + 8, left + 8, height, width, [32, 32], antialias=True).float()
        error, moved_error = (reduced - exact).abs().mean(), (moved - exact).abs().mean()
        assert error < 3 and error < moved_error / 3, (error, moved_error)


# --- transforms ------------------------------------------------------------------------


def test_transform_shapes_and_protocol():
    data = jpeg_bytes(smooth_image(500, 375), quality=90)
    for transform in (
        RandomResizedCropFlip(224),
        ResizeCenterCrop(224),
        RandomResizedCropFlip(96, interpolation="bicubic"),
    ):
        out = transform(data)
        assert out.shape == (3, transform.size, transform.size) and out.dtype == torch.uint8
    assert ResizeCenterCrop(224).resize == 256
    assert ResizeCenterCrop(299).resize == 341
    assert ResizeCenterCrop(224, crop_pct=224 / 232).resize == 232
    with pytest.raises(ValueError, match="bilinear, bicubic"):
        ResizeCenterCrop(224, interpolation="lanczos")


def test_val_transform_matches_torchvision_classic():
    """Same evaluation protocol as ``Resize(256) + CenterCrop(224)`` on PIL, to 1/255."""
    data = jpeg_bytes(smooth_image(500, 375, seed=5), quality=90)
    ours = ResizeCenterCrop(224)(data)
    classic = T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])(
        Image.open(io.BytesIO(data)).convert("RGB")
    )
    assert (ours.int() - classic.int()).abs().max() <= 1


def test_random_crop_flip_is_a_shifted_or_flipped_window():
    torch.manual_seed(0)
    images = torch.randint(0, 256, (16, 2, 6, 5), dtype=torch.uint8)
    out = random_crop_flip(images, padding=2)
    assert out.shape == images.shape and out.dtype == torch.uint8
    padded = torch.nn.functional.pad(images, (2, 2, 2, 2))
    for n in range(len(images)):
        windows = []
        for top in range(5):
            for left in range(5):
                window = padded[n, :, top : top + 6, left : left + 5]
                windows += [window, window.flip(-1)]
        assert any(torch.equal(out[n], w) for w in windows)
    assert not torch.equal(out, images)  # something moved
    assert all(torch.equal(o, i) or torch.equal(o, i.flip(-1)) for o, i in zip(random_crop_flip(images, 0), images))


# --- normalisation ------------------------------------------------------------------------


def test_normalize_matches_hand_computation():
    x = torch.randint(0, 256, (2, 3, 4, 5), dtype=torch.uint8)
    f = x.double()
    mean = torch.tensor([0.485, 0.456, 0.406], dtype=torch.float64).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], dtype=torch.float64).view(1, 3, 1, 1)
    bgr_mean = torch.tensor([103.939, 116.779, 123.68], dtype=torch.float64).view(1, 3, 1, 1)
    expected = {
        "torch": (f / 255 - mean) / std,
        "caffe": f[:, [2, 1, 0]] - bgr_mean,
        "tf": f / 127.5 - 1,
    }
    for name, want in expected.items():
        normalize = Normalize(name)
        for batch in (x, x.float(), x.contiguous(memory_format=torch.channels_last)):
            got = normalize(batch)
            assert got.dtype == torch.float32
            torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-5)
        assert normalize(x.contiguous(memory_format=torch.channels_last)).is_contiguous(
            memory_format=torch.channels_last
        )
    grey = Normalize("torch")(x[:, :1])
    torch.testing.assert_close(grey.double(), ((f[:, :1] / 255 - mean) / std).mean(1, keepdim=True), atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="torch, caffe, tf"):
        Normalize("keras")


# --- samplers and loaders ---------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_shard_sampler_covers_every_index_once(world_size):
    shards = [list(ShardSampler(7, rank, world_size)) for rank in range(world_size)]
    assert sorted(i for shard in shards for i in shard) == list(range(7))
    assert [len(ShardSampler(7, r, world_size)) for r in range(world_size)] == [len(s) for s in shards]
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


@pytest.mark.parametrize("world_size", [2, 3])
def test_val_loader_counts_every_image_once(tmp_path, world_size):
    make_folder(tmp_path / "train", {"a": 2, "b": 2})
    make_folder(tmp_path / "val", {"a": 3, "b": 4})
    seen = 0
    for rank in range(world_size):
        loaders = build_loaders(
            data_config("imagefolder", root=str(tmp_path), workers=2, image_size=16),
            2,
            rank=rank,
            world_size=world_size,
        )
        seen += sum(len(batch.labels) for batch in loaders.val)
        assert loaders.val_size == 7 and loaders.class_names == ["a", "b"]
    assert seen == 7


def test_val_images_scores_n_images_spread_over_the_set_the_same_at_every_world_size(tmp_path):
    assert list(spread(10, 4)) == [0, 2, 5, 7] and list(spread(3, 4)) == [0, 1, 2] and list(spread(3)) == [0, 1, 2]
    make_folder(tmp_path / "train", {"a": 2, "b": 2})
    make_folder(tmp_path / "val", {"a": 4, "b": 4})  # class by class, as image folders are listed
    for world_size in (1, 2, 3):
        seen = []
        for rank in range(world_size):
            loaders = build_loaders(
                data_config("imagefolder", root=str(tmp_path), image_size=16, workers=0),
                2,
                rank=rank,
                world_size=world_size,
                val_images=4,
            )
            assert (loaders.val_size, loaders.val_split_size) == (4, 8)
            seen += list(loaders.val.sampler)
        assert sorted(seen) == [0, 2, 4, 6]  # both classes, not the first 4 images (all of class a)


def test_val_images_of_fashion_mnist():
    require_fashion_mnist()
    loaders = build_loaders(data_config("fashion_mnist"), batch_size=500, world_size=2, rank=1, val_images=1000)
    assert (loaders.val_size, loaders.val_split_size) == (1000, 10000)
    assert sum(len(b.labels) for b in loaders.val) == 500


def test_layout_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="data.root=/path/to/imagenet"):
        build_loaders(data_config("imagenet", root=None, workers=0), 4)
    with pytest.raises(FileNotFoundError, match=r"train/<wnid>/\*.JPEG"):
        build_loaders(data_config("imagenet", root=str(tmp_path / "nowhere"), workers=0), 4)
    with pytest.raises(ValueError, match=f"unknown dataset 'cifar10'; choose one of {', '.join(names())}$"):
        build_loaders(replace(data_config("synthetic"), name="cifar10"), 4)

    make_folder(tmp_path / "train", {"a": 1, "b": 1, "c": 1})
    (tmp_path / "val").mkdir()
    with pytest.raises(FileNotFoundError, match="no class folders"):
        build_loaders(data_config("imagefolder", root=str(tmp_path), workers=0), 4)
    make_folder(tmp_path / "val", {"a": 1, "b": 1, "d": 1})
    with pytest.raises(ValueError, match="missing in val: c; only in val: d"):
        build_loaders(data_config("imagefolder", root=str(tmp_path), workers=0), 4)
    (tmp_path / "train" / "e").mkdir()
    (tmp_path / "train" / "e" / "notes.txt").write_text("not an image")
    with pytest.raises(FileNotFoundError, match="has no images"):
        ImageFolder(tmp_path / "train", ResizeCenterCrop(16))


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_randaugment_applies_every_op_under_the_configured_interpolation(interpolation):
    # PIL takes its filter as a constant, not a name: given "bicubic", every rotate, shear and
    # translate raised, and the loader skipped each such image as unreadable (a quarter of them).
    import random

    import numpy as np

    from data.augment import auto_augment

    policy = auto_augment("rand-m6-mstd0.5-inc1", 32, interpolation)  # timm_a3's (at m9 and more, timm's
    random.seed(0)  # posterize can reach 0 bits, which Pillow 11+ refuses: a timm matter, not tested here)
    np.random.seed(0)
    image = torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8)
    outputs = [policy(image) for _ in range(200)]  # 2 ops of 15 each time: every op, many times over
    assert all(out.shape == (3, 32, 32) and out.dtype == torch.uint8 for out in outputs)
