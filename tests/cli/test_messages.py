"""Messages that name what a file is: a skipped image by its path (not PIL's ``<_io.BytesIO object
at 0x...>``), a plain pickle as not a PyTorch checkpoint (not "corrupt")."""

from __future__ import annotations

import pickle

import pytest
import torch

from data import SkipLog, build_loaders
from resnet.checkpoint import CheckpointError, load_checkpoint, load_model
from resnet.config import data_config
from tests.helpers.imagegen import make_folder


def test_a_file_that_is_no_image_is_named_by_its_path_not_a_bytesio(tmp_path):
    make_folder(tmp_path / "train", {"a": 3})
    make_folder(tmp_path / "val", {"a": 1})
    text = tmp_path / "train" / "a" / "notes.JPEG"
    text.write_bytes(b"shopping list: eggs, milk\n" * 20)  # neither torchvision nor PIL reads it
    skips = SkipLog()
    with build_loaders(
        data_config("imagefolder", root=str(tmp_path), workers=0, image_size=16), batch_size=4
    ) as loaders:
        loaders.set_epoch(0)
        for batch in loaders.train:
            skips.add(batch)
    assert skips.count == 1
    line = str(skips)
    assert str(text) in line and "not an image file" in line
    assert "BytesIO" not in line and " at 0x" not in line, line


@pytest.mark.parametrize("protocol", [2, pickle.DEFAULT_PROTOCOL, pickle.HIGHEST_PROTOCOL])
@pytest.mark.parametrize("loader", [load_checkpoint, load_model])
def test_a_plain_pickle_is_not_a_pytorch_checkpoint(tmp_path, protocol, loader):
    path = tmp_path / "weights.pt"
    with open(path, "wb") as f:
        pickle.dump({"a": 1}, f, protocol=protocol)
    with pytest.raises(CheckpointError) as refused:
        loader(path)
    message = str(refused.value)
    assert message.startswith(f"{path} is not a PyTorch checkpoint: a plain pickle"), message
    assert f"{path} is corrupt" not in message


def test_torchs_legacy_format_is_still_read_as_a_torch_file(tmp_path):
    """The legacy format is a pickle too, opening with torch's magic number: not 'a plain pickle'."""
    path = tmp_path / "legacy.pt"
    torch.save({"weight": torch.zeros(2)}, path, _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointError, match="bare state dict"):
        load_checkpoint(path)
    for protocol in (2, 4):  # 4: behind a FRAME opcode (weights_only cannot read it: another message)
        torch.save({"weight": torch.zeros(2)}, path, _use_new_zipfile_serialization=False, pickle_protocol=protocol)
        path.write_bytes(path.read_bytes()[:40])  # the magic number whole, the rest cut
        with pytest.raises(CheckpointError) as refused:
            load_checkpoint(path)
        assert "not a PyTorch checkpoint" not in str(refused.value)
