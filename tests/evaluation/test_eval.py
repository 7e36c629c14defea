"""eval.py: crop geometry, error arithmetic, results rows, weights sources, and whole runs
(in process, and under torchrun) on tiny generated folders with a tiny checkpoint."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.error import URLError

import pytest
import torch
import torchvision.transforms.v2.functional as TF
from omegaconf import OmegaConf

import resnet
from resnet.checkpoint import save_checkpoint
from resnet.evaluation.loader import ResizeCrop, ResizeShorter, collate_padded
from resnet.evaluation.loop import reduce_outputs, topk_correct
from resnet.evaluation.tencrop import average_crops, crop_boxes, ten_crop
from resnet.report.rows import ROW_KEYS, append_row, read_rows
from resnet.weights import FORMS, WeightsError, WeightsSpec, WeightsUnavailable, load_weights, parse_weights
from tests.helpers import procs
from tests.helpers.builtin_data import require_fashion_mnist
from tests.helpers.evaluation import compose_eval, folder_overrides, run_eval
from tests.helpers.imagegen import jpeg_bytes, make_folder, smooth_image

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """3 classes, 7 val images (odd: a 2-way split is 4 + 3), of several sizes and formats."""
    root = tmp_path_factory.mktemp("folder")
    make_folder(root / "val", {"a": 2, "b": 1, "c": 1}, size=(40, 36))
    odd = {
        "gray.JPEG": jpeg_bytes(smooth_image(36, 52, seed=1).convert("L"), quality=90),
        "cmyk.JPEG": jpeg_bytes(smooth_image(64, 30, seed=2).convert("CMYK"), quality=90),
        "png.JPEG": jpeg_bytes(smooth_image(33, 33, seed=3), format="PNG"),
    }
    for (name, data), label in zip(odd.items(), "abc"):
        (root / "val" / label / name).write_bytes(data)
    return root


# --- 10-crop geometry ---------------------------------------------------------------------


def numbered(height: int, width: int) -> torch.Tensor:
    """[1, 1, H, W] whose every pixel holds its own row * width + column."""
    return torch.arange(height * width).view(1, 1, height, width)


def test_crop_boxes_of_a_known_size():
    # ImageNet's common 500x375 resized to 256 on the shorter side: 256x341, crop 224.
    tops, lefts = crop_boxes(torch.tensor([[256, 341]]), 224)
    boxes = list(zip(tops[0].tolist(), lefts[0].tolist()))
    # top-left, top-right, bottom-left, bottom-right, centre (58.5 rounds to even, as torchvision)
    assert boxes == [(0, 0), (0, 117), (32, 0), (32, 117), (16, 58)]
    image = numbered(256, 341)
    assert torch.equal(ten_crop(image, 224)[:, 4], TF.center_crop(image, [224, 224]))


def test_ten_crop_corners_centre_and_flips_are_exact():
    image = numbered(6, 9)
    crops = ten_crop(image, 4)[0, :, 0]  # [10, 4, 4]
    boxes = ((0, 0), (0, 5), (2, 0), (2, 5), (1, 2))  # (top, left) of TL, TR, BL, BR, centre
    expected = [image[0, 0, top : top + 4, left : left + 4] for top, left in boxes]
    for i, window in enumerate(expected):
        assert torch.equal(crops[i], window), i
        assert torch.equal(crops[5 + i], window.flip(-1)), i
    assert crops[0, 0, 0] == 0 and crops[3, -1, -1] == 6 * 9 - 1  # the very corners of the image


def test_ten_crop_of_a_padded_batch_equals_each_image_alone():
    big, small = numbered(7, 10), numbered(5, 6) + 1000
    batch = collate_padded([(big[0], 0), (small[0], 1)])
    assert batch.images.shape == (2, 1, 7, 10) and batch.sizes.tolist() == [[7, 10], [5, 6]]
    crops = ten_crop(batch.images, 4, batch.sizes)
    assert torch.equal(crops[0], ten_crop(big, 4)[0]) and torch.equal(crops[1], ten_crop(small, 4)[0])
    with pytest.raises(ValueError, match="smaller than the 6 px crop"):
        ten_crop(batch.images, 6, batch.sizes)


def test_ten_crop_centre_is_the_single_crop_input():
    data = jpeg_bytes(smooth_image(75, 50), quality=90)
    resized = ResizeShorter(36, "bicubic")(data)
    assert min(resized.shape[-2:]) == 36
    single = ResizeCrop(36, 32, "bicubic")(data)
    assert torch.equal(ten_crop(resized[None], 32)[0, 4], single)


# --- top-k arithmetic ------------------------------------------------------------------------


def test_topk_errors_on_hand_made_logits():
    logits = torch.tensor(
        [
            [9.0, 1, 2, 3, 4, 5],  # label 0: top-1 hit
            [1.0, 9, 2, 3, 4, 5],  # label 5: second best -> top-5 hit only
            [6.0, 5, 4, 3, 2, 1],  # label 5: last of six -> missed by both
            [1.0, 2, 9, 3, 4, 5],  # label 2: top-1 hit
        ]
    )
    labels = torch.tensor([0, 5, 5, 2])
    assert topk_correct(reduce_outputs(logits, 1, num_classes=6), labels).tolist() == [2, 3]
    # A head with one class more than the data (TF-slim's 1001): column 0 is background.
    with_background = torch.cat([torch.full((4, 1), 99.0), logits], dim=1)
    assert topk_correct(reduce_outputs(with_background, 1, num_classes=6), labels).tolist() == [2, 3]


def test_ten_crops_average_softmax():
    # 9 crops lean to class 0, one is sure of class 1: the mean probability picks class 1,
    # where a vote of the crops would pick class 0.
    leaning, sure = torch.tensor([0.2, 0.0, -5.0]), torch.tensor([0.0, 10.0, -5.0])
    logits = torch.stack([leaning] * 9 + [sure])
    scores = average_crops(logits, 10)
    torch.testing.assert_close(scores[0], logits.softmax(-1).mean(0))
    assert scores.argmax().item() == 1 and logits.argmax(-1).mode().values.item() == 0
    two_images = average_crops(torch.cat([logits, logits.flip(-1)]), 10)  # an image's crops are adjacent
    assert two_images.shape == (2, 3)
    torch.testing.assert_close(two_images[1], logits.flip(-1).softmax(-1).mean(0))


# --- results rows ----------------------------------------------------------------------------


def a_row(**changes) -> dict:
    row = dict.fromkeys(ROW_KEYS, "x")
    return {**row, "weights_source": "timm", "crops": 10, "top1_err": 21.5, "padding": {"stem_conv": "same"}, **changes}


def test_results_rows_append_and_read_back(tmp_path):
    path = tmp_path / "deep" / "eval.jsonl"
    append_row(path, a_row(arch="resnet50"))
    append_row(path, a_row(arch="resnet101"))
    rows = read_rows(path)
    assert [r["arch"] for r in rows] == ["resnet50", "resnet101"] and list(rows[0]) == list(ROW_KEYS)
    assert rows[0]["padding"] == {"stem_conv": "same"} and rows[0]["top1_err"] == 21.5
    with open(path, "a") as f:
        f.write('{"arch": "cut sh')  # a write cut short: skipped
    assert len(read_rows(path)) == 2
    assert read_rows(tmp_path / "none.jsonl") == []


def test_results_rows_refuse_missing_or_extra_keys(tmp_path):
    row = a_row()
    del row["git_commit"]
    with pytest.raises(ValueError, match="missing key.*git_commit"):
        append_row(tmp_path / "r.jsonl", row)
    with pytest.raises(ValueError, match="unexpected key.*loss"):
        append_row(tmp_path / "r.jsonl", a_row(loss=1.0))
    with pytest.raises(ValueError, match="weights_source"):
        append_row(tmp_path / "r.jsonl", a_row(weights_source="hub"))
    assert not (tmp_path / "r.jsonl").exists()


# --- weights sources -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("/runs/a/last.pt", WeightsSpec("checkpoint", path=Path("/runs/a/last.pt"))),
        ("last.pt", WeightsSpec("checkpoint", path=Path("last.pt"))),
        ("checkpoint:runs/last", WeightsSpec("checkpoint", path=Path("runs/last"))),
        ("runs/12:00:00/last.pt", WeightsSpec("checkpoint", path=Path("runs/12:00:00/last.pt"))),
        ("torchvision:ResNet50_Weights.IMAGENET1K_V1", WeightsSpec("torchvision", "ResNet50_Weights.IMAGENET1K_V1")),
        ("torchvision:Wide_ResNet50_2_Weights.DEFAULT", WeightsSpec("torchvision", "Wide_ResNet50_2_Weights.DEFAULT")),
        ("torchvision:/sd/resnet50.pth", WeightsSpec("torchvision", path=Path("/sd/resnet50.pth"))),
        ("timm:resnet50.a1_in1k", WeightsSpec("timm", name="resnet50.a1_in1k")),
        ("timm:resnetv2_50", WeightsSpec("timm", name="resnetv2_50")),
        ("timm:model.safetensors", WeightsSpec("timm", path=Path("model.safetensors"))),
        ("keras:/k/resnet50v2.h5", WeightsSpec("keras", path=Path("/k/resnet50v2.h5"))),
        ("keras:ResNet152V2", WeightsSpec("keras", name="ResNet152V2")),
    ],
)
def test_weights_forms_parse(text, expected):
    spec = parse_weights(f"  {text} ")
    assert (spec.source, spec.name, spec.path, spec.text) == (expected.source, expected.name, expected.path, text)


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "empty"),
        (None, "empty"),
        ("resnet50", "no source prefix"),
        ("hub:resnet50", "unknown source 'hub'"),
        ("torchvision:", "nothing follows"),
        ("torchvision:resnet50", "not a weights enum"),
        ("timm:ResNet-50!", "not a timm model name"),
        ("keras:ResNet18", "one of ResNet50"),
    ],
)
def test_malformed_weights_list_the_valid_forms(text, why):
    with pytest.raises(WeightsError, match=why) as err:
        parse_weights(text)
    message = str(err.value)
    assert "\n" not in message and all(form in message for form in FORMS)


# --- whole runs ------------------------------------------------------------------------------


def test_checkpoint_native_and_under_another_padding(folder, checkpoint, tmp_path):
    results = tmp_path / "eval.jsonl"
    native = run_eval(*folder_overrides(folder, checkpoint, results))
    other = run_eval(*folder_overrides(folder, checkpoint, results, "+padding=asymmetric"))
    site = run_eval(*folder_overrides(folder, checkpoint, results, "+padding.stem_conv=same"))
    rows = read_rows(results)
    assert rows == [native, other, site] and all(list(r) == list(ROW_KEYS) for r in rows)
    assert {r["weights"] for r in rows} == {str(checkpoint)} and {r["trained_padding"] for r in rows} == {"symmetric"}
    assert [r["padding_name"] for r in rows] == ["symmetric", "asymmetric", "symmetric[stem_conv=same]"]
    assert other["padding"]["stem_conv"] == "same" and native["padding"]["stem_conv"] == "symmetric"
    assert site["padding"] == {**native["padding"], "stem_conv": "same"}
    # resnet_tiny evaluates at 28 px; resize = floor(28 / 0.875)
    assert (native["crop"], native["input_size"], native["resize"], native["crops"]) == (28, 28, 32, 1)
    assert native["weights_source"] == "checkpoint" and native["preprocessing"] == "torch"
    assert native["n_images"] == 7 and native["dataset"] == "imagefolder"
    assert 0 <= native["top5_err"] <= native["top1_err"] <= 100


def test_odd_files_and_sizes_in_both_protocols(folder, checkpoint, tmp_path):
    """Grey, CMYK, PNG named .JPEG, several sizes: every image counts, in 1- and 10-crop."""
    results = tmp_path / "eval.jsonl"
    single = run_eval(*folder_overrides(folder, checkpoint, results, "crop=24", "resize=30", "interpolation=bicubic"))
    ten = run_eval(*folder_overrides(folder, checkpoint, results, "crops=10", "crop=24", "resize=30", "batch_size=30"))
    assert single["n_images"] == ten["n_images"] == 7
    assert (single["crop"], single["resize"], single["interpolation"], ten["crops"]) == (24, 30, "bicubic", 10)


def test_val_images_scores_n_of_the_split_and_the_summary_says_of_how_many(folder, checkpoint, tmp_path, capsys):
    results = tmp_path / "eval.jsonl"
    part = run_eval(*folder_overrides(folder, checkpoint, results, "val_images=3"))
    ten = run_eval(*folder_overrides(folder, checkpoint, results, "val_images=3", "crops=10", "batch_size=30"))
    assert part["n_images"] == ten["n_images"] == 3
    assert capsys.readouterr().out.count("3 of 7") == 2
    assert run_eval(*folder_overrides(folder, checkpoint, results, "val_images=100"))["n_images"] == 7  # all there are


@pytest.mark.slow
def test_torchrun_two_processes_count_each_image_once(folder, checkpoint, tmp_path):
    args = folder_overrides(folder, checkpoint, tmp_path / "two.jsonl", "crops=10", "batch_size=20")
    one = run_eval(*folder_overrides(folder, checkpoint, tmp_path / "one.jsonl", "crops=10", "batch_size=20"))
    proc = procs.run(
        [*procs.torchrun_here(), "eval.py", *args, f"hydra.run.dir={tmp_path / 'run'}"]
    )  # a hang kills both processes and fails
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = read_rows(tmp_path / "two.jsonl")
    assert len(rows) == 1  # rank 0 alone writes
    assert rows[0]["n_images"] == one["n_images"] == 7  # 4 + 3, nothing padded or dropped
    assert (rows[0]["top1_err"], rows[0]["top5_err"]) == pytest.approx((one["top1_err"], one["top5_err"]))
    assert "top1_err %" in proc.stdout  # the summary table


def test_eval_writes_under_results_alone_so_outputs_may_be_read_only(folder, checkpoint, tmp_path):
    """Weights under outputs/ (a container's read-only mount): Hydra's record of the run goes
    beside the rows in results/, and nothing under outputs/ changes."""
    weights = tmp_path / "outputs" / "run" / "last.pt"
    weights.parent.mkdir(parents=True)
    weights.write_bytes(Path(checkpoint).read_bytes())
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "outputs").rglob("*"))
    args = folder_overrides(folder, "outputs/run/last.pt", "results/eval.jsonl")
    proc = procs.run([PY, REPO / "eval.py", *args], cwd=tmp_path)  # the config's own run dir, from here
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "outputs").rglob("*")) == before
    assert len(read_rows(tmp_path / "results" / "eval.jsonl")) == 1
    assert list((tmp_path / "results" / "eval").glob("*/*/.hydra/config.yaml"))  # <date>/<time>/.hydra


def test_torchvision_state_dict_from_a_file(folder, tmp_path):
    torch.manual_seed(1)
    torch.save(resnet.build_model("resnet18", num_classes=3).state_dict(), tmp_path / "sd.pth")
    row = run_eval(*folder_overrides(folder, f"torchvision:{tmp_path / 'sd.pth'}", tmp_path / "r.jsonl", "crop=32"))
    assert (row["arch"], row["weights_source"], row["trained_padding"]) == ("resnet18", "torchvision", "symmetric")
    assert (row["crop"], row["resize"], row["n_images"]) == (32, 36, 7)  # arch read from the tensors' shapes


def test_timm_state_dict_from_a_safetensors_file(folder, tmp_path):
    timm = pytest.importorskip("timm")
    from safetensors.torch import save_file

    save_file(timm.create_model("resnet18", num_classes=3).state_dict(), tmp_path / "model.safetensors")
    row = run_eval(*folder_overrides(folder, f"timm:{tmp_path / 'model.safetensors'}", tmp_path / "r.jsonl", "crop=32"))
    assert (row["arch"], row["weights_source"], row["n_images"]) == ("resnet18", "timm", 7)


def test_fashion_mnist_test_split(tmp_path):
    """A checkpoint as train.py's default run writes it: 1 channel, 10 classes, 28 px, no resize."""
    require_fashion_mnist()
    model = resnet.build_model("resnet_tiny", num_classes=10, in_chans=1)
    config = {"data": {"name": "fashion_mnist", "image_size": 28, "crop_pct": 1.0, "interpolation": "bilinear"}}
    save_checkpoint(tmp_path / "last.pt", model, config=config)
    results = tmp_path / "r.jsonl"
    row = run_eval(f"weights={tmp_path / 'last.pt'}", "data=fashion_mnist", "batch_size=500", f"results_file={results}")
    assert (row["dataset"], row["n_images"], row["crop"], row["resize"]) == ("fashion_mnist", 10000, 28, 28)


@pytest.fixture
def offline_hubs(monkeypatch, tmp_path):
    """Empty hub caches; any download attempt fails the test."""
    import huggingface_hub.constants

    def no_network(*args, **kwargs):
        raise AssertionError("tried to download")

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)
    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", no_network)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_network)
    return tmp_path


