"""The seed-table command end to end (resnet-seed-table): a model list with a random-weight
stand-in for every source, in the place each source is read from (Keras's and torch.hub's
caches, files given by path, our own checkpoint), rows whose weights are missing, a small
generated ImageNet val, every model under both schemes with 1 and 10 crops."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
import timm
import torch
import torchvision
from omegaconf import open_dict
from safetensors.torch import save_file

import resnet
from resnet.checkpoint import save_checkpoint
from resnet.cli.seed_table import run
from resnet.config import ConfigError
from tests.helpers.compose import compose_config
from tests.helpers.imagegen import make_folder
from tests.helpers.standins import keras_standin
from tests.helpers.weights import lua_preresnet, random_values, save_npz, tensornets_variables

# one worker: its module fixtures are built once
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.xdist_group("seed_table")]  # tests/conftest.py

FIRST, LAST = "n01440764", "n15075141"  # ImageNet's classes 0 and 999


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    """Every source's random weights where the command looks for them; the val set."""
    tmp = tmp_path_factory.mktemp("seed")
    torch.manual_seed(0)
    keras_standin(tmp / "keras" / "models" / "resnet50_weights_tf_dim_ordering_tf_kernels.h5", "resnet50_v1")
    url = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.url
    hub = tmp / "torch" / "hub" / "checkpoints" / url.rsplit("/", 1)[1]
    hub.parent.mkdir(parents=True)
    torch.save(torchvision.models.resnet18().state_dict(), hub)
    save_file(timm.create_model("resnet18", pretrained=False).state_dict(), tmp / "timm_resnet18.safetensors")
    save_checkpoint(tmp / "tiny.pt", resnet.build_model("resnet_tiny", num_classes=1000))
    # the two sources no hub serves, written from their own layouts (tests/helpers/weights.py)
    torch.save(random_values(lua_preresnet(), seed=1), tmp / "resnet200.pth")
    tensornets = random_values(tensornets_variables("resnext50c32"), seed=2, tf=True)
    save_npz(tmp / "resnext_50_32x4d.npz", list(tensornets), [v.numpy() for v in tensornets.values()])
    make_folder(tmp / "imagenet" / "val", {FIRST: 2, LAST: 2}, size=(40, 36))
    return tmp


def table(tmp: Path) -> dict:
    row = {"preset": "symmetric", "resize": 36, "crop": 32}
    return {
        "name": "standins",
        "files": {"resnet200_v2": None, "resnet_tiny": str(tmp / "tiny.pt")},
        "models": [
            {**row, "arch": "resnet50_v1", "weights": "keras:ResNet50", "preset": "keras"},
            {**row, "arch": "resnet101_v1", "weights": "keras:ResNet101", "preset": "keras"},  # not in the cache
            {**row, "arch": "resnet18", "weights": "torchvision:ResNet18_Weights.IMAGENET1K_V1"},
            {**row, "arch": "resnet18", "weights": f"timm:{tmp / 'timm_resnet18.safetensors'}"},
            {**row, "arch": "resnet200_v2", "weights": "fbtorch:{file}"},  # a file the list needs, not given
            {**row, "arch": "resnet_tiny", "weights": "checkpoint:{file}"},
        ],
    }


def seed_config(tmp: Path, *overrides: str, models: dict | None = None, out: str = "out"):
    cfg = compose_config(
        "seed_table", f"data.root={tmp / 'imagenet'}", "data.workers=0", "device=cpu", f"out={tmp / out}", *overrides
    )
    with open_dict(cfg):
        cfg.table = models or table(tmp)
    return cfg


