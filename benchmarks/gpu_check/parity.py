"""The ``parity`` step: ``data.decode=gpu``'s crops against the CPU path's (:func:`step_parity`), the
batch it and the ``race`` step decode (:func:`parity_batch`), the decode's images/s and the JPEG
engine's use."""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from pathlib import Path

import torch

from benchmarks.gpu_check.check import Check, StepFailed, item_size, synchronize

# The GPU path's crops against the CPU path's: pixel-exact when within these levels (what
# tests/data/test_gpu_decode.py asks of the same code on CPU tensors). Reported, not judged: nvJPEG
# is not libjpeg-turbo, so data.decode=gpu is not pixel-exact (docs/gpu.md, "Parity").
LIMITS = {"bilinear": 1, "bicubic": 2}
CODE_LIMIT = 1  # judged: our crop/resize/flip on the device against the same code on the CPU, same pixels in
DECODER_MEAN_LIMIT = 4.0  # judged: mean |nvJPEG - libjpeg-turbo| over whole images (a wrong colour space: tens)
CROP = 224  # parity crops: no DCT-reduced decode on the CPU path for 500x375 images at this size


def parity_batch(check: Check, interpolation: str) -> tuple:
    """(files, EncodedBatch, the CPU path's images [N, 3, 224, 224], the GPU decode on an idle
    device) for ``interpolation``; the boxes and flips drawn from the same seeds on both paths."""
    if interpolation not in check.parity:
        from benchmarks.input_pipeline import write_jpegs
        from data.gpu_decode import EncodedCrop, EncodedRandomResizedCropFlip, collate_encoded
        from data.transforms import RandomResizedCropFlip

        folder = check.work / "parity"
        paths = sorted(folder.glob("*.JPEG")) or write_jpegs(folder, check.plan.parity_images, 500, 375, seed=7,
                                                             grain=40)  # fmt: skip
        files = [path.read_bytes() for path in paths]
        encoded = EncodedRandomResizedCropFlip(CROP, interpolation=interpolation)
        cpu = RandomResizedCropFlip(CROP, interpolation=interpolation)
        items, expected = [], []
        with torch.random.fork_rng(devices=[]):
            for seed, data in enumerate(files):
                torch.manual_seed(seed)
                item = encoded(data)
                torch.manual_seed(seed)
                expected.append(cpu(data))
                if not isinstance(item, EncodedCrop):
                    raise StepFailed("a generated baseline JPEG was not sent to nvJPEG (nvjpeg_reads)")
                torch.manual_seed(seed)
                if (item.box, item.flip) != cpu.sample(*reversed(item_size(data))):
                    raise StepFailed(f"image {seed}: the GPU path drew another box or flip than the CPU path")
                items.append(item)
        batch = collate_encoded([(item, 0) for item in items]).images
        reference = batch.decode(check.device)
        synchronize(check.device)
        check.parity[interpolation] = (files, batch, torch.stack(expected), reference)
    return check.parity[interpolation]


def step_parity(check: Check) -> tuple[dict, str]:
    """GPU crops against the CPU path's, in three parts, each measured on its own:

    * the decoders: nvJPEG's whole images against libjpeg-turbo's. Their IDCT and chroma
      upsampling differ (by up to 37 levels at edges on an H100), so ``data.decode=gpu`` is not
      pixel-exact; what is judged is their mean, which a wrong colour space or a shifted plane
      would push to tens of levels;
    * our code on the device: :func:`crop_resize_flip` of the GPU's decoded images, against the
      same function on the CPU from the same pixels. This is what this project can get wrong on a
      GPU, and it must agree within :data:`CODE_LIMIT`;
    * the float resize against the CPU path's uint8 one, the same on every device: the GPU path's
      code on CPU tensors (``decode("cpu")``). For bicubic on grainy JPEGs the uint8 kernel rounds
      and clamps between its two passes where the first overshoots [0, 255], so there that part
      alone reaches ~5 levels at a few pixels in 100,000 (within 2 on smooth images,
      tests/data/test_gpu_decode.py).

    The whole difference from the CPU path is reported too, at every pixel where the third part
    is within :data:`LIMITS` (``pixel_exact``: within them there as well)."""
    from torchvision.io import ImageReadMode, decode_jpeg

    from data.gpu_decode import EncodedBatch, crop_resize_flip

    figures: dict = {"images": check.plan.parity_images, "crop": CROP, "jpegs": "500x375 q90 4:2:0, ~110 kB"}
    problems = []
    for interpolation, limit in LIMITS.items():
        files, batch, expected, decoded = parity_batch(check, interpolation)
        again = batch.decode(check.device)
        synchronize(check.device)
        same_code = batch.decode("cpu").int()  # libjpeg-turbo and the float resize: the GPU path's code
        decoded, expected = decoded.cpu().int(), expected.int()
        diff = (decoded - expected).abs()
        resize_part = (same_code - expected).abs()
        judged = resize_part <= limit
        worst = int(diff[judged].max()) if judged.any() else 0
        whole = batch.decode_whole(check.device)
        on_device = crop_resize_flip(whole, batch.boxes, batch.flips, batch.size, interpolation).cpu().int()
        on_cpu = crop_resize_flip([image.cpu() for image in whole], batch.boxes, batch.flips, batch.size,
                                  interpolation).int()  # fmt: skip
        decoders = torch.cat([(image.cpu().int() - decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                                                                mode=ImageReadMode.RGB).int()).abs().flatten()
                              for image, data in zip(whole, files)])  # fmt: skip
        figures[interpolation] = {
            "limit": limit,
            "max_abs_diff": worst,  # against the CPU path, at the pixels judged
            "pixel_exact": worst <= limit,
            "mean_abs_diff": float(diff.float().mean()),
            "max_abs_diff_all_pixels": int(diff.max()),
            "above_limit_fraction": float((diff > limit).float().mean()),
            "code_part_max_abs_diff": int((on_device - on_cpu).abs().max()),  # judged: <= CODE_LIMIT
            "decoder_mean_abs_diff": float(decoders.float().mean()),  # judged: <= DECODER_MEAN_LIMIT
            "decoder_max_abs_diff": int(decoders.max()),
            "device_part_max_abs_diff": int((decoded - same_code).abs().max()),  # decoders and code: 0 on the CPU
            "resize_part_max_abs_diff": int(resize_part.max()),  # float vs uint8 resize, any device
            "pixels_not_judged": int((~judged).sum()),
            "repeat_equal": bool(torch.equal(batch.decode(check.device), again)),
        }
        problems += parity_problems(interpolation, figures[interpolation])

    batch: EncodedBatch = parity_batch(check, "bilinear")[1]
    with jpeg_engine_monitor(check.device) as engine:
        rate = _decode_rate(batch, check.device, check.plan.decode_seconds)
    figures["decode_images_per_s"] = rate
    figures["jpeg_engine_utilization_max_percent"] = engine.peak
    figures["nvjpeg"] = nvjpeg_version() if check.device.type == "cuda" else None
    summary = "; ".join(
        f"{i}: our code on the device {figures[i]['code_part_max_abs_diff']} (limit {CODE_LIMIT}), decoders mean "
        f"{figures[i]['decoder_mean_abs_diff']:.2f} (limit {DECODER_MEAN_LIMIT:g}) max "
        f"{figures[i]['decoder_max_abs_diff']}; against the CPU path max {figures[i]['max_abs_diff']}, "
        f"{'pixel-exact' if figures[i]['pixel_exact'] else 'not pixel-exact'} (within {figures[i]['limit']})"
        for i in LIMITS
    )
    summary += f"; {check.plan.parity_images} images; decode {rate:.0f} img/s"
    if check.device.type == "cuda":
        summary += f"; nvJPEG {figures['nvjpeg'] or '?'}; JPEG engine peak " + (
            "n/a" if engine.peak is None else f"{engine.peak}%"
        )
    if problems:
        raise StepFailed("; ".join(problems), figures, summary)
    return figures, summary


