"""data.decode=gpu, the parts that run without a GPU: what the workers send (bytes, the same boxes
and flips as the CPU path), how batches carry them (a few tensors, pinned), the decode + crop +
resize + flip on CPU tensors against the CPU path, the streams the CUDA decode runs on (with fake
streams), and the one-line refusals. docs/gpu.md maps each guarded fault to its test here."""

from __future__ import annotations

import contextlib
import multiprocessing.reduction

import pytest
import torch
import torch.nn.functional as F
import torchvision.io
from torch.multiprocessing import reductions
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.data import DataLoader, Dataset
from torch.utils.data._utils.pin_memory import pin_memory

from data import build_loaders, gpu_decode
from data.batch import BadImage
from data.decode import decode_resized_crop
from data.gpu_decode import (
    EncodedBatch,
    EncodedCrop,
    EncodedRandomResizedCropFlip,
    check_decode,
    collate_encoded,
    nvjpeg_reads,
)
from data.transforms import RandomResizedCropFlip
from resnet.config import ConfigError, data_config
from resnet.engine.run import train
from tests.helpers.compose import compose_config
from tests.helpers.imagegen import jpeg_bytes, make_folder, smooth_image
from tests.helpers.training import tiny_overrides


def test_workers_send_bytes_with_the_boxes_and_flips_of_the_cpu_path():
    data = jpeg_bytes(smooth_image(500, 375, seed=2), quality=90)
    encoded, cpu = EncodedRandomResizedCropFlip(64), RandomResizedCropFlip(64)
    for seed in range(20):
        torch.manual_seed(seed)
        sample = encoded(data)
        torch.manual_seed(seed)
        box, flip = cpu.sample(375, 500)
        assert isinstance(sample, EncodedCrop) and (sample.box, sample.flip, sample.size) == (box, flip, 64)
        assert sample.data.dtype == torch.uint8 and bytes(sample.data.numpy()) == data


def test_files_nvjpeg_does_not_read_are_decoded_by_the_worker():
    image = smooth_image(120, 90)
    assert nvjpeg_reads(jpeg_bytes(image, quality=90)) and nvjpeg_reads(jpeg_bytes(image.convert("L")))
    for other in (jpeg_bytes(image.convert("CMYK")), jpeg_bytes(image, format="PNG"), b"", b"\xff\xd8\xff"):
        assert not nvjpeg_reads(other)
    sample = EncodedRandomResizedCropFlip(32)(jpeg_bytes(image.convert("CMYK")))
    assert isinstance(sample, torch.Tensor) and sample.shape == (3, 32, 32)


def test_progressive_jpegs_are_decoded_by_the_workers():
    """nvJPEG decodes progressive JPEGs (SOF2) one by one, their Huffman decoding on the main
    process's CPU: the workers decode them instead, to the CPU path's pixels, bit for bit."""
    data = jpeg_bytes(smooth_image(120, 90, seed=3), progressive=True, quality=90)
    assert data[:2] == b"\xff\xd8" and b"\xff\xc2" in data and not nvjpeg_reads(data)
    for seed in range(3):
        torch.manual_seed(seed)
        sample = EncodedRandomResizedCropFlip(32)(data)
        torch.manual_seed(seed)
        assert isinstance(sample, torch.Tensor) and torch.equal(sample, RandomResizedCropFlip(32)(data))