@pytest.mark.parametrize(
    "text, where",
    [
        ("torchvision:ResNet18_Weights.IMAGENET1K_V1", "torch/hub/checkpoints/resnet18-f37072fd.pth"),
        ("timm:resnet50.a1_in1k", "Hugging Face cache"),
        ("keras:ResNet50V2", "keras/models/resnet50v2_weights_tf_dim_ordering_tf_kernels.h5"),
    ],
)
def test_published_weights_offline_fail_with_one_line(offline_hubs, text, where):
    with pytest.raises(WeightsUnavailable) as err:
        load_weights(parse_weights(text))
    message = str(err.value)
    assert "\n" not in message and "download=true" in message and where in message


def test_published_torchvision_weights_load_from_the_cache(offline_hubs):
    cached = offline_hubs / "torch" / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    cached.parent.mkdir(parents=True)
    torch.save(resnet.build_model("resnet18").state_dict(), cached)
    loaded = load_weights(parse_weights("torchvision:ResNet18_Weights.IMAGENET1K_V1"))
    assert loaded.model.meta.arch == "resnet18" and loaded.model.meta.padding_name == "symmetric"
    assert (loaded.origin.crop, loaded.origin.resize, loaded.origin.preprocessing) == (224, 256, "torch")
    with pytest.raises(WeightsError, match="holds a resnet18, but model=resnet34"):
        load_weights(parse_weights("torchvision:ResNet18_Weights.IMAGENET1K_V1"), arch="resnet34")


