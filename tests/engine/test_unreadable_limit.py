"""``max_unreadable`` in training: checked as an epoch goes (on the images read so far, summed over
the processes, from ``max_unreadable_after`` images on) and at its end, and on every validation; over
it, one line naming the share and what ``last.pt`` holds (issue 55, items 3 and 4)."""

from __future__ import annotations

import contextlib
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from data import Normalize
from data.batch import Batch
from resnet import build_model
from resnet.checkpoint import load_checkpoint
from resnet.engine.loop import ImagesRead, StepContext, train_one_epoch
from resnet.engine.run import RunFailed, unreadable_limit
from resnet.runtime.device import Runtime
from tests.helpers import procs
from tests.helpers.faults import assert_status
from tests.helpers.imagegen import make_folder
from tests.helpers.training import launcher_overrides, run_in_process

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

DAMAGE = (lambda b: b"", lambda b: b[: len(b) // 3], lambda b: b"not a JPEG at all")  # empty, cut short, not an image


def damage(files: list[Path]) -> None:
    for n, path in enumerate(files):
        path.write_bytes(DAMAGE[n % 3](path.read_bytes()))


def every_other(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.JPEG"))[::2]


# --- the loop: what it hands the check, and when ----------------------------------------------


def batch(readable: int, unreadable: int) -> Batch:
    images = torch.randint(0, 256, (readable, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    bad = [f"bad{i}.JPEG (empty file)" for i in range(unreadable)]
    return Batch(images, torch.arange(readable) % 3, unreadable, bad)


def epoch(batches: list[Batch], check) -> int:
    """Train one epoch of ``batches`` with ``check`` as the unreadable check; the optimizer steps taken
    (the scheduler's count), also where ``check`` raised."""
    torch.manual_seed(0)
    model = build_model("resnet_tiny", num_classes=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    ctx = StepContext(
        runtime=Runtime.local(),
        normalize=Normalize("torch"),
        progress=False,
        check_unreadable=check,
        on_nonfinite="stop",
        log_every=50,
    )
    with contextlib.suppress(RunFailed):
        train_one_epoch(model, batches, optimizer, scheduler, ctx, epoch=2, global_step=0)
    return scheduler.last_epoch


def test_the_loop_checks_the_images_read_so_far_before_each_step_and_the_whole_epoch_at_its_end():
    seen: list[tuple] = []
    batches = [batch(4, 0), batch(2, 2), batch(0, 4), batch(4, 0)]  # the third: an empty step
    steps = epoch(batches, lambda e, read: seen.append((e, read.unreadable, read.read, read.ended)))
    assert steps == 3
    assert seen == [(2, 0, 4, False), (2, 2, 8, False), (2, 6, 12, False), (2, 6, 16, False), (2, 6, 16, True)]

    def stop_at_four(e: int, read: ImagesRead) -> None:
        if read.unreadable >= 4:
            raise RunFailed("stopped")

    assert epoch([batch(4, 0), batch(2, 2), batch(2, 2), batch(4, 0)], stop_at_four) == 2  # before the third step


def check(limit: float = 0.05, after: int = 100, kept: str = "the previous last.pt is intact"):
    cfg = OmegaConf.create({"max_unreadable": limit, "max_unreadable_after": after})
    return unreadable_limit(cfg, SimpleNamespace(kept=kept, env=Runtime.local().env))


def test_a_few_bad_files_early_stop_nothing_a_bad_mount_stops_once_enough_are_read():
    limit = check()
    limit(0, ImagesRead(3, 4, ["a.JPEG (empty file)"]))  # 75 % of the first 4: too few to tell
    limit(0, ImagesRead(50, 99, []))  # still under max_unreadable_after=100
    limit(0, ImagesRead(5, 100, []))  # 5 %: not more than max_unreadable
    with pytest.raises(RunFailed) as stopped:
        limit(4, ImagesRead(51, 100, ["a.JPEG (empty file)", "b.JPEG (not an image)", "c.JPEG (empty file)"]))
    assert str(stopped.value) == (
        "epoch 5 could not read 51 of the first 100 images it read (51% so far, more than max_unreadable=0.05; "
        "checked from max_unreadable_after=100 images on), e.g. a.JPEG (empty file); b.JPEG (not an image); "
        "the previous last.pt is intact. Restore the data and run again with resume=true, or pass a higher "
        "max_unreadable"
    )
    with pytest.raises(RunFailed, match=r"^epoch 1 could not read 3 of its 10 images \(30%, more than"):
        limit(0, ImagesRead(3, 10, [], ended=True))  # the epoch's end checks whatever its size
    check(limit=1.0)(0, ImagesRead(10, 10, [], ended=True))  # 1: never
    with pytest.raises(RunFailed, match=r"\(5.1% so far, more than max_unreadable=0.05"):
        limit(0, ImagesRead(51, 1000, []))  # a share that would round to the limit keeps a decimal


# --- whole runs ---------------------------------------------------------------------------


@pytest.fixture
def folder(tmp_path) -> Path:
    """3 classes x 8 train images (6 steps of 4), 20 val images."""
    root = tmp_path / "data"
    make_folder(root / "train", {"a": 8, "b": 8, "c": 8}, size=(40, 36))
    make_folder(root / "val", {"a": 7, "b": 7, "c": 6}, size=(40, 36))
    return root


def test_a_bad_mount_stops_within_the_first_images_of_the_epoch_not_at_its_end(folder, tmp_path):
    run_dir = tmp_path / "run"
    run_in_process(folder, run_dir, "stop_after=1", "max_unreadable_after=8")
    damage(every_other(folder / "train"))  # half the training set gone after epoch 1
    with pytest.raises(RunFailed) as stopped:
        run_in_process(folder, run_dir, "resume=true", "max_unreadable_after=8")
    line = str(stopped.value)
    found = re.match(r"epoch 2 could not read (\d+) of the first (\d+) images it read \((\d+)% so far", line)
    assert found, line
    assert int(found[2]) in (8, 12)  # the 2nd or 3rd batch of 6, not the epoch's end (24)
    assert "e.g. " in line and "; the previous last.pt is intact. Restore the data" in line  # what resume read
    assert "\n" not in line
    assert load_checkpoint(run_dir / "last.pt")["epoch"] == 1


def test_validation_over_max_unreadable_stops_keeping_the_epoch_before_and_under_it_says_so(folder, tmp_path, capsys):
    val = sorted((folder / "val").rglob("*.JPEG"))
    damage(val[:1])  # 1 of 20: 5 %, not more than max_unreadable=0.05
    run_in_process(folder, tmp_path / "under", "epochs=1")
    out = capsys.readouterr().out
    assert "(on 19 of the 20 val images)" in out  # the epoch line
    assert " 19 of 20 |" in out and " 0 / 1 |" in out  # the closing table: val images, skipped (train / val)
    damage(val[1:10])  # 10 of 20: half the val folder cut short
    run_dir = tmp_path / "over"
    with pytest.raises(RunFailed) as stopped:
        run_in_process(folder, run_dir, "eval_every=2")  # epoch 1 saved, epoch 2 validated
    assert str(stopped.value).startswith(
        "the validation after epoch 2 could not read 10 of its 20 images (50%, more than max_unreadable=0.05), e.g. "
    )
    assert str(stopped.value).endswith(
        "; last.pt saved after epoch 1 (step 6) is intact. Restore the val data and run again with resume=true, "
        "or pass a higher max_unreadable"
    )
    assert load_checkpoint(run_dir / "last.pt")["epoch"] == 1
    run_in_process(folder, run_dir, "eval_every=2", "resume=true", "max_unreadable=0.5")  # allowed: said so
    out = capsys.readouterr().out
    assert "(on 10 of the 20 val images)" in out and " 10 of 20 |" in out and " 0 / 10 |" in out


@pytest.mark.slow
def test_two_ranks_stop_at_the_same_step_with_the_same_line(tmp_path):
    root = tmp_path / "data"
    make_folder(root / "train", {"a": 8, "b": 8, "c": 8}, size=(40, 36))
    make_folder(root / "val", {"a": 2, "b": 2, "c": 2}, size=(40, 36))
    damage(every_other(root / "train"))
    run_dir = tmp_path / "run"
    args = [*procs.torchrun_here(), "train.py",
            *launcher_overrides(root, run_dir, 2), "max_unreadable_after=8"]  # fmt: skip
    proc = procs.run(args, timeout=180)
    assert_status(proc, 1)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, proc.stderr[-3000:]  # one line: rank 0's (every rank stopped with it, exit 1)
    # 2 x 2 images a step: the first check at 8 images, after the 2nd step's batch (the epoch has 24)
    assert re.match(r"error: epoch 1 could not read \d+ of the first 8 images it read \(\d+% so far", lines[0])
    exits = re.findall(r"^\s*exitcode\s*:\s*(-?\d+)", proc.stderr, re.MULTILINE)
    assert exits == ["1", "1"], proc.stderr[-3000:]
    assert not (run_dir / "last.pt").exists() and "no last.pt was written before" in lines[0]
    shutil.rmtree(root)