@pytest.mark.parametrize(("interpolation", "levels"), [("bilinear", 1), ("bicubic", 2)])
def test_decoding_a_batch_matches_the_cpu_path_within_rounding(interpolation, levels):
    """The same call the GPU makes, on CPU tensors: torchvision's decode, then the crop, antialiased
    float resize with the configured interpolation, rounding and flip. The CPU path's uint8 kernel
    (fixed-point weights) differs by at most 1 level for bilinear, 2 for bicubic's wider kernel.
    Images the workers decode (a progressive JPEG first, a CMYK one in the middle) keep their
    places in the batch."""
    torch.manual_seed(0)
    transform = EncodedRandomResizedCropFlip(48, interpolation=interpolation)
    files = [jpeg_bytes(smooth_image(200 + 37 * i, 150 + 11 * i, seed=i), quality=90) for i in range(6)]
    files.insert(0, jpeg_bytes(smooth_image(100, 80, seed=7), progressive=True))  # decoded by the worker
    files.insert(4, jpeg_bytes(smooth_image(90, 70).convert("CMYK")))  # decoded by the worker
    items = [transform(data) for data in files]
    assert [isinstance(item, EncodedCrop) for item in items] == [False, True, True, True, False, True, True, True]
    batch = collate_encoded([(item, i % 3) for i, item in enumerate(items)] + [BadImage("x.JPEG", "truncated")])
    assert isinstance(batch.images, EncodedBatch) and len(batch.images) == 8 and batch.skipped == 1
    assert batch.images.shape == (8, 3, 48, 48) and batch.labels.tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    out = batch.images.decode(torch.device("cpu"))
    assert out.shape == (8, 3, 48, 48) and out.dtype == torch.uint8
    for data, item, image in zip(files, items, out):
        if isinstance(item, EncodedCrop):
            expected = decode_resized_crop(data, None, item.box, 48, interpolation, flip=item.flip, roi=False)
            assert item.interpolation == interpolation and (image.int() - expected.int()).abs().max() <= levels
            moved = decode_resized_crop(data, None, item.box, 48, interpolation, flip=not item.flip, roi=False)
            assert not torch.equal(image, moved)  # the flip is the one drawn
        else:
            assert torch.equal(image, item)


def test_an_all_bad_batch_is_empty_and_the_loop_can_check_it():
    batch = collate_encoded([BadImage("a.JPEG", "empty file"), BadImage("b.JPEG", "truncated")])
    assert batch.images.shape[0] == 0 and len(batch.labels) == 0 and batch.skipped == 2


def test_a_run_without_a_cuda_device_gets_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"^data.decode=gpu decodes .* device is cpu: pass data.decode=cpu$"):
        check_decode("gpu", "cpu")
    with pytest.raises(ValueError, match="pass data.decode=cpu or gpu"):
        check_decode("nvjpeg")
    assert check_decode("gpu", "cuda:1") == "gpu" and check_decode("gpu") == "gpu"
    make_folder(tmp_path / "train", {"a": 4, "b": 4})
    make_folder(tmp_path / "val", {"a": 1, "b": 1})
    with pytest.raises(ConfigError, match=r"^data.decode=gpu decodes .* pass data.decode=cpu$"):
        train(compose_config("train", *tiny_overrides(tmp_path, tmp_path / "run", "data.decode=gpu")))
    assert not (tmp_path / "run" / "last.pt").exists()


def test_the_loaders_send_encoded_training_batches_and_decoded_val_batches(tmp_path):
    make_folder(tmp_path / "train", {"a": 4, "b": 4}, size=(80, 60))
    make_folder(tmp_path / "val", {"a": 2, "b": 2}, size=(80, 60))
    loaders = build_loaders(
        data_config("imagefolder", root=str(tmp_path), image_size=32, decode="gpu", workers=0), batch_size=4
    )
    train = next(iter(loaders.train))
    assert isinstance(train.images, EncodedBatch) and train.images.shape == (4, 3, 32, 32)
    assert "decode=gpu" in loaders.protocol["train"]
    val = next(iter(loaders.val))
    assert isinstance(val.images, torch.Tensor) and val.images.shape == (4, 3, 32, 32)  # exact CPU path
    with pytest.raises(ValueError, match="no data.auto_augment"):
        build_loaders(
            data_config("imagefolder", root=str(tmp_path), decode="gpu", auto_augment="ta_wide", workers=0),
            batch_size=4,
        )


# --- how a batch crosses from a worker (docs/gpu.md, item 3) ------------------------------------


class _Files(Dataset):
    def __init__(self, files: list[bytes], transform):
        self.files, self.transform = files, transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int):
        return self.transform(self.files[index]), index % 2


