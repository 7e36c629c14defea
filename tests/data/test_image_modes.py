"""Every image mode PIL writes loads as RGB uint8, or is skipped and counted, on every path:
the training crop (CPU and the GPU path's worker side), validation, eval.py's transforms (one
crop and ten), and shards; and a loader worker that raises is named for what it raised."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import Dataset

from data import DataConfig, build_loaders
from data.dataloader import DataLoader
from data.decode import decode_rgb
from data.gpu_decode import EncodedBatch, EncodedRandomResizedCropFlip
from data.transforms import RandomResizedCropFlip, ResizeCenterCrop
from resnet.cli.errors import one_line_errors
from resnet.config import data_config
from resnet.engine.run import LoaderWorkerDied
from resnet.evaluation.loader import EvalProtocol, build_eval_loader
from tests.helpers.imagegen import jpeg_bytes
from tests.helpers.shards import to_shards

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

SIZE = (40, 30)  # width, height


def constant(mode: str, value) -> Image.Image:
    return Image.new(mode, SIZE, value)


def palette_with_transparency() -> Image.Image:
    image = Image.new("P", SIZE, 1)
    image.putpalette([0, 0, 0, 10, 20, 30] + [0] * 762)
    image.info["transparency"] = 0  # palette entry 0 is transparent; the image is entry 1
    return image


def rgb48_png(rgb: tuple[int, int, int]) -> bytes:
    """A 16-bit-per-channel RGB PNG (PIL writes none): libpng decodes it to uint16."""
    width, height = SIZE
    row = b"\0" + struct.pack(">HHH", *rgb) * width

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 16, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


# name: (file name, its bytes, the RGB every pixel decodes to; None: PIL's own conversion, not checked here)
CASES = {
    "1 png": ("one.png", jpeg_bytes(constant("1", 1), format="PNG"), (255, 255, 255)),
    "1 tiff": ("one.tiff", jpeg_bytes(constant("1", 1), format="TIFF"), (255, 255, 255)),
    "L png": ("grey.png", jpeg_bytes(constant("L", 100), format="PNG"), (100, 100, 100)),
    "LA png": ("grey_alpha.png", jpeg_bytes(constant("LA", (100, 50)), format="PNG"), (100, 100, 100)),
    "P transparency png": ("palette.png", jpeg_bytes(palette_with_transparency(), format="PNG"), (10, 20, 30)),
    "P transparency gif": ("palette.gif.png", jpeg_bytes(palette_with_transparency(), format="GIF"), (10, 20, 30)),
    "I;16 png": ("deep.png", jpeg_bytes(constant("I;16", 40000), format="PNG"), (156, 156, 156)),  # 40000 >> 8
    "I;16 tiff": ("deep.tiff", jpeg_bytes(constant("I;16", 40000), format="TIFF"), (156, 156, 156)),
    "I;16B tiff": ("deep_be.tiff", jpeg_bytes(constant("I;16B", 40000), format="TIFF"), (156, 156, 156)),
    "I tiff": ("int32.tiff", jpeg_bytes(constant("I", 2**30), format="TIFF"), (128, 128, 128)),  # 2^30 >> 23
    "F tiff": ("float.tiff", jpeg_bytes(constant("F", 0.5), format="TIFF"), (127, 127, 127)),  # torchvision's
    "RGB 16-bit png": ("rgb48.png", rgb48_png((65535, 32768, 0)), (255, 128, 0)),
    "RGBA png": ("rgba.png", jpeg_bytes(constant("RGBA", (10, 20, 30, 0)), format="PNG"), (10, 20, 30)),
    "RGBA webp": (
        "rgba.webp",
        jpeg_bytes(constant("RGBA", (10, 20, 30, 128)), format="WEBP", lossless=True),
        (10, 20, 30),
    ),  # fmt: skip
    "CMYK jpeg": ("cmyk.jpg", jpeg_bytes(constant("CMYK", (0, 0, 0, 0)), quality=95), None),
    "CMYK tiff": ("cmyk.tiff", jpeg_bytes(constant("CMYK", (0, 0, 0, 0)), format="TIFF"), (255, 255, 255)),
    "YCbCr jpeg": ("ycbcr.jpg", jpeg_bytes(constant("RGB", (10, 20, 30)), quality=100), None),
}
TRAIN_TRANSFORMS = {
    "crop": RandomResizedCropFlip(16),
    "crop, gpu path (worker side)": EncodedRandomResizedCropFlip(16),
    "val": ResizeCenterCrop(16),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_mode_decodes_to_rgb_uint8_scaled_from_its_own_range(case):
    _, data, rgb = CASES[case]
    image = decode_rgb(data)
    assert image.dtype == torch.uint8 and image.shape == (3, SIZE[1], SIZE[0])
    if rgb is not None:
        assert image.flatten(1).unique(dim=1).squeeze(1).tolist() == list(rgb)
    for name, transform in TRAIN_TRANSFORMS.items():
        out = transform(data)
        if not isinstance(out, torch.Tensor):  # a JPEG nvJPEG reads: decoded where the batch is (here, the CPU)
            out = EncodedBatch.collate([out]).decode("cpu")[0]
        assert out.dtype == torch.uint8 and out.shape == (3, 16, 16), name


@pytest.fixture(scope="module")
def every_mode(tmp_path_factory) -> Path:
    """root/{train,val}/<class>/ holding every case, split over two classes."""
    root = tmp_path_factory.mktemp("modes")
    for split in ("train", "val"):
        for n, (name, data, _) in enumerate(CASES.values()):
            folder = root / split / ("even" if n % 2 == 0 else "odd")
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
    return root


def assert_every_mode_read(data: DataConfig) -> None:
    """Train and val of ``data`` deliver every image of :data:`CASES` as uint8, none skipped."""
    with build_loaders(data, batch_size=len(CASES)) as loaders:
        loaders.set_epoch(0)
        for loader in (loaders.train, loaders.val):
            batches = list(loader)
            assert sum(len(b.labels) for b in batches) == len(CASES)
            assert sum(b.skipped for b in batches) == 0, [p for b in batches for p in b.skipped_paths]
            assert all(b.images.dtype == torch.uint8 for b in batches)


def test_every_mode_trains_and_validates_with_nothing_skipped(every_mode):
    assert_every_mode_read(data_config("imagefolder", root=str(every_mode), workers=2, image_size=16))


@pytest.mark.parametrize("crops", [1, 10])
def test_every_mode_evaluates_with_nothing_skipped(every_mode, crops):
    protocol = EvalProtocol(crops=crops, crop=16, resize=18, interpolation="bilinear", preprocessing="torch")
    found = build_eval_loader("imagefolder", str(every_mode), protocol, batch_size=6, workers=0)
    batches = list(found.loader)
    assert sum(len(b.labels) for b in batches) == len(CASES) and sum(b.skipped for b in batches) == 0
    assert all(b.images.dtype == torch.uint8 for b in batches)
    # In file order (one process reads the split in order): each constant image keeps its colour.
    expected = {name: rgb for name, _, rgb in CASES.values()}
    files = [Path(path).name for path, _ in found.loader.dataset.samples]
    images = [image for b in batches for image in b.images]
    sizes = [size for b in batches for size in (b.sizes.tolist() if crops == 10 else [[16, 16]] * len(b.labels))]
    for name, image, (height, width) in zip(files, images, sizes, strict=True):
        if expected[name] is not None:
            assert image[:, :height, :width].flatten(1).unique(dim=1).squeeze(1).tolist() == list(expected[name]), name


def test_every_mode_reads_from_shards_with_nothing_skipped(every_mode, tmp_path):
    to_shards(every_mode, tmp_path, shard_size=5)
    assert_every_mode_read(data_config("imagenet_shards", root=str(tmp_path), workers=0, image_size=16))


# --- a loader worker that raises --------------------------------------------------------------


class Raises(Dataset):
    """A dataset with a bug: its worker raises (NotImplementedError is a RuntimeError)."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int):
        raise NotImplementedError("compute_index_ranges_weights not implemented for 'UInt16'")


