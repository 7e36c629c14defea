"""scripts/gpu_check.sh end to end, as a user runs it: the CPU smoke run of every step (the GPU
run differs in sizes and device only), and a run that cannot pass. Its figures are not judged
here beyond being there, finite and positive: on a shared CPU they mean nothing."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tests.helpers import procs

STEPS = ["environment", "parity", "race", "train", "eval", "benchmark"]
TABLE_HEAD = "| step | status | key figures | seconds |"


def check(args: list[str], out) -> tuple[object, dict, str]:
    # benchmarks.gpu_check and the train.py / eval.py it runs are forked from the tests' server where it is up
    python = procs.forking_python()
    env = {"GPU_CHECK_PYTHON": python, "PYTHON_EXEC": python} if python else {}
    done = procs.run(["bash", "scripts/gpu_check.sh", *args, "--out", out], env, timeout=240)
    report = json.loads((out / "report.json").read_text())
    return done, report, (out / "summary.md").read_text()


def positive(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


@pytest.mark.slow
def test_the_cpu_smoke_run_runs_every_step_and_reports_every_figure(tmp_path):
    done, report, summary = check(["--device", "cpu", "--quick"], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    steps = report["steps"]
    assert list(steps) == STEPS and report["ok"] and report["finished"]
    assert all(step["status"] == "ok" and step["error"] is None and step["seconds"] > 0 for step in steps.values())

    assert steps["environment"]["figures"]["cpu_cores"] >= 1 and report["env"]["torch"] == torch.__version__
    parity = steps["parity"]["figures"]
    for interpolation, limit in (("bilinear", 1), ("bicubic", 2)):
        figures = parity[interpolation]
        assert figures["limit"] == limit and 0 <= figures["max_abs_diff"] <= limit and figures["repeat_equal"]
        assert math.isfinite(figures["mean_abs_diff"]) and figures["device_part_max_abs_diff"] == 0  # same code
        assert figures["pixel_exact"] and figures["code_part_max_abs_diff"] == 0  # one device: the same pixels
        assert figures["decoder_mean_abs_diff"] == figures["decoder_max_abs_diff"] == 0  # libjpeg-turbo both times
    assert positive(parity["decode_images_per_s"]) and parity["images"] == 8
    race = steps["race"]["figures"]
    assert race["iterations"] == 2 and race["gradients_reproducible"] and race["probe"] is None
    assert race["decode_mismatches"] == race["gradient_mismatches"] == race["nonfinite_gradients"] == 0

    train, evaluation = steps["train"]["figures"], steps["eval"]["figures"]
    assert "+experiment=tv_v1" in train["overrides"] and train["epochs"] == 1 and train["amp"] == "bf16"
    assert positive(train["train_images_per_s"]) and positive(train["wall_seconds"]) and 0 <= train["top1_err"] <= 100
    assert evaluation["n_images"] == 4 and positive(evaluation["images_per_s"]) and 0 <= evaluation["top1_err"] <= 100

    bench = steps["benchmark"]["figures"]
    assert set(bench["train_images_per_s"]) == {"symmetric eager", "asymmetric eager", "asymmetric frozen eager"}
    assert all(positive(rate) for rate in bench["train_images_per_s"].values())
    assert set(bench["loader"]) == {"decode=cpu", "decode=gpu"}
    assert all(positive(row["images_per_s"]) and positive(row["cpu_cores_per_1000_images_per_s"])
               for row in bench["loader"].values())  # fmt: skip
    assert all(positive(rate) for rate in bench["eval_images_per_s"].values()) and positive(bench["eval_10crop_cost"])

    assert {p.name for p in tmp_path.iterdir()} == {"report.json", "summary.md", "bench_gpu.json", "train.log",
                                                    "eval.log"}  # fmt: skip
    lines = summary.splitlines()
    assert TABLE_HEAD in lines and "every step ok" in summary
    rows = lines[lines.index(TABLE_HEAD) + 2 : lines.index(TABLE_HEAD) + 2 + len(STEPS)]
    assert [row.split(" | ")[:2] for row in rows] == [[f"| {step}", "ok"] for step in STEPS]
    assert summary in done.stdout  # printed at the end


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA device")
def test_a_failing_step_makes_the_exit_status_non_zero_and_is_named_in_the_summary(tmp_path):
    """The check itself (--device cuda) where there is no CUDA device: the environment step fails
    with its reason, every later step is reported as skipped, the exit status is 1."""
    done, report, summary = check(["--only", "parity,train"], tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    steps = report["steps"]
    assert list(steps) == ["environment", "parity", "train"] and not report["ok"]
    assert steps["environment"]["status"] == "fail" and "sees no CUDA device" in steps["environment"]["error"]
    assert [steps[name]["status"] for name in ("parity", "train")] == ["skipped", "skipped"]
    assert "| environment | fail |" in summary and "not ok: environment, parity, train" in summary
    assert "- **environment** (fail): torch" in summary and "--device cpu --quick" in summary


def test_parity_fails_on_our_code_or_a_wrong_decoder_not_on_nvjpegs_own_rounding():
    from benchmarks.gpu_check.parity import parity_problems

    # the first H100 run's decoders: up to 37 levels apart at edges, 2.5 on average; our code not yet measured
    h100 = {"code_part_max_abs_diff": 0, "decoder_mean_abs_diff": 2.52, "decoder_max_abs_diff": 37,
            "repeat_equal": True}  # fmt: skip
    assert parity_problems("bilinear", h100) == []
    assert parity_problems("bilinear", h100 | {"code_part_max_abs_diff": 2}) == [
        "bilinear: crop_resize_flip on the device differs from the same code on the CPU by 2 levels (limit 1)"
    ]
    swapped = h100 | {"decoder_mean_abs_diff": 41.0}  # e.g. BGR for RGB, or a plane shifted
    assert parity_problems("bicubic", swapped) == [
        "bicubic: nvJPEG's images differ from libjpeg-turbo's by 41.00 levels on average (limit 4)"
    ]
    assert parity_problems("bicubic", h100 | {"repeat_equal": False}) == [
        "bicubic: two decodes of the same batch differ"
    ]
