"""data/registry.py: an in-memory dataset is one module of data/ and one configs/data YAML.
``synthetic`` (data/synthetic.py, configs/data/synthetic.yaml) was added that way; train, its
validation and eval.py read it with no other change."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import pytest
import torch
from omegaconf import OmegaConf

from data import build_loaders
from data.registry import InMemory, OnDisk, Shards, find, in_memory, in_memory_names, names
from data.testsets import TEST_SETS
from resnet.config import ConfigError, data_config
from resnet.engine.run import train
from resnet.evaluation.run import evaluate_weights
from tests.helpers.compose import compose_config
from tests.helpers.procs import REPO


@pytest.mark.parametrize("name", ["imagenet", "imagefolder", "imagenet_shards", "imagenet_v2", "registry", "loader",
                                  "no_such_dataset", "../etc"])  # fmt: skip
def test_only_a_module_that_defines_a_dataset_is_one(name):
    assert in_memory(name) is None


def test_every_data_config_is_a_registry_entry_or_a_test_set():
    configs = {p.stem for p in (REPO / "configs" / "data").glob("*.yaml")}
    assert configs == set(names()) | set(TEST_SETS)
    assert all(isinstance(find(name), OnDisk | InMemory) for name in names()) and find("imagenet_v2") is None
    assert (find("imagenet").layout("val"), find("imagefolder").layout("val")) == ("val/<wnid>/*.JPEG", "val/<class>/*")
    assert [name for name in names() if isinstance(find(name), Shards)] == ["imagenet_shards"]


def test_the_synthetic_dataset_is_cifar10_shaped_and_the_same_every_time():
    dataset = in_memory("synthetic")
    assert isinstance(dataset, InMemory) and (len(dataset.classes), dataset.in_chans, dataset.image_size) == (10, 3, 32)
    images, labels = dataset.load("train")
    assert images.shape == (640, 3, 32, 32) and images.dtype == torch.uint8
    assert labels.bincount().tolist() == [64] * 10
    again, _ = dataset.load("train")
    val, _ = dataset.load("val")
    assert torch.equal(images, again) and val.shape[0] == 160 and not torch.equal(val[:16], images[:16])


def test_the_loaders_take_their_shape_from_the_registry():
    loaders = build_loaders(data_config("synthetic"), batch_size=8)
    assert (loaders.num_classes, loaders.in_chans, loaders.image_size, loaders.val_size) == (10, 3, 32, 160)
    images, labels, *_ = next(iter(loaders.train))
    assert images.shape == (8, 3, 32, 32) and labels.shape == (8,)
    with pytest.raises(ValueError, match="synthetic images are 32x32; leave image_size unset, not 64"):
        build_loaders(data_config("synthetic", image_size=64), batch_size=8)


def test_train_and_eval_run_on_a_dataset_added_as_one_module_and_one_yaml(tmp_path, one_thread):
    run_dir = tmp_path / "run"
    results = train(compose_config("train", "data=synthetic", "model=resnet_tiny", "epochs=1", "batch_size=16",
                                   "max_steps_per_epoch=4", "device=cpu", f"run_dir={run_dir}"))  # fmt: skip
    assert (results["n_val_images"], results["dataset"]) == (160, "synthetic")
    evaluate_weights(compose_config("eval", f"weights={run_dir / 'last.pt'}", "data=synthetic", "batch_size=40",
                                    "device=cpu", f"results_file={tmp_path / 'rows.jsonl'}"))  # fmt: skip
    row = json.loads((tmp_path / "rows.jsonl").read_text().splitlines()[-1])
    assert row["n_images"] == 160 and row["top1_err"] == pytest.approx(results["top1_err"])


@pytest.mark.parametrize("name, says", [
    ("imagenet", "imagenet needs data.root=/path/to/imagenet holding train/<wnid>/*.JPEG and val/<wnid>/*.JPEG"),
    ("imagefolder", "imagefolder needs data.root=/path/to/imagefolder holding train/<class>/* and val/<class>/*"),
    ("imagenet_shards", "imagenet_shards needs data.root=/path/to/imagenet_shards holding train/ and val/, each "
                        "with index.json and its .tar shards (python -m data.shards imagenet RAW_ROOT OUT_ROOT"),
])  # fmt: skip
def test_an_image_file_entry_names_its_layout_when_the_root_lacks_a_split(tmp_path, name, says):
    (tmp_path / "train").mkdir()  # val/ missing: neither split is opened
    with pytest.raises(FileNotFoundError, match=re.escape(says)):
        build_loaders(data_config(name, root=str(tmp_path), workers=0), batch_size=8)


def test_an_in_memory_entry_opens_a_split_for_training_and_for_evaluation():
    dataset = in_memory("synthetic")
    train, val = dataset.open("train", crop_padding=4), dataset.open("val")
    assert (len(train), len(val), train.crop_padding, val.crop_padding) == (640, 160, 4, 0)
    assert torch.equal(val.images, dataset.load("val")[0])


def test_eval_and_the_config_check_name_the_entrys_own_layout(tmp_path):
    from resnet.config import ConfigError, check_data_config
    from resnet.evaluation.loader import EvalProtocol, build_eval_loader

    protocol = EvalProtocol(crops=1, crop=32, resize=36, interpolation="bilinear", preprocessing="torch")
    with pytest.raises(
        FileNotFoundError,
        match=re.escape(
            "imagenet_shards evaluation needs data.root=/path/to/imagenet_shards holding val/index.json and val/*.tar"
        ),
    ):
        build_eval_loader("imagenet_shards", str(tmp_path), protocol, batch_size=4, workers=0)
    for name, layout in (
        ("imagenet", "train/<wnid>/*.JPEG and val/<wnid>/*.JPEG"),
        ("imagenet_shards", "train/ and val/, each with index.json and its .tar shards"),
    ):
        cfg = compose_config("train", f"data={name}", f"data.root={tmp_path / 'absent'}")
        with pytest.raises(ConfigError, match=re.escape(f"{name} needs a directory holding {layout}")):
            check_data_config(cfg.data)


def _fashion_mnist_copy(folder):
    """A real copy of the four idx files (Debian's, or wherever they are found), in ``folder``."""
    from data.fashion_mnist import FILES, find_root
    from tests.helpers.builtin_data import require_fashion_mnist

    require_fashion_mnist()
    folder.mkdir()
    for name in FILES:
        shutil.copyfile(find_root() / name, folder / name)
    return folder


def test_data_root_is_where_an_in_memory_dataset_reads_its_files(tmp_path, monkeypatch):
    from resnet.config import check_data_config
    from resnet.evaluation.loader import EvalProtocol, build_eval_loader

    root = _fashion_mnist_copy(tmp_path / "fmnist")
    monkeypatch.setenv("FASHION_MNIST_ROOT", str(tmp_path / "not_here"))  # data.root wins over the lookup
    loaders = build_loaders(data_config("fashion_mnist", root=str(root)), batch_size=500)
    assert (loaders.num_classes, loaders.in_chans, loaders.image_size, loaders.val_size) == (10, 1, 28, 10000)
    check_data_config(compose_config("train", f"data.root={root}").data)
    protocol = EvalProtocol(crops=1, crop=28, resize=28, interpolation="bilinear", preprocessing="torch")
    assert build_eval_loader("fashion_mnist", str(root), protocol, batch_size=100, workers=0, take=300).size == 300
    (root / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(FileNotFoundError, match=re.escape(f"data.root={root} lacks t10k-labels-idx1-ubyte.gz: ")):
        build_loaders(data_config("fashion_mnist", root=str(root)), batch_size=500)


def test_a_wrong_data_root_is_one_line_naming_the_folder_the_files_and_what_to_type(tmp_path):
    from data.fashion_mnist import APT_ROOT, CACHE_ROOT
    from resnet.config import ConfigError, check_data_config

    absent = tmp_path / "absent"
    says = (
        f"data.root={absent} is not a folder: Fashion-MNIST needs a folder holding train-images-idx3-ubyte.gz, "
        "train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz; pass data.root=<that "
        f"folder>, or data.root=null to look in $FASHION_MNIST_ROOT, {APT_ROOT} and {CACHE_ROOT}"
    )
    with pytest.raises(FileNotFoundError) as err:
        build_loaders(data_config("fashion_mnist", root=str(absent)), batch_size=8)
    assert str(err.value) == says and "\n" not in says
    with pytest.raises(ConfigError) as err:  # train.py and eval.py: before any work
        check_data_config(compose_config("train", f"data.root={absent}").data)
    assert str(err.value) == says
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "data=synthetic is generated in memory and reads no files; "
            f"leave data.root unset (data.root=null), not {absent}"
        ),
    ):
        check_data_config(compose_config("train", "data=synthetic", f"data.root={absent}").data)