def test_the_command_evaluates_every_model_and_shows_each_missing_one(standins, monkeypatch, capsys):
    monkeypatch.setenv("KERAS_HOME", str(standins / "keras"))
    monkeypatch.setenv("TORCH_HOME", str(standins / "torch"))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    result = run(seed_config(standins, "logger=wandb", "logger.mode=offline"))
    printed = capsys.readouterr().out
    assert "note:" not in printed.replace("note: " + str(standins / "imagenet" / "val") + " holds", "")

    # 4 models x 2 schemes x (1, 10) crops; the two missing models are tried once each
    assert len(result["rows"]) == 16 and "[24/24]" in printed
    rows = [json.loads(line) for line in (standins / "out" / "eval.jsonl").read_text().splitlines()]
    assert len(rows) == 16 and all(r["n_images"] == 4 and r["dataset"] == "imagenet" for r in rows)
    assert {(r["weights_source"], r["padding_name"], r["crops"]) for r in rows} == {
        (s, p, c)
        for s in ("keras", "torchvision", "timm", "checkpoint")
        for p in ("symmetric", "asymmetric")
        for c in (1, 10)
    }
    assert {r["trained_padding"] for r in rows if r["weights_source"] == "keras"} == {"keras"}

    missing = {m["arch"]: m["fix"] for m in result["missing"]}
    assert "download=true" in missing["resnet101_v1"]
    assert missing["resnet200_v2"].startswith("table.files.resnet200_v2=/path/to/its/file")

    out = standins / "out"
    assert all(
        (out / name).stat().st_size > 0
        for name in ("tensornets.md", "tensornets.csv", "tensornets.png", "cross.md", "cross.csv", "cross.png")
    )
    with open(out / "tensornets.csv", newline="") as f:
        records = list(csv.DictReader(f))
    by_model = {(r["model"], r["weights"].split(":")[0]): r for r in records}
    assert len(records) == 6  # 4 evaluated + 2 missing: none dropped
    keras50 = by_model[("resnet50_v1", "keras")]
    cell = next(
        r for r in rows if r["weights"] == "keras:ResNet50" and r["padding_name"] == "asymmetric" and r["crops"] == 10
    )
    assert float(keras50["asymmetric 10-crop Top-5"]) == pytest.approx(cell["top5_err"])
    assert float(keras50["TensorNets Top-1"]) == pytest.approx(25.126)  # published beside
    assert by_model[("resnet200_v2", "fbtorch")]["weights"] == "fbtorch:<table.files.resnet200_v2>"
    assert by_model[("resnet200_v2", "fbtorch")]["missing"].startswith("table.files.resnet200_v2=/path/to/its/file")
    assert by_model[("resnet101_v1", "keras")]["TensorNets Top-1"] == "23.58"
    markdown = (out / "tensornets.md").read_text()
    assert "download=true" in markdown and "table.files.resnet200_v2=" in markdown
    assert "trained with \\ evaluated with" in (out / "cross.md").read_text()
    assert "16 evaluations of 4 models, 2 missing" in printed

    (wandb_run,) = fake.runs  # one W&B run for the whole table
    assert wandb_run.kwargs["job_type"] == "seed_table" and wandb_run.finished
    assert len(wandb_run.logged["eval/rows"]["data"]) == 16
    assert len(wandb_run.logged["padding/tensornets"]["data"]) == 6
    assert wandb_run.logged["padding/cross_chart"] == out / "cross.png"


def test_the_files_no_hub_serves_go_through_the_command(standins, capsys):
    row = {"preset": "symmetric", "resize": 36, "crop": 32}
    files = {
        "name": "files",
        "files": {"resnet200_v2": str(standins / "resnet200.pth"),
                  "resnext50_32x4d": str(standins / "resnext_50_32x4d.npz")},
        "models": [{**row, "arch": "resnet200_v2", "weights": "fbtorch:{file}"},
                   {**row, "arch": "resnext50_32x4d", "weights": "tensornets:{file}"}],
    }  # fmt: skip
    result = run(seed_config(standins, "schemes=[asymmetric]", "crops=[1]", models=files, out="out_files"))
    assert result["missing"] == [] and "note:" not in capsys.readouterr().out.replace(
        "note: " + str(standins / "imagenet" / "val") + " holds", ""
    )
    assert {
        (r["arch"], r["weights_source"], r["trained_padding"], r["padding_name"], r["n_images"]) for r in result["rows"]
    } == {
        ("resnet200_v2", "fbtorch", "symmetric", "asymmetric", 4),
        ("resnext50_32x4d", "tensornets", "symmetric", "asymmetric", 4),
    }
    assert "resnet200_v2" in (standins / "out_files" / "tensornets.md").read_text()


