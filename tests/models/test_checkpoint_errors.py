"""Every way a checkpoint can be unusable is one line that names the file and says what to do:
cut short, empty, not a checkpoint, missing, the wrong object, another architecture, missing
or unexpected keys, shape mismatches, a newer format, malformed meta; for load_model,
load_checkpoint, TrainingState.read, eval's weights=, an importer, and under random damage."""

from __future__ import annotations

import io
import pickle
import random
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import resnet
from resnet.checkpoint import (
    FORMAT,
    CheckpointError,
    load_checkpoint,
    load_model,
    load_weights,
    model_from_checkpoint,
    save_checkpoint,
)
from resnet.checkpoint.training_state import TrainingState
from resnet.engine.seeding import rng_state
from resnet.evaluation.run import evaluate_weights
from resnet.weights import WeightsError, parse_weights
from resnet.weights import load_weights as load_published
from tests.helpers.compose import compose_config
from tests.helpers.imagegen import make_folder

ARCH, CLASSES = "resnet_tiny", 3

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """A resnet_tiny training checkpoint, as train.py writes one."""
    torch.manual_seed(0)
    model = resnet.build_model(ARCH, CLASSES)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    path = tmp_path_factory.mktemp("good") / "last.pt"
    state = TrainingState(epoch=1, step=4, optimizer=optimizer.state_dict(), scheduler=scheduler.state_dict(),
                          rng=[rng_state()], config={}, layout={"world_size": 1})  # fmt: skip
    return state.save(path, model)


def one_line(raised: pytest.ExceptionInfo, path: Path, *facts: str) -> str:
    """The message: one line, naming ``path``, holding every fact."""
    message = str(raised.value)
    assert "\n" not in message, message
    assert str(path) in message, message
    for fact in facts:
        assert fact in message, (fact, message)
    return message


# --- damaged files and the wrong objects, through each loader -------------------------------


