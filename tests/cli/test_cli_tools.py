"""The two commands around weights of unknown origin: ``resnet-detect`` (which padding
preset fits) and ``resnet-export`` (ONNX, checked against onnxruntime); and ``resnet-figures``,
which draws the sampling grids into the file ``--out`` names.

In process, on the real configs (tests/helpers/compose.py) and the built-in Fashion-MNIST, with one
tiny checkpoint; one subprocess shows the real command line printing its table.
"""

from __future__ import annotations

import io
import json
import os
import sys
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

import resnet.export
from data import Normalize
from data.fashion_mnist import load_fashion_mnist
from resnet import PRESETS
from resnet.checkpoint import save_checkpoint
from resnet.cli.detect import main as detect_main
from resnet.cli.detect import run as detect
from resnet.cli.export import main as export_main
from resnet.cli.export import run as export
from resnet.cli.figures import main as figures_main
from resnet.detect import DetectionReport, SchemeScore, detect_padding, preset_groups
from tests.helpers import procs
from tests.helpers.builtin_data import require_fashion_mnist
from tests.helpers.compose import compose_config
from tests.helpers.models import random_model

# one worker: its module fixtures are built once
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.xdist_group("cli_tools")]  # tests/conftest.py


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[nn.Module, Path]:
    """resnet_tiny for Fashion-MNIST under tf_same, built as tests/report/test_tables.py builds its
    detection models (random BN statistics, a sharp head); saved."""
    model = random_model("tf_same", in_chans=1)
    return model, save_checkpoint(tmp_path_factory.mktemp("tiny") / "last.pt", model)


# The presets whose stride-2 convs pad with zeros: at an odd size they pad resnet_tiny alike (a new
# preset joins them or not as its pads say: preset_groups).
ZERO_PADDED = ("symmetric", "asymmetric", "tf_same", "tf_slim", "caffe", "keras")


def one_line_exit(main, cfg, capsys) -> str:
    """Run a command's Hydra main on ``cfg``: it must exit non-zero with exactly one line."""
    with pytest.raises(SystemExit) as exit_:
        main(cfg)  # hydra.main passes a config straight to the task function
    code = exit_.value.code
    message = code if isinstance(code, str) else capsys.readouterr().err.strip()
    assert code not in (0, None) and message and "\n" not in message, message
    return message


# --- resnet-detect --------------------------------------------------------------------------------


def test_detect_ranks_every_preset_as_detect_padding_does(tiny, tmp_path, capsys):
    require_fashion_mnist()
    model, checkpoint = tiny
    out = tmp_path / "new" / "ranking.json"
    cfg = compose_config("detect", f"weights={checkpoint}", "images=60", "batch_size=25", "device=cpu", f"out={out}")
    report = detect(cfg)

    images, labels = load_fashion_mnist("test")  # the same 60 images: every 10,000 / 60-th, at 28 px
    picked = torch.tensor([int(i * len(labels) / 60) for i in range(60)])
    direct = detect_padding(model, [(images[picked], labels[picked])], Normalize("torch"), 28)
    assert report.n_images == 60 and report.input_size == 28
    assert [s.presets for s in report.scores] == [s.presets for s in direct.scores]
    assert sorted(p for s in report.scores for p in s.presets) == sorted(PRESETS)  # each preset ranked once
    for got, want in zip(report.scores, direct.scores):
        assert got.top1_err == want.top1_err
        assert (got.loss, got.margin, got.margin_se) == pytest.approx((want.loss, want.margin, want.margin_se), 1e-4)

    printed = capsys.readouterr().out
    table = printed[printed.index("padding detection: resnet_tiny at 28x28, 60 images") :]
    assert all(f" {', '.join(s.presets)} |" in table for s in report.scores)
    assert report.verdict() in table and "declared by the weights: tf_same" in table
    saved = json.loads(out.read_text())
    assert (saved["weights"], saved["dataset"], saved["crop"]) == (str(checkpoint), "fashion_mnist", 28)
    assert saved["best"] == list(direct.best.presets) and saved["ranking"][0]["margin"] == 0
    assert [(r["rank"], r["presets"], r["margin"]) for r in saved["ranking"]] == [
        (rank, list(s.presets), s.margin) for rank, s in enumerate(report.scores, 1)
    ]
    assert os.listdir(out.parent) == ["ranking.json"]  # no temporary file left