def parity_problems(interpolation: str, found: dict) -> list[str]:
    """What of one interpolation's parity figures fails the step (:func:`step_parity` says why)."""
    problems = []
    if found["code_part_max_abs_diff"] > CODE_LIMIT:
        problems.append(
            f"{interpolation}: crop_resize_flip on the device differs from the same code on the "
            f"CPU by {found['code_part_max_abs_diff']} levels (limit {CODE_LIMIT})"
        )
    if found["decoder_mean_abs_diff"] > DECODER_MEAN_LIMIT:
        problems.append(
            f"{interpolation}: nvJPEG's images differ from libjpeg-turbo's by "
            f"{found['decoder_mean_abs_diff']:.2f} levels on average (limit {DECODER_MEAN_LIMIT:g})"
        )
    if not found["repeat_equal"]:
        problems.append(f"{interpolation}: two decodes of the same batch differ")
    return problems


def _decode_rate(batch, device: torch.device, seconds: float) -> float:
    """Images/s of ``batch.decode`` (decode, crop, resize, flip), synchronised, for about ``seconds``."""
    batch.decode(device)
    synchronize(device)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or count == 0:
        batch.decode(device)
        count += len(batch)
    synchronize(device)
    return count / (time.perf_counter() - start)


class jpeg_engine_monitor(contextlib.AbstractContextManager):  # noqa: N801 - used as a function
    """The highest JPEG-engine utilisation NVML reports while the block runs (``peak``, percent),
    polled every 20 ms; None where NVML (nvidia-ml-py) or the counter is missing, or on the CPU."""

    def __init__(self, device: torch.device):
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread = None
        if device.type != "cuda":
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = _nvml_handle(pynvml, device)
            self._read = lambda: pynvml.nvmlDeviceGetJpgUtilization(self._handle)[0]
            self._read()
        except Exception:  # noqa: BLE001 - no NVML, no counter: the figure is unknown
            return
        self.peak = 0
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(0.02):
            with contextlib.suppress(Exception):
                self.peak = max(self.peak, int(self._read()))

    def __enter__(self):
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread is not None:
            time.sleep(0.2)  # the counter is an average over a sampling period
            self._stop.set()
            self._thread.join()
        return False


def _nvml_handle(pynvml, device: torch.device):
    if pynvml.nvmlDeviceGetCount() == 1:
        return pynvml.nvmlDeviceGetHandleByIndex(0)
    props = torch.cuda.get_device_properties(device)
    bus = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
    return pynvml.nvmlDeviceGetHandleByPciBusId(bus.encode())


def nvjpeg_version() -> str | None:
    """The version of the libnvjpeg this process loaded (after a CUDA decode), via nvjpegGetProperty."""
    try:
        maps = Path("/proc/self/maps").read_text()
        path = next(line.split()[-1] for line in maps.splitlines() if "libnvjpeg" in line.split()[-1])
        lib = ctypes.CDLL(path)
        parts = []
        for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
            value = ctypes.c_int()
            if lib.nvjpegGetProperty(prop, ctypes.byref(value)) != 0:
                return None
            parts.append(str(value.value))
        return ".".join(parts)
    except Exception:  # noqa: BLE001 - not found, not loadable: unknown
        return None
