"""The benchmark scripts run in their smoke configuration and write the JSON they promise.

No timing is asserted: on a shared CI machine a ratio is noise. One run of the runner
(``python -m benchmarks --quick``, in this process; ~40 s on 2 cores, most of it the two
processes end_to_end starts) covers every script and the summary.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from benchmarks import end_to_end, input_pipeline, model_step
from benchmarks.__main__ import RUNS
from benchmarks.__main__ import main as run_benchmarks
from tests.helpers import procs


@pytest.mark.slow
def test_every_benchmark_writes_its_json(tmp_path, monkeypatch):
    if python := procs.forking_python():  # end_to_end's commands forked from the tests' server
        monkeypatch.setenv("PYTHON_EXEC", python)
    run_benchmarks(["--quick", "--out-dir", str(tmp_path)])

    for name in ("input_pipeline", "input_pipeline_110kB", "input_pipeline_photos"):
        pipeline = json.loads((tmp_path / f"bench_{name}.json").read_text())
        assert {"config", "env", "images_per_s", "rates", "ratios", "goals", "breakdown"} <= set(pipeline)
        for clock in input_pipeline.CLOCKS:
            assert set(pipeline["ratios"][clock]) == {label for label, *_ in input_pipeline.RATIOS}
            assert all(rate > 0 for rate in pipeline["images_per_s"][clock].values())
        assert "whole transform us" in pipeline["breakdown"]
        assert "decode (the crop's window only) us" in pipeline["breakdown"]
    assert (
        pipeline["config"]["photos"]
        and not json.loads((tmp_path / "bench_input_pipeline.json").read_text())["config"]["photos"]
    )

    e2e = json.loads((tmp_path / "bench_end_to_end.json").read_text())
    assert {"config", "env", "commands", "images_per_s", "runs", "ratios", "goals", "ddp_overhead"} <= set(e2e)
    ran = {"train.py", "reference train"}  # --quick: the train pair only
    assert set(e2e["images_per_s"]) == set(e2e["commands"]) == ran
    assert set(e2e["ratios"]) == {label for label, num, den, *_ in end_to_end.RATIOS if {num, den} <= ran}
    assert e2e["ratios"].keys() == {"train.py / reference train"}
    assert e2e["ddp_overhead"] is None
    assert all(run["images_per_s"] > 0 for runs in e2e["runs"].values() for run in runs)

    step = json.loads((tmp_path / "bench_model_step.json").read_text())
    assert set(step["modes"]) == {f"{mode} {clock}" for mode in ("train", "infer") for clock in model_step.CLOCKS}

    shards = json.loads((tmp_path / "bench_shards.json").read_text())
    assert set(shards["ratios"]) == {
        "shards / folders train",
        "shards / folders read only",
        "shards verified / unverified train",
        "shards worker-shared / feeder-shared train",
    }
    assert all(rate > 0 for rate in shards["images_per_s_per_worker"].values())

    alternatives = json.loads((tmp_path / "bench_decode_alternatives.json").read_text())
    assert {"whole decode", "window decode", "window decode, fast"} <= set(alternatives["us_per_image"])
    assert 0 < alternatives["crop_bottom_fraction_mean"] <= 1 and alternatives["fast_pixels_off"]["max"] > 0

    save = json.loads((tmp_path / "bench_checkpoint_save.json").read_text())
    assert save["save_s"] > 0 and save["load_s"] > 0 and save["bytes"] > 40 * 2**20  # resnet18's weights, momentum, EMA
    assert save["save_share"] == pytest.approx(save["save_s"] / (60 * save["checkpoint_minutes"] + save["save_s"]))

    checks = json.loads((tmp_path / "bench_file_checks.json").read_text())
    assert {"end check / training sample", "checked / unchecked training samples per s"} == set(checks["ratios"])
    assert all(row["worker_peak_rss_mib"] > 0 for row in checks["memory"].values())
    (now,) = [row for label, row in checks["memory"].items() if label.endswith("(now)")]
    assert len(now["skipped"]) == 1 and "not read" in now["skipped"][0]  # the large file: skipped unread

    check = json.loads((tmp_path / "bench_unreadable_check.json").read_text())
    assert (
        set(check["ratios"]) == {"all-reduce with / without the counts", "check / step"}
        and check["us"]["policy call"] > 0
    )

    summary = json.loads((tmp_path / "bench_summary.json").read_text())
    # --quick measures none of end_to_end's ratios with a goal (10-crop cost is the one it has)
    assert {row["benchmark"] for row in summary} == set(RUNS) - {"end_to_end"}
    assert all({"ratio", "value", "goal", "met"} <= set(row) for row in summary)


@pytest.mark.slow
def test_the_gpu_benchmark_measures_everything_it_promises(tmp_path):
    """Its smoke run on the CPU (--device cpu --quick): every measurement runs and lands in the JSON,
    data.decode=gpu's batches decoded by the same torchvision call on CPU tensors."""
    from benchmarks import gpu

    result = gpu.main(["--device", "cpu", "--quick", "--out", str(tmp_path / "gpu.json")])
    saved = json.loads((tmp_path / "gpu.json").read_text())
    assert saved["train_images_per_s"].keys() == {f"{scheme} eager" for scheme in gpu.SCHEMES}
    ratios = saved["train_time_ratio_to_symmetric"]
    assert ratios.keys() == saved["train_images_per_s"].keys() and all(0 < r < math.inf for r in ratios.values())
    assert saved["loop"]["images_per_s"] > 0 and 0 < saved["loop"]["time_ratio_to_bare_step"] < math.inf
    assert saved["loader"].keys() == {"decode=cpu", "decode=gpu"}
    for row in saved["loader"].values():
        assert row["images_per_s"] > 0 and row["cpu_cores_busy"] > 0  # the live workers' CPU time is counted
    assert saved["eval_images_per_s"].keys() == {"1-crop", "10-crop"} and 0 < result["eval_10crop_cost"] < math.inf