class _Payload:
    """Unpickling this creates a file: stands in for any code an attacker would run."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').close()",)


def _foreign_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("notes/readme.txt", "not weights")
    return buffer.getvalue()


def _edited(change: Callable[[dict], dict]) -> Callable[[Path, Path], object]:
    """A case whose file is the good checkpoint with ``change`` applied to its dict."""
    return lambda good, tmp: change(torch.load(good, weights_only=True))


def _meta(**fields) -> Callable[[dict], dict]:
    def change(checkpoint: dict) -> dict:
        meta = {**checkpoint["meta"], **fields}
        return {**checkpoint, "meta": {k: v for k, v in meta.items() if v is not None}}

    return change


# name: (the file's bytes, or an object to torch.save, from the good file; facts the message holds)
CASES = {
    "half": (lambda good, tmp: good.read_bytes()[: good.stat().st_size // 2], ["cut short"]),
    "empty": (lambda good, tmp: b"", ["empty (0 bytes)"]),
    "text": (lambda good, tmp: b"epoch 3, top1 41.2\nnot a checkpoint\n", ["not a torch checkpoint"]),
    "random": (lambda good, tmp: random.Random(0).randbytes(4096), ["not a torch checkpoint"]),
    "foreign zip": (lambda good, tmp: _foreign_zip(), ["zip archive but not a torch checkpoint"]),
    "missing": (None, ["no checkpoint at"]),
    "pickled code": (lambda good, tmp: pickle.dumps(_Payload(tmp / "pwned"), protocol=2), ["refusing to load"]),
    "tensor": (lambda good, tmp: torch.zeros(3), ["holds a tensor of shape (3,)", "save_checkpoint"]),
    "list": (lambda good, tmp: [1, 2], ["holds a list of 2 items"]),
    "bare state dict": (
        lambda good, tmp: torch.load(good, weights_only=True)["model"],
        ["bare state dict", "load_weights(model, state_dict, path)"],
    ),
    "newer format": (_edited(lambda c: {**c, "format": FORMAT + 1}), ["newer", "upgrade"]),
    "bad format": (_edited(lambda c: {**c, "format": "one"}), ["format 'one'"]),
    "no arch": (_edited(_meta(arch=None)), ["malformed meta (no arch)"]),
    "wrong type": (_edited(_meta(num_classes="3")), ["num_classes is a str, not an int"]),
    "unknown arch": (_edited(_meta(arch="resnet_huge")), ["'resnet_huge'", "upgrade"]),
}
LOADERS = {
    "load_model": load_model,
    "load_checkpoint": load_checkpoint,
    "TrainingState.read": TrainingState.read,
}


def write_case(name: str, good: Path, tmp_path: Path) -> Path:
    path = tmp_path / f"{name.replace(' ', '_')}.pt"
    make = CASES[name][0]
    if make is not None:
        content = make(good, tmp_path)
        path.write_bytes(content) if isinstance(content, bytes) else torch.save(content, path)
    return path


@pytest.mark.parametrize("loader", list(LOADERS))
@pytest.mark.parametrize("case", list(CASES))
def test_each_problem_is_one_line_naming_the_file(good, tmp_path, case, loader):
    path = write_case(case, good, tmp_path)
    with pytest.raises(CheckpointError) as raised:
        LOADERS[loader](path)
    one_line(raised, path, *CASES[case][1])
    assert isinstance(raised.value, ValueError)  # what train.py's resume and eval.py report in one line
    assert not (tmp_path / "pwned").exists()


def test_a_missing_file_is_still_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_model(tmp_path / "nope.pt")


def test_the_format_is_written_and_its_absence_means_the_current_layout(good, tmp_path):
    checkpoint = load_checkpoint(good)
    assert checkpoint["format"] == FORMAT == 1
    del checkpoint["format"]  # as every checkpoint before the format was recorded
    torch.save(checkpoint, tmp_path / "old.pt")
    assert load_model(tmp_path / "old.pt").meta.arch == ARCH
    with pytest.raises(ValueError, match="may not be named format"):
        save_checkpoint(tmp_path / "x.pt", resnet.build_model(ARCH), format=2)


def test_a_weights_only_file_cannot_be_resumed(good, tmp_path):
    path = save_checkpoint(tmp_path / "weights.pt", resnet.build_model(ARCH, CLASSES))
    with pytest.raises(CheckpointError) as raised:
        TrainingState.read(path)
    one_line(raised, path, "not a training checkpoint (no optimizer, scheduler, epoch, step)", "eval.py weights=")


# --- weights that do not fit the model ------------------------------------------------------


def test_another_architecture_names_both_and_the_model_to_pass(good):
    state = TrainingState.read(good)
    assert state.meta["arch"] == ARCH  # validated and canonical: the resume compares it with its model's
    small = resnet.build_model("resnet_small", CLASSES)  # the same keys, every shape doubled
    with pytest.raises(CheckpointError) as raised:
        load_weights(small, state.model, good, arch=state.meta["arch"])
    message = one_line(raised, good, "holds resnet_tiny weights, not resnet_small", "pass model=resnet_tiny")
    assert "46 shape mismatches (conv1.weight [16, 3, 3, 3] vs the model's [32, 3, 3, 3], bn1.weight" in message
    assert "load_model" in message and "size mismatch" not in message

    tiny = resnet.build_model(ARCH, CLASSES)  # every shape fits, but the checkpoint says it is another arch
    with pytest.raises(CheckpointError) as raised:
        load_weights(tiny, state.model, good, arch="resnet_small")
    one_line(raised, good, "holds resnet_small weights, not resnet_tiny (the same keys and shapes")


def test_missing_and_unexpected_keys_are_counted_and_a_few_named(good, tmp_path):
    checkpoint = load_checkpoint(good)
    state = dict(checkpoint["model"])
    for key in ("layer1.0.conv1.weight", "layer1.0.bn1.weight", "layer1.0.bn1.bias", "fc.bias"):
        del state[key]
    state.update({f"head{i}.weight": torch.zeros(2) for i in range(5)})
    with pytest.raises(CheckpointError) as raised:
        load_weights(resnet.build_model(ARCH, CLASSES), state, "weights.pt")
    one_line(
        raised,
        Path("weights.pt"),
        "4 missing keys (layer1.0.conv1.weight, layer1.0.bn1.weight, layer1.0.bn1.bias and 1 more)",
        "5 unexpected keys (head0.weight, head1.weight, head2.weight and 2 more)",
    )

    torch.save({**checkpoint, "model": state}, tmp_path / "edited.pt")  # the file's meta and weights disagree
    with pytest.raises(CheckpointError) as raised:
        load_model(tmp_path / "edited.pt")
    one_line(raised, tmp_path / "edited.pt", "corrupt or was edited", "4 missing keys", "5 unexpected keys")


def test_shape_mismatches_are_counted_and_one_or_two_shown(good):
    state = load_checkpoint(good)["model"]
    with pytest.raises(CheckpointError) as raised:
        load_weights(resnet.build_model(ARCH, 10), state, good, arch=ARCH)
    one_line(
        raised,
        good,
        "2 shape mismatches (fc.weight [3, 64] vs the model's [10, 64], fc.bias [3] vs the model's [10])",
        "it has 3 classes, the model 10",
    )


def test_weights_that_fit_load_through_wrappers(good):
    checkpoint = load_checkpoint(good)
    model = resnet.build_model(ARCH, CLASSES)
    compiled_like = torch.nn.DataParallel(model)  # looked through, as DDP and torch.compile are
    assert load_weights(compiled_like, checkpoint["model"], good, arch=ARCH) is compiled_like
    assert torch.equal(model.fc.weight, checkpoint["model"]["fc.weight"])
    assert model_from_checkpoint(checkpoint, where=good).meta.arch == ARCH


# --- eval.py's weights= and an importer ----------------------------------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("folder")
    make_folder(root / "val", {"a": 1, "b": 1, "c": 1}, size=(36, 36))
    return root


def run_eval(root: Path, weights: str | Path, results: Path, *extra: str) -> dict:
    """eval.py's body, as tests/evaluation/test_eval.py runs it; eval.py prints a WeightsError as its one line."""
    overrides = [f"weights={weights}", "data=imagefolder", f"data.root={root}", "data.num_classes=3",
                 "data.workers=0", "batch_size=3", "device=cpu", f"results_file={results}", *extra]  # fmt: skip
    return evaluate_weights(compose_config("eval", *overrides))


