"""A resume notices a training set whose bytes changed under the same names and labels, where the set
holds a fingerprint of its content (shards: each shard's size and each sample's checksum in
index.json), and refuses in one line; image folders' names and labels only (docs/faults.md, issue 55)."""

from __future__ import annotations

import pytest

from data.identity import train_identity
from data.shards import read_index
from data.shards.read import ShardBatches
from resnet.checkpoint import load_checkpoint
from resnet.config import ConfigError
from resnet.engine.run import train
from tests.helpers.compose import compose_config
from tests.helpers.imagegen import jpeg_bytes, make_folder, smooth_image
from tests.helpers.shards import shard_overrides, to_shards


def test_a_shard_set_is_fingerprinted_by_its_content_as_well_as_its_names(tmp_path):
    make_folder(tmp_path / "folder" / "train", {"a": 3, "b": 2}, size=(40, 36))
    make_folder(tmp_path / "folder" / "val", {"a": 1, "b": 1}, size=(40, 36))
    to_shards(tmp_path / "folder", tmp_path / "before", shard_size=2)
    replace_one_image(tmp_path / "folder")
    to_shards(tmp_path / "folder", tmp_path / "after", shard_size=2)
    before, after = (
        train_identity(ShardBatches(read_index(tmp_path / f / "train"), bytes, 2)) for f in ("before", "after")
    )
    assert before["train_images"] == after["train_images"] == 5
    assert before["train_fingerprint"] == after["train_fingerprint"]  # the same names and labels
    assert before["train_content"] != after["train_content"]  # other bytes


@pytest.mark.slow
def test_resuming_on_shards_whose_bytes_changed_is_refused_in_one_line(tmp_path):
    make_folder(tmp_path / "folder" / "train", {"a": 5, "b": 4, "c": 4}, size=(40, 36))
    make_folder(tmp_path / "folder" / "val", {"a": 1, "b": 1, "c": 1}, size=(40, 36))
    shards = tmp_path / "shards"
    to_shards(tmp_path / "folder", shards, shard_size=4)
    run = tmp_path / "run"
    train(compose_config("train", *shard_overrides(shards, run, "stop_after=1")))
    assert load_checkpoint(run / "last.pt")["layout"]["train_content"]
    replace_one_image(tmp_path / "folder")
    for split in ("train", "val"):  # converted again in place: the same names, counts and labels
        for old in (shards / split).iterdir():
            old.unlink()
    to_shards(tmp_path / "folder", shards, shard_size=4)
    with pytest.raises(ConfigError, match=r"was trained on another training set \(the same 13 training images by "
                                          r"name and label, but other bytes .*\): restore the data"):  # fmt: skip
        train(compose_config("train", *shard_overrides(shards, run, "resume=true")))
    train(compose_config("train", *shard_overrides(shards, run, "resume=true", "data_changed=rescale")))  # on, if meant


def replace_one_image(folder) -> None:
    first = sorted((folder / "train" / "a").iterdir())[0]
    first.write_bytes(jpeg_bytes(smooth_image(40, 36, seed=99), quality=90))