@pytest.fixture
def raising_loader():
    """A loader over :class:`Raises` with one worker, stopped at the end (not left to the garbage
    collector, which would cost torch's 5 s join timeout: data.dataloader.DataLoader.close)."""
    loader = DataLoader(Raises(), num_workers=1, persistent_workers=True)
    yield loader
    loader.close()


def test_an_exception_in_a_live_worker_keeps_its_cause_and_is_not_blamed_on_workers(raising_loader, capsys):
    expected = pytest.raises(NotImplementedError, match="Caught NotImplementedError in DataLoader worker")
    with expected as raised, one_line_errors("eval.py"):
        list(raising_loader)
    assert "compute_index_ranges_weights" in str(raised.value)  # torch's message holds the worker's traceback
    assert "lower data.workers" not in capsys.readouterr().err


def test_training_words_it_as_a_dead_worker_and_the_cause_comes_back(raising_loader, capsys):
    """train.py: resnet.engine.run turns any 'DataLoader worker' error into LoaderWorkerDied."""
    expected = pytest.raises(NotImplementedError, match="compute_index_ranges_weights")
    with expected, one_line_errors("train.py", training=True):
        try:
            list(raising_loader)
        except RuntimeError as err:
            raise LoaderWorkerDied(f"{str(err).splitlines()[0]}: lower data.workers or batch_size") from None
    assert "lower data.workers" not in capsys.readouterr().err


def test_a_dead_worker_still_says_what_to_lower(capsys):
    with pytest.raises(SystemExit) as ended, one_line_errors("eval.py"):
        raise RuntimeError("DataLoader worker (pid 123) was killed by signal 9 (SIGKILL)")
    assert ended.value.code == 1
    assert "lower data.workers or batch_size" in capsys.readouterr().err


def test_deep_values_are_scaled_not_clipped():
    """PIL's convert("RGB") clips 16-bit grey at 255: a 16-bit ramp would be all white."""
    ramp = np.linspace(0, 65535, SIZE[0] * SIZE[1]).astype(np.uint16).reshape(SIZE[1], SIZE[0])
    image = decode_rgb(jpeg_bytes(Image.fromarray(ramp), format="PNG"))
    assert torch.equal(image[0], torch.from_numpy((ramp >> 8).astype(np.uint8)))