@pytest.mark.parametrize(
    ("case", "extra", "facts"),
    [
        ("half", (), ["cut short"]),
        ("newer format", (), ["newer"]),
        ("good", ("model=resnet_small",), ["holds a resnet_tiny, but model=resnet_small"]),
    ],
)
def test_eval_weights_problems_are_one_line(folder, good, tmp_path, case, extra, facts):
    path = good if case == "good" else write_case(case, good, tmp_path)
    with pytest.raises(WeightsError) as raised:
        run_eval(folder, path, tmp_path / "r.jsonl", *extra)
    one_line(raised, path, *facts)
    assert not (tmp_path / "r.jsonl").exists()


def _fake_resnet18_state_dict() -> dict[str, torch.Tensor]:
    """resnet18's keys and shapes, each tensor one broadcast zero (a few bytes on disk)."""
    with torch.device("meta"):
        shapes = {k: (v.shape, v.dtype) for k, v in resnet.build_model("resnet18", CLASSES).state_dict().items()}
    return {k: torch.zeros((), dtype=dtype).expand(shape) for k, (shape, dtype) in shapes.items()}


def test_importer_files_cut_short_or_of_another_architecture_are_one_line(good, tmp_path):
    cut = tmp_path / "cut.pth"
    cut.write_bytes(good.read_bytes()[:1000])
    with pytest.raises(WeightsError) as raised:
        load_published(parse_weights(f"torchvision:{cut}"))
    one_line(raised, cut, "cut short")

    resnet18 = tmp_path / "resnet18.pth"
    torch.save(_fake_resnet18_state_dict(), resnet18)
    with pytest.raises(WeightsError) as raised:
        load_published(parse_weights(f"torchvision:{resnet18}"), arch="resnet34")
    one_line(raised, resnet18, "does not fit resnet34", "missing key", "pass model=resnet18")


def _cut(path: Path) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _damaged_timm_and_keras_files(tmp_path: Path) -> list[tuple[str, Path]]:
    from safetensors.torch import save_file

    tensors = {"conv1.weight": torch.randn(64, 3, 7, 7), "fc.weight": torch.randn(3, 512)}
    save_file(tensors, tmp_path / "cut.safetensors")
    torch.save(tensors, tmp_path / "cut.pth")
    (tmp_path / "text.h5").write_text("not an HDF5 file\n")
    (tmp_path / "cut.weights.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))  # an HDF5 signature, then nothing
    return [("timm", _cut(tmp_path / "cut.safetensors")), ("timm", _cut(tmp_path / "cut.pth")),
            ("keras", tmp_path / "text.h5"), ("keras", tmp_path / "cut.weights.h5")]  # fmt: skip


def test_damaged_timm_and_keras_files_are_one_line_naming_the_file(tmp_path):
    for source, path in _damaged_timm_and_keras_files(tmp_path):
        with pytest.raises(WeightsError) as raised:
            load_published(parse_weights(f"{source}:{path}"))
        one_line(raised, path, "damaged", "copy it again")


# --- random damage ---------------------------------------------------------------------------


def test_random_damage_loads_or_is_one_checkpoint_error_and_never_runs_code(good, tmp_path, monkeypatch):
    """Bytes overwritten at seeded offsets (half of them in the pickle at the start and the
    zip directory at the end, where the structure is) and seeded truncations: each load either
    succeeds (the damage hit tensor data) or raises CheckpointError in one line; torch.load is
    only ever asked for weights_only=True, which constructs no object and so runs no code."""
    data = good.read_bytes()
    rng = random.Random(1234)
    damaged = []
    for i in range(60):
        region = [(0, 2048), (len(data) - 2048, len(data)), (0, len(data))][i % 3]
        offset = rng.randrange(*region)
        size = rng.randint(1, 4)
        damaged.append(data[:offset] + rng.randbytes(size) + data[offset + size :])
    damaged += [data[: rng.randrange(len(data))] for _ in range(20)]

    calls = []
    real_load = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    outcomes = {"loaded": 0, "refused": 0}
    path = tmp_path / "damaged.pt"
    for content in damaged:
        path.write_bytes(content)
        try:
            load_model(path)
            outcomes["loaded"] += 1
        except CheckpointError as err:  # anything else fails the test
            assert "\n" not in str(err) and str(path) in str(err), str(err)
            outcomes["refused"] += 1
    assert calls and set(calls) == {True}
    assert outcomes["refused"] >= 20  # truncations at least; the damage did reach the structure