def test_detect_at_an_odd_size_ranks_the_presets_that_pad_alike_as_one(tiny, capsys):
    require_fashion_mnist()  # resnet_tiny at 17: 17 -> 9 -> 5, all odd, so SAME pads are symmetric
    groups = preset_groups(tiny[0], 17)  # the presets by what they pad, amounts and modes (a reflected stem apart)
    assert set(ZERO_PADDED) <= set(next(group for group in groups if "tf_same" in group))
    report = detect(compose_config("detect", f"weights={tiny[1]}", "images=8", "crop=17", "device=cpu"))
    assert sorted(s.presets for s in report.scores) == sorted(groups)  # no stem pool: no group's logits agree
    assert report.indistinguishable == (len(groups) == 1)
    printed = capsys.readouterr().out
    assert report.verdict() in printed
    assert ("all presets are indistinguishable here" in printed) == report.indistinguishable


def test_verdicts_say_what_the_ranking_cannot_tell():
    def report(*scores: SchemeScore) -> DetectionReport:
        return DetectionReport("resnet50", 224, 500, scores)

    clear = report(SchemeScore(("tf_same",), 1.0, 20.0), SchemeScore(("symmetric", "keras"), 1.2, 24.0, 0.2, 0.02))
    assert not clear.within_noise and clear.verdict().startswith("best fit: tf_same, margin 0.2000 ± 0.0200 nats")
    close = report(SchemeScore(("tf_same",), 1.0, 20.0), SchemeScore(("asymmetric",), 1.01, 20.2, 0.01, 0.02))
    assert close.within_noise and close.verdict().startswith("the top is indistinguishable: tf_same leads asymmetric")
    tied = report(SchemeScore(("symmetric", "keras"), 1.0, 20.0), SchemeScore(("tf_same",), 1.5, 30.0, 0.5, 0.05))
    assert "symmetric, keras give identical outputs at this size" in tied.verdict()
    assert " symmetric, keras |" in str(tied) and "0.5000 ± 0.0500" in str(tied)
    one_image = report(SchemeScore(("tf_same",), 1.0, 0.0), SchemeScore(("symmetric",), 2.0, 100.0, 1.0, float("inf")))
    assert one_image.within_noise and one_image.as_dict()["ranking"][1]["margin_se"] is None  # valid JSON


@pytest.mark.parametrize(
    "overrides, says",
    [
        (["weights=nowhere:x"], "malformed weights='nowhere:x'"),
        ([], "say which weights: weights=/path/to/last.pt"),
        (["images=0"], "images=0: expected a whole number >= 1, e.g. images=512"),
        (["data=imagenet"], "data=imagenet needs data.root=/path/to/imagenet"),
        (["data=imagenet", "data.root={tmp}"], "needs data.root=/path/to/imagenet holding val/<wnid>/*.JPEG"),
        (["out={tmp}/ranking.txt"], "must name a .json file, e.g. out=ranking.json"),
        (["out={tmp}/a_file/ranking.json"], "a_file is a file, not a folder"),
        (["out=/proc/ranking.json"], "cannot write in /proc"),  # not even root can
        (["+padding=asymmetric"], "drop +padding"),
        (["device=tpu"], "device=tpu: expected one of auto, cpu, cuda, e.g. device=auto"),
    ],
)
def test_detect_bad_input_is_one_line(tiny, tmp_path, capsys, overrides, says):
    (tmp_path / "a_file").write_text("")
    weights = [] if overrides == [] else [f"weights={tiny[1]}"]
    cfg = compose_config("detect", *weights, *(o.format(tmp=tmp_path) for o in overrides))
    assert says in one_line_exit(detect_main, cfg, capsys)


# --- resnet-export --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tiny, tmp_path_factory) -> tuple[Path, str]:
    """The command's file (in a folder it makes) and what it printed."""
    out = tmp_path_factory.mktemp("export") / "deep" / "tiny.onnx"
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert export(compose_config("export", f"weights={tiny[1]}", f"out={out}")) == out
    return out, printed.getvalue()