def test_the_gpu_benchmark_without_cuda_is_one_line(monkeypatch):
    from benchmarks import gpu

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(SystemExit, match=r"^python -m benchmarks.gpu measures a CUDA device .* --device cpu --quick"):
        gpu.main([])


def test_grid_candidate_shift_moves_the_input_where_asymmetric_padding_samples_on_the_drawn_steps():
    import torch.nn.functional as F

    from benchmarks.grid_robust import ShiftedHalf
    from resnet import build_model, with_padding
    from resnet.grid import draw

    symmetric = build_model("resnet_small", num_classes=10, in_chans=1, padding="symmetric").eval()
    asymmetric = with_padding(symmetric, "asymmetric")
    seen = []
    shifted = ShiftedHalf(_Recorder(symmetric.conv1, seen), seed=3)
    x = torch.randn(2, 1, 28, 28)
    for step in range(8):
        shifted(x)
        moved = seen[-1].shape == x.shape and not torch.equal(seen[-1], x)
        assert moved == bool(draw(3, step, 2))
    assert {bool(draw(3, step, 2)) for step in range(8)} == {False, True}
    # moved, the symmetric stem samples the image where the asymmetric one does, but for row and column 0
    stem = symmetric.conv1(F.pad(x[..., 1:, 1:], (0, 1, 0, 1)))
    assert torch.allclose(stem[..., 1:, 1:], asymmetric.conv1(x)[..., 1:, 1:], atol=1e-5)
    shifted.eval()
    shifted(x)
    assert torch.equal(seen[-1], x)  # evaluation sees the image as it is


class _Recorder(torch.nn.Module):
    def __init__(self, module, seen):
        super().__init__()
        self.module, self.seen = module, seen

    def forward(self, x):
        self.seen.append(x)
        return self.module(x)