def test_a_batch_crosses_from_a_worker_as_three_tensors_not_one_per_image(tmp_path, monkeypatch):
    """Every CPU tensor a worker sends takes a shared-memory file descriptor (torch's default
    sharing strategy); counted where they are pickled, in the worker, for batches of 8: the
    encoded bytes, the worker-decoded images and the labels, not one tensor per image."""
    log = tmp_path / "storages"

    def counting(storage):
        with open(log, "a") as f:
            f.write(f"{storage.nbytes()}\n")
        return reductions.reduce_storage(storage)

    pickler = multiprocessing.reduction.ForkingPickler
    for cls, reducer in list(pickler._extra_reducers.items()):
        if reducer is reductions.reduce_storage:  # what torch registers for every CPU storage class
            monkeypatch.setitem(pickler._extra_reducers, cls, counting)  # inherited by the forked worker
    files = [jpeg_bytes(smooth_image(60 + 3 * i, 40 + 2 * i, seed=i), quality=90) for i in range(16)]
    files[5] = jpeg_bytes(smooth_image(50, 40).convert("CMYK"))  # one image the worker decodes
    loader = DataLoader(_Files(files, EncodedRandomResizedCropFlip(16)), batch_size=8, num_workers=1,
                        collate_fn=collate_encoded, multiprocessing_context="fork")  # fmt: skip
    batches = list(loader)
    sizes = [int(n) for n in log.read_text().split()]
    assert len(batches) == 2 and [len(b.images) for b in batches] == [8, 8]
    assert len(sizes) <= 3 * len(batches), f"{len(sizes)} tensors crossed for {len(batches)} batches"
    assert sum(sizes) >= sum(map(len, files[:5] + files[6:]))  # the bytes did cross, in those few tensors
    first = batches[0].images
    assert first.data.is_shared() and first.data.numel() == first.offsets[-1] and first.decoded == [5]
    out = first.decode(torch.device("cpu"))
    assert out.shape == (8, 3, 16, 16) and torch.equal(out[5], first.pixels[0])


def test_the_pin_memory_thread_pins_a_batch_as_two_tensors(monkeypatch):
    """torch's pin-memory thread calls ``pin_memory(batch)``: a namedtuple field by field, and an
    object's own ``pin_memory()``. Without one, an EncodedBatch stayed in pageable memory."""
    pinned = []

    def fake_pin(self, *args, **kwargs):  # no CUDA here: a copy that says it was pinned
        copy = self.clone()
        pinned.append(copy)
        return copy

    monkeypatch.setattr(torch.Tensor, "pin_memory", fake_pin)
    transform = EncodedRandomResizedCropFlip(24)
    files = [jpeg_bytes(smooth_image(80, 60, seed=i), quality=90) for i in range(3)]
    files.append(jpeg_bytes(smooth_image(60, 50).convert("CMYK")))
    batch = collate_encoded([(transform(data), 0) for data in files])
    moved = pin_memory(batch)  # what torch.utils.data's pin-memory thread does with every batch
    assert isinstance(moved.images, EncodedBatch) and moved.images is not batch.images
    assert any(t is moved.images.data for t in pinned) and any(t is moved.images.pixels for t in pinned)
    assert any(t is moved.labels for t in pinned) and len(pinned) == 3
    assert torch.equal(moved.images.decode("cpu"), batch.images.decode("cpu"))


# --- the CUDA decode's streams (docs/gpu.md, item 2), with fakes --------------------------------


