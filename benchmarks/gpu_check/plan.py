"""How big each step of the check is, for a device and ``--quick``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    """How big each step is, for a device and ``--quick``."""

    parity_images: int
    decode_seconds: float  # the decode's images/s loop
    race_arch: str
    race_batch: int
    race_size: int
    race_iterations: int
    probe_trials: int
    classes: int
    train_per_class: int
    val_per_class: int
    train_overrides: tuple[str, ...]
    eval_overrides: tuple[str, ...]
    bench_args: tuple[str, ...]
    train_timeout: float
    eval_timeout: float


def make_plan(device: str, quick: bool) -> Plan:
    if device == "cuda" and not quick:  # the check itself
        return Plan(
            parity_images=32, decode_seconds=3.0, race_arch="resnet50", race_batch=128, race_size=224,
            race_iterations=200, probe_trials=3, classes=4, train_per_class=96, val_per_class=16,
            train_overrides=("+experiment=tv_v1", "epochs=2", "batch_size=32", "device=cuda", "amp=bf16",
                             "channels_last=true", "compile=true", "data.decode=gpu", "log_every=4"),
            eval_overrides=("device=cuda", "amp=bf16"),
            bench_args=("--device", "cuda"), train_timeout=600, eval_timeout=240,
        )  # fmt: skip
    if device == "cuda":  # every step on the GPU, small and uncompiled: minutes
        return Plan(
            parity_images=8, decode_seconds=1.0, race_arch="resnet50", race_batch=32, race_size=224,
            race_iterations=20, probe_trials=2, classes=2, train_per_class=16, val_per_class=4,
            train_overrides=("+experiment=tv_v1", "model=resnet_tiny", "data.image_size=64", "epochs=1",
                             "batch_size=8", "device=cuda", "amp=bf16", "channels_last=true", "compile=false",
                             "data.decode=gpu"),
            eval_overrides=("device=cuda", "amp=bf16"),
            bench_args=("--device", "cuda", "--quick"), train_timeout=300, eval_timeout=180,
        )  # fmt: skip
    return Plan(  # the CPU smoke run: every step's code, tiny; its figures mean nothing
        parity_images=8, decode_seconds=0.2, race_arch="resnet_tiny", race_batch=4, race_size=32,
        race_iterations=2, probe_trials=0, classes=2, train_per_class=4, val_per_class=2,
        train_overrides=("+experiment=tv_v1", "model=resnet_tiny", "data.image_size=32", "epochs=1", "batch_size=4",
                         "data.workers=0", "device=cpu", "amp=bf16", "channels_last=true", "compile=false",
                         "data.decode=cpu"),
        eval_overrides=("device=cpu", "amp=bf16", "batch_size=4", "data.workers=0"),
        bench_args=("--device", "cpu", "--quick"), train_timeout=180, eval_timeout=120,
    )  # fmt: skip