def test_bad_values_are_one_line(standins):
    with pytest.raises(ConfigError, match=r"schemes=\['symmetric', 'sideways'\]: each must be a preset"):
        run(seed_config(standins, "schemes=[symmetric,sideways]"))
    with pytest.raises(ConfigError, match=r"crops=\[1, 5\]: each must be 1 or 10"):
        run(seed_config(standins, "crops=[1,5]"))


class FakeWandb:
    """Stands in for the wandb module: records init's arguments and everything logged."""

    def __init__(self):
        self.runs = []

    def init(self, **kwargs):
        run = type("Run", (), {})()
        run.kwargs, run.logged, run.summary, run.finished = kwargs, {}, {}, False
        run.log = run.logged.update
        run.finish = lambda: setattr(run, "finished", True)
        self.runs.append(run)
        return run

    @staticmethod
    def Table(columns, data):  # noqa: N802  (wandb's name)
        return {"columns": columns, "data": data}

    @staticmethod
    def Image(path):  # noqa: N802
        return Path(path)


def test_eval_logs_each_row_grouped_by_trained_scheme_and_the_tables(standins, tmp_path, monkeypatch):
    from resnet.evaluation.run import evaluate_weights

    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    for padding in ("symmetric", "asymmetric"):
        evaluate_weights(compose_config(
            "eval", f"weights={standins / 'tiny.pt'}", f"+padding={padding}", f"data.root={standins / 'imagenet'}",
            "crop=32", "data.workers=0", "device=cpu", f"results_file={tmp_path / 'rows.jsonl'}", "logger=wandb",
            "logger.mode=offline", "logger.project=p",
        ))  # fmt: skip
    assert len(fake.runs) == 2 and all(r.finished for r in fake.runs)
    first, second = fake.runs
    assert first.kwargs["group"] == second.kwargs["group"] == "symmetric"  # the checkpoint's scheme, as its training
    assert (first.kwargs["project"], first.kwargs["mode"], first.kwargs["job_type"]) == ("p", "offline", "eval")
    assert second.summary["padding_name"] == "asymmetric" and second.summary["n_images"] == 4
    row = dict(zip(second.logged["eval/rows"]["columns"], second.logged["eval/rows"]["data"][0]))
    assert row["top1_err"] == second.summary["top1_err"]
    table = second.logged["padding/tensornets"]  # regenerated from the whole results file: both schemes
    values = dict(zip(table["columns"], table["data"][0]))
    assert values["symmetric Top-1"] == first.summary["top1_err"]
    assert values["asymmetric Top-1"] == second.summary["top1_err"]
    assert "padding/cross" in second.logged


def test_eval_without_weights_says_which_to_give():
    from resnet.evaluation.run import evaluate_weights

    with pytest.raises(ConfigError, match="say which weights: weights=/path/to/last.pt"):
        evaluate_weights(compose_config("eval", "data=fashion_mnist"))


def test_an_unknown_wandb_mode_is_refused_before_any_work(standins, tmp_path, monkeypatch):
    from resnet.evaluation.run import evaluate_weights

    monkeypatch.delenv("WANDB_MODE", raising=False)
    with pytest.raises(ConfigError, match="unknown W&B mode 'sideways'; choose one of online, offline, disabled"):
        evaluate_weights(
            compose_config(
                "eval", f"weights={standins / 'tiny.pt'}", "logger=wandb", "logger.mode=sideways", "data=fashion_mnist"
            )
        )