@pytest.mark.parametrize("name", in_memory_names())
def test_an_in_memory_datasets_facts_are_stated_once_in_its_module(name):
    from omegaconf import OmegaConf

    from resnet.config import DATASET_FACTS

    yaml = OmegaConf.to_container(OmegaConf.load(REPO / "configs" / "data" / f"{name}.yaml"))  # as written
    assert {fact: yaml[fact] for fact in DATASET_FACTS} == {fact: f"${{dataset:{fact}}}" for fact in DATASET_FACTS}
    entry, data = in_memory(name), compose_config("train", f"data={name}").data
    assert (data.num_classes, data.in_chans, data.image_size) == (len(entry.classes), entry.in_chans, entry.image_size)
    assert compose_config("train", f"data={name}", "data.num_classes=3").data.num_classes == 3  # an override wins


@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO / "configs" / "data").glob("*.yaml")))
def test_every_data_config_is_a_whole_data_config_whose_values_only_the_yaml_states(name):
    """Each ``data=<name>`` composes to a :class:`DataConfig` (configs/data/base/dataset.yaml declares
    every field), whose every value came from a YAML: the class states no default (issue 56), and each
    field is a data key of resnet/schema.py or one it checks elsewhere (name, root, workers: check_data_config)."""
    from dataclasses import MISSING, fields

    from data.config import DataConfig
    from resnet.schema import KEYS

    data = data_config(name, workers=0)
    assert data.name == name
    assert [f.name for f in fields(DataConfig) if f.default is not MISSING or f.default_factory is not MISSING] == []
    unchecked = {f.name for f in fields(DataConfig)} - {key.removeprefix("data.") for key in KEYS}
    assert unchecked <= {"name", "root", "workers", "auto_augment", "progressive_resize"}


def test_a_data_config_lacking_a_key_names_the_file_that_declares_it():
    from data.config import DataConfig

    whole = OmegaConf.to_container(compose_config("train", "data=synthetic").data, resolve=True)
    del whole["min_scale"]
    with pytest.raises(ConfigError, match=r"^data=synthetic has no data.min_scale: .*configs/data/base/dataset.yaml"):
        DataConfig.from_config(whole)


def test_a_data_config_whose_workers_is_still_auto_is_one_line_at_the_loaders():
    """The YAML's workers=auto is resolved by train.py and data_config; a DataConfig built from the
    composed YAML by hand reaches the loaders with it (it was a TypeError deep in a size check)."""
    data = dataclasses.replace(data_config("synthetic"), workers="auto")
    with pytest.raises(ValueError, match=r"^data.workers=auto: the loaders take a number; resolve it first"):
        build_loaders(data, batch_size=8)
