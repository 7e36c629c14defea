"""The ``benchmark`` step: ``python -m benchmarks.gpu`` in this process (bench_gpu.json)."""

from __future__ import annotations

import shlex

from benchmarks.gpu_check.check import Check, StepFailed


def step_benchmark(check: Check) -> tuple[dict, str]:
    from benchmarks import gpu

    argv = [*check.plan.bench_args, *shlex.split(check.args.bench_args), "--out", str(check.out / "bench_gpu.json")]
    try:
        result = gpu.main(argv)
    except SystemExit as stop:
        raise StepFailed(f"benchmarks.gpu stopped: {stop.code}") from None
    figures = {key: result.get(key) for key in ("train_images_per_s", "train_time_ratio_to_symmetric",
                                                "compile_speedup", "loop", "loader", "eval_images_per_s",
                                                "eval_10crop_cost", "goal_padding_time_ratio")}  # fmt: skip
    figures["config"], figures["json"] = result["config"], "bench_gpu.json"
    rates, ratios = result["train_images_per_s"], result["train_time_ratio_to_symmetric"]
    variant = "compiled" if "symmetric compiled" in rates else "eager"
    loader = result["loader"]
    summary = (
        f"{result['config']['arch']} {variant}: symmetric {rates[f'symmetric {variant}']:.0f} img/s, time ratio "
        f"asymmetric {ratios[f'asymmetric {variant}']:.3f}, frozen {ratios[f'asymmetric frozen {variant}']:.3f} "
        f"(goal <= {result['goal_padding_time_ratio']}); train.py's loop "
        f"{result['loop']['time_ratio_to_bare_step']:.3f}x the bare step's time; loader "
        + ", ".join(f"{name} {row['images_per_s']:.0f} img/s at {row['cpu_cores_per_1000_images_per_s']:.2f} "
                    f"cores/1k" for name, row in loader.items())
        + f"; eval 1-crop {result['eval_images_per_s']['1-crop']:.0f}, 10-crop "
        f"{result['eval_images_per_s']['10-crop']:.0f} img/s"
    )  # fmt: skip
    return figures, summary
