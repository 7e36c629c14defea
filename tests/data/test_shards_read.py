"""Reading shards: split over ranks and workers, exact-once evaluation, mid-epoch resume,
bad records, training and eval.py end to end (same numbers as the image folder they came from),
and eval.py on the raw flat ILSVRC2012 val/."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import tarfile
import zlib
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from data import build_loaders
from data.batch import pass_batch
from data.imagefolder import find_classes, find_images
from data.shards import read_index
from data.shards.read import ShardBatches
from resnet.checkpoint import load_checkpoint
from resnet.config import ConfigError, data_config
from resnet.engine import run as engine_run
from resnet.engine.run import train
from resnet.evaluation.run import evaluate_weights
from resnet.job.preempt import Stopped
from tests.helpers.compose import compose_config
from tests.helpers.faults import assert_same_training
from tests.helpers.imagegen import make_folder
from tests.helpers.shards import shard_overrides, to_shards
from tests.helpers.training import PY, run_slurm_tasks

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    """(image folder, the same images as shards of 4): 25 train images in 7 shards, 7 val in 2."""
    root = tmp_path_factory.mktemp("shards")
    make_folder(root / "folder" / "train", {"a": 9, "b": 8, "c": 8}, size=(40, 36))
    make_folder(root / "folder" / "val", {"a": 3, "b": 2, "c": 2}, size=(40, 36))
    to_shards(root / "folder", root / "shards", shard_size=4)
    return root / "folder", root / "shards"


def crc(data: bytes) -> torch.Tensor:
    """A 'transform' that names the image: which sample landed where is then visible."""
    return torch.tensor([zlib.crc32(data)])


def read_all(root: Path, world_size: int, workers: int, train: bool, epoch: int = 0, start: int = 0, **kw):
    """Per rank: the list of batches, each a list of image checksums."""
    per_rank = []
    for rank in range(world_size):
        dataset = ShardBatches.open(root, crc, 4, rank, world_size, seed=1, train=train, **kw)
        dataset.set_epoch(epoch, start)
        loader = DataLoader(dataset, batch_size=None, num_workers=workers, collate_fn=pass_batch)
        per_rank.append([batch.images[:, 0].tolist() for batch in loader])
    return per_rank


def source_checksums(folder: Path) -> list[int]:
    return sorted(zlib.crc32(Path(p).read_bytes()) for p, _ in find_images(folder, find_classes(folder)))


@pytest.mark.parametrize(("world_size", "workers"), [(1, 0), (2, 2), (3, 0)])
def test_evaluation_reads_every_image_exactly_once(data, world_size, workers):
    folder, shards = data
    per_rank = read_all(shards / "val", world_size, workers, train=False)
    seen = sorted(c for rank in per_rank for batch in rank for c in batch)
    assert seen == source_checksums(folder / "val")  # 7 images: none dropped, none twice


def test_val_images_reads_the_first_n_images_of_the_shards_at_every_world_size(data):
    _, shards = data
    first = [c for batch in read_all(shards / "val", 1, 0, train=False)[0] for c in batch][:5]
    for world_size, workers in ((1, 0), (2, 2), (3, 0)):
        per_rank = read_all(shards / "val", world_size, workers, train=False, limit=5)
        assert sorted(c for rank in per_rank for batch in rank for c in batch) == sorted(first)
    loaders = build_loaders(
        data_config("imagenet_shards", root=str(shards), image_size=16, workers=0),
        4,
        rank=1,
        world_size=2,
        val_images=5,
    )
    assert (loaders.val_size, loaders.val_split_size, sum(len(b.labels) for b in loaders.val)) == (5, 7, 3)


@pytest.mark.parametrize(("world_size", "workers"), [(1, 2), (2, 0), (2, 2)])
def test_training_ranks_get_equal_disjoint_shares_reshuffled_per_epoch(data, world_size, workers):
    folder, shards = data
    epoch0 = read_all(shards / "train", world_size, workers, train=True)
    steps = {len(rank) for rank in epoch0}
    assert steps == {25 // world_size // 4}  # equal steps on every rank: DDP never waits
    flat = [c for rank in epoch0 for batch in rank for c in batch]
    assert len(flat) == len(set(flat)) and set(flat) <= set(source_checksums(folder / "train"))
    assert read_all(shards / "train", world_size, workers, train=True) == epoch0  # a plan, not chance
    assert read_all(shards / "train", world_size, workers, train=True, epoch=1) != epoch0


@pytest.mark.parametrize("workers", [0, 2])
def test_a_mid_epoch_start_reads_what_the_uninterrupted_epoch_read_next(data, workers):
    _, shards = data
    (whole,) = read_all(shards / "train", 1, workers, train=True, epoch=3)
    for start in (1, 2, 5):
        (rest,) = read_all(shards / "train", 1, workers, train=True, epoch=3, start=start)
        assert rest == whole[start:], start


def test_a_record_that_does_not_decode_is_skipped_and_counted(tmp_path):
    shard = tmp_path / "val"
    shard.mkdir()
    from tests.helpers.imagegen import jpeg_bytes, smooth_image

    members = [("ok.jpg", jpeg_bytes(smooth_image(40, 36), quality=90)), ("ok.cls", b"0"),
               ("junk.jpg", b"not an image"), ("junk.cls", b"1")]  # fmt: skip
    with tarfile.open(shard / "val-000000.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    from data.shards import ShardIndex, ShardInfo, write_index

    size = (shard / "val-000000.tar").stat().st_size
    write_index(ShardIndex(shard, "val", ["a", "b"], [ShardInfo("val-000000.tar", 2, size)], source="test"))
    from resnet.evaluation.loader import ResizeCrop

    batches = list(ShardBatches.open(shard, ResizeCrop(32, 32), 4, train=False))
    assert [(len(b.labels), b.skipped) for b in batches] == [(1, 1)]
    assert "val-000000.tar:junk" in batches[0].skipped_paths[0]


def test_a_truncated_or_foreign_shard_stops_training_before_it_starts_in_one_line(data, tmp_path):
    folder, shards = data
    broken = tmp_path / "broken"
    to_shards(folder, broken, shard_size=4)
    first = broken / "train" / read_index(broken / "train").shards[0].name
    first.write_bytes(first.read_bytes()[:1000])
    with pytest.raises(ConfigError, match=r"train-000000\.tar truncated: 1000 bytes.*re-run the conversion"):
        train(compose_config("train", *shard_overrides(broken, tmp_path / "run")))
    first.write_bytes(b"x" * read_index(broken / "train").shards[0].bytes)  # the recorded size, not a tar
    with pytest.raises(ConfigError, match=r"train-000000\.tar is not a tar file"):
        train(compose_config("train", *shard_overrides(broken, tmp_path / "run")))


@pytest.mark.slow
def test_training_on_shards_resumed_at_an_epoch_end_or_preempted_mid_epoch_ends_with_the_same_weights(
    data, tmp_path, monkeypatch
):
    # Two persistent loader workers and augmentation, 6 steps an epoch. First a run stopped after
    # its first epoch (stop_after=1, a SLURM time limit's use) and resumed: the next epoch's
    # reshuffled plan must be the one the uninterrupted run read.
    _, shards = data
    common = ("data.workers=2", "data.augment=true")
    straight = train(compose_config("train", *shard_overrides(shards, tmp_path / "straight", *common)))
    assert straight["n_val_images"] == 7 and straight["dataset"] == "imagenet_shards"
    split = tmp_path / "split"
    train(compose_config("train", *shard_overrides(shards, split, *common, "stop_after=1")))
    assert load_checkpoint(split / "last.pt")["epoch"] == 1
    train(compose_config("train", *shard_overrides(shards, split, *common, "resume=true")))
    assert_same_training(load_checkpoint(tmp_path / "straight" / "last.pt"), load_checkpoint(split / "last.pt"))

    # Then SIGUSR1 at the 4th step: it saves after that step and stops; the resumed epoch's
    # position must reach the workers (shared memory).

    real = engine_run.loss_and_augment
    calls = []

    def signalling(cfg, num_classes, device):
        loss_fn, augment = real(cfg, num_classes, device)

        def loss(logits, labels):
            calls.append(1)
            if len(calls) == 4:
                os.kill(os.getpid(), signal.SIGUSR1)
            return loss_fn(logits, labels)

        return loss, augment

    monkeypatch.setattr(engine_run, "loss_and_augment", signalling)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    run_dir = tmp_path / "preempted"
    with pytest.raises(Stopped, match="stopped by SIGUSR1"):
        train(compose_config("train", *shard_overrides(shards, run_dir, *common, "resume=true")))
    assert load_checkpoint(run_dir / "last.pt")["epoch_partial"]["batches"] == 4
    monkeypatch.setattr(engine_run, "loss_and_augment", real)
    train(compose_config("train", *shard_overrides(shards, run_dir, *common, "resume=true")))
    assert load_checkpoint(run_dir / "last.pt")["step"] == 12
    assert_same_training(load_checkpoint(tmp_path / "straight" / "last.pt"), load_checkpoint(run_dir / "last.pt"))


@pytest.mark.slow
def test_two_processes_train_on_shards_and_validate_every_image_once(data, tmp_path):
    # Two SLURM tasks (gloo): each rank reads its own share of the shards, the 7 val images are
    # counted once over both ranks, and rank 0 alone writes; the distributed validation equals
    # one process evaluating the same weights.
    _, shards = data
    run_dir = tmp_path / "two"
    args = [o for o in shard_overrides(shards, run_dir, "epochs=1", "batch_size=2") if not o.startswith("run_dir")]
    for proc in run_slurm_tasks([PY, "train.py", *args, f"hydra.run.dir={run_dir}"], job_id=os.getpid() + 1):
        assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert (results["world_size"], results["global_batch"], results["n_val_images"]) == (2, 4, 7)
    assert len(load_checkpoint(run_dir / "last.pt")["rng"]) == 2
    with open(run_dir / "metrics.csv", newline="") as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == ["1"]  # one writer: one header, one row
    alone = evaluate_weights(
        compose_config("eval", *eval_overrides(run_dir / "last.pt", "imagenet_shards", shards, tmp_path / "r.jsonl"))
    )
    assert alone["n_images"] == 7
    assert (alone["top1_err"], alone["top5_err"]) == (results["top1_err"], results["top5_err"])


def eval_overrides(weights: Path, data_name: str, root: Path, results: Path, *extra: str) -> list[str]:
    return [f"weights={weights}", f"data={data_name}", f"data.root={root}", "data.num_classes=3",
            "data.workers=0", "batch_size=3", "device=cpu", f"results_file={results}", *extra]  # fmt: skip


@pytest.mark.parametrize("crops", [1, 10])
def test_eval_on_shards_equals_eval_on_the_folder(data, checkpoint, tmp_path, crops):
    folder, shards = data
    on_folder = evaluate_weights(
        compose_config(
            "eval", *eval_overrides(checkpoint, "imagefolder", folder, tmp_path / "r.jsonl", f"crops={crops}")
        )
    )
    on_shards = evaluate_weights(
        compose_config(
            "eval", *eval_overrides(checkpoint, "imagenet_shards", shards, tmp_path / "r.jsonl", f"crops={crops}")
        )
    )
    assert on_shards["n_images"] == on_folder["n_images"] == 7
    assert on_shards["top1_err"] == on_folder["top1_err"] and on_shards["top5_err"] == on_folder["top5_err"]


def test_eval_reads_the_raw_flat_val_with_its_solution_csv(data, checkpoint, tmp_path):
    # The same 7 images as the folder's val/, renamed ILSVRC-style into one flat folder and
    # labelled by a Kaggle-style LOC_val_solution.csv: same numbers, no conversion.
    folder, _ = data
    raw = tmp_path / "ILSVRC2012"
    (raw / "val").mkdir(parents=True)
    rows = []
    for i, (path, label) in enumerate(find_images(folder / "val", find_classes(folder / "val")), 1):
        stem = f"ILSVRC2012_val_{i:08d}"
        (raw / "val" / f"{stem}.JPEG").write_bytes(Path(path).read_bytes())
        rows.append([stem, f"{'abc'[label]} 1 2 3 4"])
    with open(raw / "LOC_val_solution.csv", "w", newline="") as f:
        csv.writer(f).writerows([["ImageId", "PredictionString"], *rows])
    on_folder = evaluate_weights(
        compose_config("eval", *eval_overrides(checkpoint, "imagefolder", folder, tmp_path / "r.jsonl"))
    )
    on_raw = evaluate_weights(
        compose_config("eval", *eval_overrides(checkpoint, "imagenet", raw, tmp_path / "r.jsonl"))
    )
    assert on_raw["n_images"] == 7 and on_raw["top1_err"] == on_folder["top1_err"]


def test_a_flat_val_without_labels_is_one_line(checkpoint, tmp_path):
    (tmp_path / "raw" / "val").mkdir(parents=True)
    (tmp_path / "raw" / "val" / "ILSVRC2012_val_00000001.JPEG").write_bytes(b"")
    with pytest.raises(ConfigError, match="data.val_labels=/path/to/LOC_val_solution.csv"):
        evaluate_weights(
            compose_config("eval", *eval_overrides(checkpoint, "imagenet", tmp_path / "raw", tmp_path / "r.jsonl"))
        )


def test_val_images_on_shards_scores_their_first_n_images(data, checkpoint, tmp_path, capsys):
    _, shards = data
    row = evaluate_weights(
        compose_config(
            "eval", *eval_overrides(checkpoint, "imagenet_shards", shards, tmp_path / "r.jsonl", "val_images=5")
        )
    )
    assert row["n_images"] == 5 and "5 of 7" in capsys.readouterr().out
