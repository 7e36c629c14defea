"""The ``race`` step: docs/gpu.md's check of item 2, the decode under a concurrent backward, and
torchvision #9606's probe."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from benchmarks.gpu_check.check import Check, Inconclusive, StepFailed, item_size, synchronize
from benchmarks.gpu_check.parity import parity_batch


def step_race(check: Check) -> tuple[dict, str]:
    from resnet import build_model

    plan, device = check.plan, check.device
    files, batch, _, reference = parity_batch(check, "bilinear")
    flags = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        torch.manual_seed(0)
        model = build_model(plan.race_arch, padding="symmetric").to(device, memory_format=torch.channels_last)
        x = torch.randn(plan.race_batch, 3, plan.race_size, plan.race_size, device=device)
        x = x.contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (plan.race_batch,), device=device)
        params = [p for p in model.parameters() if p.requires_grad]

        def step() -> None:  # queued; every reference to the activations is gone when it returns
            model.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            loss.backward()

        def gradients() -> torch.Tensor:
            return torch.cat([p.grad.flatten() for p in params])

        # The reference: the same step with the decode after a synchronisation, twice (cuDNN
        # deterministic: equal bit for bit, or the gradient comparison cannot be made here).
        refs = []
        for _ in range(2):
            step()
            synchronize(device)
            refs.append(gradients())
            batch.decode(device)
            synchronize(device)
        reproducible = bool(torch.equal(*refs))
        images_wrong = grads_wrong = nonfinite = 0
        for _ in range(plan.race_iterations):
            step()
            images = batch.decode(device)  # while the backward runs on the training stream
            synchronize(device)
            images_wrong += not torch.equal(images, reference)
            grads = gradients()
            nonfinite += not bool(torch.isfinite(grads).all())
            grads_wrong += reproducible and not torch.equal(grads, refs[0])
    finally:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = flags
    figures: dict = {
        "arch": plan.race_arch, "batch": plan.race_batch, "iterations": plan.race_iterations,
        "images_decoded": plan.race_iterations * len(batch), "decode_mismatches": images_wrong,
        "gradient_mismatches": grads_wrong if reproducible else None, "nonfinite_gradients": nonfinite,
        "gradients_reproducible": reproducible,
    }  # fmt: skip
    summary = (f"{plan.race_iterations} {plan.race_arch} steps x {len(batch)} images: {images_wrong} decodes, "
               + (f"{grads_wrong} gradients" if reproducible else "gradients not comparable (not reproducible)")
               + f" differ; {nonfinite} non-finite")  # fmt: skip
    problems = []
    if images_wrong or grads_wrong or nonfinite:
        problems.append(f"under a concurrent backward {images_wrong} decoded batches differ from the idle decode, "
                        f"{grads_wrong} gradients from the synchronised step's, {nonfinite} hold non-finite "
                        "values: the decode and the backward share memory (docs/gpu.md, item 2)")  # fmt: skip
    if device.type == "cuda":
        probe = race_probe(batch, files, device, plan.probe_trials)
        figures["probe"] = probe
        summary += (
            f"; probe: {probe['direct_corrupted']}/{probe['reductions']} reductions corrupted by the "
            f"decode on the training stream (old code), {probe['fixed_corrupted']} by EncodedBatch.decode"
        )
        if probe["fixed_corrupted"]:
            problems.append(f"the probe: EncodedBatch.decode corrupted {probe['fixed_corrupted']} of "
                            f"{probe['reductions']} reductions still queued on the training stream")  # fmt: skip
    else:
        figures["probe"] = None
        summary += "; probe: CUDA only"
    if problems:
        raise StepFailed("; ".join(problems), figures, summary)
    if device.type == "cuda" and not figures["probe"]["direct_corrupted"]:
        raise Inconclusive("the probe saw no corruption even through the unfixed call (decode_jpeg on the training "
                           "stream): on this GPU and torchvision it cannot see the race, so the passing "
                           "checks above prove little", figures, summary)  # fmt: skip
    return figures, summary


def race_probe(batch, files: list[bytes], device: torch.device, trials: int) -> dict:
    """torchvision #9606's pattern. Tensors the size of the decoded images, filled with 7s; a long
    kernel (``torch.cuda._sleep``) and then one sum per tensor queued on the training stream; the
    tensors freed (their blocks go back to the training stream's pool at once); a decode; a
    synchronisation; how many sums are not 7 x numel. ``direct``: ``decode_jpeg`` called with the
    training stream current (the code before the fix); ``fixed``: :meth:`EncodedBatch.decode`."""
    from torchvision.io import ImageReadMode, decode_jpeg

    views = [batch.data[a:b] for a, b in zip(batch.offsets, batch.offsets[1:])]
    shapes = [(3, height, width) for width, height in map(item_size, files)]
    # Sleep well past the decode: calibrate the sleep's cycles and time one decode.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    cycles_per_ms = 10_000_000 / max(start.elapsed_time(end), 1e-3)
    decode_jpeg(views, mode=ImageReadMode.RGB, device=device)
    torch.cuda.synchronize(device)
    t = time.perf_counter()
    decode_jpeg(views, mode=ImageReadMode.RGB, device=device)
    torch.cuda.synchronize(device)
    sleep_ms = max(200.0, 5000 * (time.perf_counter() - t))

    def corrupted(decode: Callable[[], object]) -> int:
        count = 0
        for _ in range(trials):
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
            tensors = [torch.full(shape, 7, dtype=torch.uint8, device=device) for shape in shapes]
            torch.cuda._sleep(int(cycles_per_ms * sleep_ms))
            sums = [tensor.sum(dtype=torch.int64) for tensor in tensors]
            expected = [7 * tensor.numel() for tensor in tensors]
            del tensors
            images = decode()
            torch.cuda.synchronize(device)
            count += sum(int(s) != e for s, e in zip(sums, expected))
            del images
        return count

    direct = corrupted(lambda: decode_jpeg(views, mode=ImageReadMode.RGB, device=device))
    fixed = corrupted(lambda: batch.decode(device))
    return {"trials": trials, "reductions": trials * len(views), "sleep_ms": round(sleep_ms, 1),
            "direct_corrupted": direct, "fixed_corrupted": fixed}  # fmt: skip