def test_the_cuda_decode_runs_on_a_side_stream_ordered_both_ways_with_the_training_stream(monkeypatch):
    """torchvision's CUDA decode allocates its outputs on the current stream and writes them from a
    stream of its own that waits on nothing. The decode must run with a side stream current,
    after that stream waited for the training stream; the training stream must wait for the side
    stream before it uses the images, and each image must be recorded on the training stream so
    its memory is not handed to the next decode while the training stream may still read it."""
    events: list[str] = []

    class FakeStream:
        def __init__(self, name: str):
            self.name = name

        def wait_stream(self, other: FakeStream) -> None:
            events.append(f"{self.name}.wait_stream({other.name})")

    current = [FakeStream("training")]
    created: list[FakeStream] = []

    def new_stream(device=None, **kwargs):
        created.append(FakeStream("side"))
        return created[-1]

    @contextlib.contextmanager
    def stream(s):
        current.append(s)
        yield
        current.pop()

    real_decode = torchvision.io.decode_jpeg

    def fake_decode(inputs, mode, device):
        assert torch.device(device).type == "cuda" and isinstance(inputs, list)  # one batched call
        events.append(f"decode_jpeg with {current[-1].name} current")
        return real_decode(inputs, mode=mode, device="cpu")

    monkeypatch.setattr(torch.cuda, "Stream", new_stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current[-1])
    monkeypatch.setattr(torch.cuda, "stream", stream)
    monkeypatch.setattr(torchvision.io, "decode_jpeg", fake_decode)
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, s: events.append(f"record_stream({s.name})"))
    monkeypatch.setattr(gpu_decode, "_SIDE_STREAMS", {}, raising=False)
    transform = EncodedRandomResizedCropFlip(16)
    batch = collate_encoded([(transform(jpeg_bytes(smooth_image(64, 48, seed=i), quality=90)), 0) for i in range(3)])
    out = batch.images.decode(torch.device("cuda"))
    expected = [
        "side.wait_stream(training)",
        "decode_jpeg with side current",
        "training.wait_stream(side)",
        *["record_stream(training)"] * 3,
    ]
    assert events == expected
    events.clear()
    batch.images.decode(torch.device("cuda"))
    assert events == expected and len(created) == 1  # one dedicated side stream per device, not one a batch
    monkeypatch.undo()
    assert torch.equal(out, batch.images.decode(torch.device("cpu")))


# --- the crop/resize/flip of a batch (docs/gpu.md, item 7) --------------------------------------


def _one_image_at_a_time(images, crops):
    """The per-image loop data.decode=gpu ran before (5-6 kernels an image): the reference."""
    out = []
    for image, crop in zip(images, crops):
        top, left, height, width = crop.box
        window = image[:, top : top + height, left : left + width].unsqueeze(0).float()
        resized = F.interpolate(window, size=(crop.size, crop.size), mode=crop.interpolation, antialias=True,
                                align_corners=False)  # fmt: skip
        resized = resized.round_().clamp_(0, 255).to(torch.uint8)[0]
        out.append(resized.flip(-1) if crop.flip else resized)
    return torch.stack(out)


class _CountKernels(TorchDispatchMode):
    """Counts the aten ops that would launch work: a CPU stand-in for kernels. Views and allocations
    (``empty``, ``empty_strided``: no kernel on a GPU; torch before 2.14 allocates more of them
    inside interpolate) are not counted."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "aten" and not func.is_view and not func.__name__.startswith("empty"):
            self.ops.append(func.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_the_batch_resize_gives_the_pixels_of_the_per_image_loop_with_a_third_of_the_kernels(interpolation):
    torch.manual_seed(1)
    transform = EncodedRandomResizedCropFlip(40, interpolation=interpolation)
    files = [jpeg_bytes(smooth_image(120 + 13 * i, 90 + 7 * i, seed=i), quality=90) for i in range(12)]
    crops = [transform(data) for data in files]
    assert {crop.flip for crop in crops} == {False, True}
    images = torchvision.io.decode_jpeg([crop.data for crop in crops], mode=torchvision.io.ImageReadMode.RGB)
    batch = collate_encoded([(crop, 0) for crop in crops]).images
    with _CountKernels() as counted:
        out = batch.decode(torch.device("cpu"))
    assert torch.equal(out, _one_image_at_a_time(images, crops))  # bit for bit: no pixel traded
    assert len(counted.ops) <= 2 * len(crops) + 10, counted.ops  # was ~5.5 an image
    assert "index_put_" not in counted.ops and "index_put" not in counted.ops