def test_failed_download_is_one_line(offline_hubs, monkeypatch):
    def unreachable(url, dst, **kwargs):
        raise URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torch.hub, "download_url_to_file", unreachable)
    with pytest.raises(WeightsUnavailable, match=r"could not download .*resnet18-f37072fd\.pth.*put it at") as err:
        load_weights(parse_weights("torchvision:ResNet18_Weights.IMAGENET1K_V1"), download=True)
    assert "\n" not in str(err.value)


def test_eval_script_reports_missing_weights_in_one_line(tmp_path):
    (tmp_path / "val").mkdir()
    proc = procs.run(
        [PY, "eval.py", "weights=torchvision:ResNet18_Weights.IMAGENET1K_V1", f"data.root={tmp_path}",
         f"hydra.run.dir={tmp_path / 'run'}", f"results_file={tmp_path / 'r.jsonl'}"],
        {"TORCH_HOME": str(tmp_path / "torch")}, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("eval.py: torchvision weights ResNet18_Weights.IMAGENET1K_V1")
    assert "download=true" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_padding_is_not_in_the_defaults():
    defaults = OmegaConf.load(REPO / "configs" / "eval.yaml").defaults
    assert not any("padding" in str(d) for d in defaults)
    cfg = compose_eval("weights=x.pt")
    assert cfg.get("padding") is None and cfg.get("model") is None
    assert compose_eval("weights=x.pt", "model=resnet50").model.arch == "resnet50"
    with pytest.raises(Exception, match="crops"):
        run_eval("weights=x.pt", "crops=5", "data.root=/none")