def test_export_writes_a_file_that_onnxruntime_runs_as_pytorch_does(tiny, exported):
    path, printed = exported
    assert printed.startswith(f"exported {path}: resnet_tiny under tf_same padding, input [batch, 1, 28, 28]")
    assert "  batch 1: " in printed and "  batch 3: " in printed  # the command's own check, two batch sizes
    proto = onnx.load(path)
    batch = proto.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch.dim_param == "batch"  # dynamic
    props = {p.key: p.value for p in proto.metadata_props}
    assert props["input_size"] == "28x28"  # the weights' eval size
    assert (props["weights"], props["ema"]) == (str(tiny[1]), "false")  # where the weights came from
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for n in (2, 5):
        x = torch.randn(n, 1, 28, 28, generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            expected = tiny[0](x).numpy()
        np.testing.assert_allclose(session.run(None, {"image": x.numpy()})[0], expected, rtol=0, atol=1e-4)
    assert os.listdir(path.parent) == ["tiny.onnx"]  # no temporary file left


def test_export_that_onnxruntime_disagrees_with_fails_and_leaves_nothing(tiny, exported, tmp_path, capsys, monkeypatch):
    def corrupted_export(model, path, *args, **kwargs):  # the real file, with the head's bias shifted by 1
        proto = onnx.load(exported[0])
        bias = next(init for init in proto.graph.initializer if init.name == "fc.bias")
        bias.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(bias) + 1, bias.name))
        onnx.save(proto, path)
        return Path(path)

    monkeypatch.setattr(resnet.export, "export_onnx", corrupted_export)
    out = tmp_path / "tiny.onnx"
    message = one_line_exit(export_main, compose_config("export", f"weights={tiny[1]}", f"out={out}"), capsys)
    assert "onnxruntime's logits differ from PyTorch's by up to 1 on a batch of 1" in message
    assert message.endswith(f"{out} was not written") and os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "overrides, says",
    [
        (["weights=torchvision:ResNet50"], "malformed weights='torchvision:ResNet50'"),
        ([], "say where to write the file: out=model.onnx"),
        (["out={tmp}/model.pt"], "out={tmp}/model.pt must name a .onnx file, e.g. out=model.onnx"),
        (["out={tmp}"], "must name a .onnx file"),
        (["out={tmp}/a_file/model.onnx"], "a_file is a file, not a folder; choose another path, e.g. out=model.onnx"),
        (["out=/proc/new/model.onnx"], "out=/proc/new/model.onnx: cannot write in /proc ("),
        (["out={tmp}/m.onnx", "crop=0"], "crop=0: expected a whole number >= 1 (or null)"),
        (["out={tmp}/m.onnx", "tolerance=2"], "tolerance=2: expected a number in (0, 1), e.g. tolerance=1e-4"),
        (["out={tmp}/m.onnx", "+padding.stem_conv=sideways"], "unknown stem_conv scheme 'sideways'; choose one of"),
        (["out={tmp}/m.onnx", "weights={tmp}/none.pt"], "no checkpoint at"),
    ],
)
def test_export_bad_input_is_one_line(tiny, tmp_path, capsys, overrides, says):
    (tmp_path / "a_file").write_text("")
    weights = [] if overrides and overrides[0].startswith("weights") else [f"weights={tiny[1]}"]
    cfg = compose_config("export", *weights, *(o.format(tmp=tmp_path) for o in overrides))
    assert says.format(tmp=tmp_path) in one_line_exit(export_main, cfg, capsys)
    assert sorted(os.listdir(tmp_path)) == ["a_file"]


# --- resnet-figures ---------------------------------------------------------------------------------

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name, starts", [("figs", PNG_MAGIC), ("grid.svg", b"<?xml"), ("sub/grid.PNG", PNG_MAGIC)])
def test_figures_writes_exactly_the_file_out_names(tmp_path, capsys, name, starts):
    """``--out figs`` once wrote figs.png (matplotlib adds the suffix) and said "wrote figs"."""
    out = tmp_path / name
    figures_main(["--out", str(out), "--size", "6"])
    assert out.read_bytes().startswith(starts)
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == [name]  # nothing beside it: no figs.png, no drawn-into sibling left
    assert capsys.readouterr().out == f"wrote {out}\n"


@pytest.mark.parametrize("argv, says", [
    (["--out", "{tmp}"], "is a folder; name the file: --out {tmp}/sampling_grid.png"),
    (["--out", "{tmp}/grid.v2"], "no image format .v2; use one of"),
    (["--out", "{tmp}/grid.png", "--size", "0"], "--size 0: an input size is at least 1"),
])  # fmt: skip
def test_figures_bad_out_is_one_line(tmp_path, capsys, argv, says):
    with pytest.raises(SystemExit) as exit_:
        figures_main([word.format(tmp=tmp_path) for word in argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and says.format(tmp=tmp_path) in err, err
    assert list(tmp_path.iterdir()) == []


# --- the real command line --------------------------------------------------------------------------


@pytest.mark.slow
def test_detect_command_line_prints_its_table(tiny, tmp_path):
    require_fashion_mnist()
    command = [sys.executable, "-m", "resnet.cli.detect", f"weights={tiny[1]}", "images=40", "device=cpu"]
    done = procs.run(command, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    header = ("| rank", "| presets (identical outputs)", "| mean CE", "| margin ± s.e. (nats)", "| top-1 err %")
    assert all(column in done.stdout for column in header)
    assert "declared by the weights: tf_same" in done.stdout
    assert os.listdir(tmp_path) == []  # nothing written: no outputs/ folder, no log file
