"""data.decode=gpu, the parts that run without a GPU: what the workers send (bytes, the same boxes
and flips as the CPU path), how batches carry them, the decode + crop + resize + flip on CPU
tensors against the CPU path, and the one-line refusals."""

from __future__ import annotations

import pytest
import torch

from data import build_loaders
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
from resnet.config import ConfigError
from resnet.engine.run import train
from tests.compose import compose_config
from tests.imagegen import jpeg_bytes, make_folder, smooth_image
from tests.test_train import tiny_overrides


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
    (fixed-point weights) differs by at most 1 level for bilinear, 2 for bicubic's wider kernel."""
    torch.manual_seed(0)
    transform = EncodedRandomResizedCropFlip(48, interpolation=interpolation)
    files = [jpeg_bytes(smooth_image(200 + 37 * i, 150 + 11 * i, seed=i), quality=90) for i in range(6)]
    files.append(jpeg_bytes(smooth_image(90, 70).convert("CMYK")))  # decoded by the worker
    items = [transform(data) for data in files]
    batch = collate_encoded([(item, i % 3) for i, item in enumerate(items)] + [BadImage("x.JPEG", "truncated")])
    assert isinstance(batch.images, EncodedBatch) and len(batch.images) == 7 and batch.skipped == 1
    assert batch.images.shape == (7, 3, 48, 48) and batch.labels.tolist() == [0, 1, 2, 0, 1, 2, 0]
    out = batch.images.decode(torch.device("cpu"))
    assert out.shape == (7, 3, 48, 48) and out.dtype == torch.uint8
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
    loaders = build_loaders("imagefolder", str(tmp_path), batch_size=4, workers=0, image_size=32, decode="gpu")
    train = next(iter(loaders.train))
    assert isinstance(train.images, EncodedBatch) and train.images.shape == (4, 3, 32, 32)
    assert "decode=gpu" in loaders.protocol["train"]
    val = next(iter(loaders.val))
    assert isinstance(val.images, torch.Tensor) and val.images.shape == (4, 3, 32, 32)  # exact CPU path
    with pytest.raises(ValueError, match="no data.auto_augment"):
        build_loaders("imagefolder", str(tmp_path), batch_size=4, workers=0, decode="gpu", auto_augment="ta_wide")
