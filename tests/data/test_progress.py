"""Progress as a bar on a terminal, plain lines in a batch job's log (data/progress.py)."""

from __future__ import annotations

import io
import os
import re

import pytest
import torch
from torch import nn

import resnet
from data import Normalize
from data.progress import ENV, Progress, progress_mode
from data.shards import convert
from data.shards.write import Sample
from resnet.checkpoint import save_checkpoint
from resnet.config import ConfigError
from resnet.engine.loop import NonFiniteLoss, StepContext, train_one_epoch
from resnet.evaluation.loop import evaluate
from resnet.evaluation.run import evaluate_weights
from resnet.runtime.device import Runtime
from tests.helpers.compose import compose_config
from tests.helpers.faults import nan_at
from tests.helpers.imagegen import make_folder
from tests.helpers.training import read_csv, run_in_process

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

ELAPSED = r"\d+:\d\d:\d\d elapsed"
ETA = rf"{ELAPSED}, ETA \d+:\d\d:\d\d"


def _writing_end(ends: tuple[int, int]):
    """A text file on the second of two connected descriptors; both closed after the test."""
    other, mine = ends
    stream = open(mine, "w")  # noqa: SIM115 -- closed below
    yield stream
    stream.close()
    os.close(other)


@pytest.fixture
def terminal():
    """A pseudo-terminal's end, as a text file: isatty() is true."""
    yield from _writing_end(os.openpty())


@pytest.fixture
def pipe():
    yield from _writing_end(os.pipe())


@pytest.fixture
def no_override(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


# --- the choice -----------------------------------------------------------------------------


def test_a_bar_on_a_terminal_lines_on_a_pipe_or_file(terminal, pipe, tmp_path):
    assert progress_mode(terminal, {}) == "bar"
    assert progress_mode(pipe, {}) == "lines"
    with open(tmp_path / "log", "w") as log:
        assert progress_mode(log, {}) == "lines"
    assert progress_mode(io.StringIO(), {}) == "lines"


def test_a_slurm_batch_job_gets_lines_even_on_a_terminal(terminal):
    assert progress_mode(terminal, {"SLURM_JOB_ID": "42", "SLURM_JOB_NAME": "train-rn50"}) == "lines"
    assert progress_mode(terminal, {"SLURM_JOB_ID": "42"}) == "lines"
    # interactive: srun --pty (SLURM_PTY_PORT), or the shell salloc / srun --pty bash gives
    assert progress_mode(terminal, {"SLURM_JOB_ID": "42", "SLURM_JOB_NAME": "x", "SLURM_PTY_PORT": "4242"}) == "bar"
    assert progress_mode(terminal, {"SLURM_JOB_ID": "42", "SLURM_JOB_NAME": "bash"}) == "bar"
    assert progress_mode(terminal, {"SLURM_JOB_ID": "", "SLURM_JOB_NAME": "train"}) == "bar"


def test_the_environment_overrides_the_choice(terminal, pipe):
    assert progress_mode(terminal, {ENV: "lines"}) == "lines"
    assert progress_mode(pipe, {ENV: "bar"}) == "bar"
    assert progress_mode(terminal, {ENV: " OFF "}) == "off"
    assert progress_mode(pipe, {ENV: "auto"}) == "lines" and progress_mode(terminal, {ENV: ""}) == "bar"
    assert progress_mode(terminal, {ENV: "bar", "SLURM_JOB_ID": "42"}) == "bar"
    with pytest.raises(ValueError, match="RESNET_PROGRESS='bars': use bar, lines, off or auto"):
        progress_mode(terminal, {ENV: "bars"})


def test_the_mode_follows_sys_stderr(monkeypatch, terminal, pipe):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setattr("sys.stderr", terminal)
    assert Progress(3, "x").mode == "bar"
    monkeypatch.setattr("sys.stderr", pipe)
    assert Progress(3, "x").mode == "lines" and Progress(3, "x", enabled=False).mode == "off"
    monkeypatch.setenv(ENV, "line")
    with pytest.raises(ConfigError, match="RESNET_PROGRESS='line'"):  # on every rank, not only the one that shows it
        Progress(3, "x", enabled=False)


# --- the lines ------------------------------------------------------------------------------


def test_lines_every_n_and_at_the_end_once():
    out = io.StringIO()
    with Progress(7, "val", unit="batches", every=2, mode="lines", file=out) as bar:
        for _ in range(7):
            bar.update(1, images=4)
    lines = out.getvalue().splitlines()
    counts = [re.match(r"val: (\d)/7 batches \((\d+)%\)", line).groups() for line in lines]
    assert counts == [("2", "28"), ("4", "57"), ("6", "85"), ("7", "100")]
    assert re.fullmatch(rf"val: 2/7 batches \(28%\) \| img/s [\d,]+ \| {ETA}", lines[0]), lines[0]
    assert re.fullmatch(rf"val: 7/7 batches \(100%\) \| img/s [\d,]+ \| {ELAPSED}", lines[-1]), lines[-1]
    assert "\r" not in out.getvalue()


def test_log_prints_the_callers_numbers_and_close_adds_nothing_after_them():
    out = io.StringIO()
    bar = Progress(6, "train 3", initial=2, unit="batches", mode="lines", file=out)  # resumed after 2 batches
    bar.update(2)
    bar.log({"loss": "2.314", "lr": "0.1", "img/s": "1,234"})
    bar.update(2)
    bar.log({"loss": "2.001", "lr": "0.1", "img/s": "1,240"})
    bar.close()
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert re.fullmatch(rf"train 3: 4/6 batches \(66%\) \| loss 2.314 \| lr 0.1 \| img/s 1,234 \| {ETA}", lines[0])
    assert lines[1].startswith("train 3: 6/6 batches (100%) | loss 2.001 |")


def test_an_interrupted_loop_still_says_where_it_stopped():
    out = io.StringIO()
    with pytest.raises(KeyboardInterrupt), Progress(12, "train shards", unit="img", every=3, mode="lines", file=out):
        raise KeyboardInterrupt
    assert re.fullmatch(rf"train shards: 0/12 img \(0%\) \| {ELAPSED}\n", out.getvalue())


def test_unknown_total_off_and_bar():
    out = io.StringIO()
    with Progress(None, "read", unit="img", every=500, mode="lines", file=out) as bar:
        bar.update(1200)
    assert re.fullmatch(rf"read: 1,200 img \| {ELAPSED}\n", out.getvalue())
    off = io.StringIO()
    with Progress(5, "x", every=1, enabled=False, mode="lines", file=off) as bar:
        bar.update(5)
        bar.log({"loss": "1"})
    assert off.getvalue() == ""
    drawn = io.StringIO()
    with Progress(5, "x", mode="bar", file=drawn) as bar:
        bar.update(5)
    assert "\r" in drawn.getvalue()  # tqdm's redraws: what a log must not get


# --- the loops ------------------------------------------------------------------------------


def progress_lines(text: str, desc: str, unit: str = "batches") -> list[str]:
    """The plain progress lines of ``desc`` (not a bar's redraws, which splitlines also cuts at '\\r')."""
    return [line for line in text.splitlines() if re.match(rf"{re.escape(desc)}: [\d,]+/[\d,]+ {unit} ", line)]


def test_an_epoch_whose_last_batch_is_empty_ends_with_a_line_of_its_own(capsys, no_override):
    """Lines come at the log_every steps, where the loop reads the loss anyway; an epoch that
    ends on a batch without a step (all unreadable) still gets its last line, without a loss."""
    torch.manual_seed(0)
    runtime = Runtime.local()
    model = resnet.build_model("resnet_tiny", num_classes=3)
    batches = [(torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8), torch.randint(0, 3, (4,))) for _ in range(4)]
    batches.append((torch.zeros(0, 3, 32, 32, dtype=torch.uint8), torch.zeros(0, dtype=torch.long)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    ctx = StepContext(
        runtime=runtime, normalize=Normalize("torch"), loss_fn=nn.CrossEntropyLoss(), log_every=2, on_nonfinite="stop"
    )
    stats = train_one_epoch(model, batches, optimizer, scheduler, ctx, epoch=0, global_step=0)
    assert stats.steps == 4 and stats.empty_steps == 1
    captured = capsys.readouterr()
    lines = progress_lines(captured.err, "train 1")  # epoch=0 is the first epoch: 1-based, as the epoch line
    assert [line.split(" | ")[0] for line in lines] == [
        "train 1: 2/5 batches (40%)",
        "train 1: 4/5 batches (80%)",
        "train 1: 5/5 batches (100%)",
    ]
    assert " | loss (running mean) " in lines[1] and " | loss" not in lines[2]
    assert "\r" not in captured.err and captured.out == ""


def test_evaluate_prints_a_line_every_log_every_batches(capsys, no_override):
    torch.manual_seed(0)
    model = resnet.build_model("resnet_tiny", num_classes=3)
    batches = [(torch.randint(0, 256, (3, 3, 28, 28), dtype=torch.uint8), torch.randint(0, 3, (3,))) for _ in range(7)]
    result = evaluate(model, batches, Runtime.local(), Normalize("torch"), desc="val EMA", log_every=3)
    assert result.n_images == 21
    captured = capsys.readouterr()
    lines = progress_lines(captured.err, "val EMA")
    assert [line.split(" | ")[0] for line in lines] == [
        "val EMA: 3/7 batches (42%)",
        "val EMA: 6/7 batches (85%)",
        "val EMA: 7/7 batches (100%)",
    ]
    assert "\r" not in captured.err and captured.out == ""


def test_train_py_prints_three_lines_an_epoch_to_a_pipe(tiny_folder, tmp_path, capsys, no_override):
    """train.py's run with log_every=2 on 6 batches an epoch: a line at steps 2, 4 and 6 of
    each epoch and one per validation (2 batches < 50); stdout keeps only the epoch rows. The bar,
    the epoch line, steps.csv and metrics.csv count epochs from 1."""
    run_in_process(tiny_folder, tmp_path, "device=cpu")
    captured = capsys.readouterr()
    for epoch in (1, 2):
        lines = progress_lines(captured.err, f"train {epoch}")
        assert [line.split(" | ")[0] for line in lines] == [
            f"train {epoch}: 2/6 batches (33%)",
            f"train {epoch}: 4/6 batches (66%)",
            f"train {epoch}: 6/6 batches (100%)",
        ], captured.err
        pattern = (
            rf"train {epoch}: 2/6 batches \(33%\) \| loss \(running mean\) \d+\.\d{{3}} \| lr [\d.e-]+ \| "
            rf"img/s [\d,]+ \| {ETA}"
        )
        assert re.fullmatch(pattern, lines[0]), lines[0]
        # the bar's running mean of the epoch ends at the epoch line's mean (one process)
        running = float(re.search(r"\| loss \(running mean\) ([\d.]+) \|", lines[-1]).group(1))
        mean = float(
            re.search(rf"^epoch {epoch} \| train loss \(epoch mean\) ([\d.]+) \|", captured.out, re.M).group(1)
        )
        assert running == pytest.approx(mean, abs=6e-4)
    assert [line.split(" | ")[0] for line in progress_lines(captured.err, "val")] == ["val: 2/2 batches (100%)"] * 2
    assert "\r" not in captured.err + captured.out
    assert not any(re.search(r"\d+/\d+ batches", line) for line in captured.out.splitlines())
    assert [line.split(" | ")[0] for line in captured.out.splitlines() if line.startswith("epoch")] == [
        "epoch 1",
        "epoch 2",
    ]
    assert [row["epoch"] for row in read_csv(tmp_path / "steps.csv")] == ["1"] * 3 + ["2"] * 3
    assert [row["epoch"] for row in read_csv(tmp_path / "metrics.csv")] == ["1", "2"]


def test_after_a_resume_the_bar_shows_the_epoch_being_trained(
    tiny_folder, tmp_path, capsys, monkeypatch, no_override, one_thread
):
    """``resumed from X after batch B of epoch E``: the bar goes on at ``train E``, from batch B;
    steps.csv holds each epoch's rows once, 1-based, as every line numbers them."""
    nan_at(monkeypatch, 5)  # the 5th loss: the run stops, keeping the last.pt saved after 4 batches
    with pytest.raises(NonFiniteLoss, match=r"at step 5 \(epoch 1, batch 5\)"):
        run_in_process(tiny_folder, tmp_path, "checkpoint_every=2", "log_every=1")
    monkeypatch.undo()
    monkeypatch.delenv(ENV, raising=False)
    capsys.readouterr()
    run_in_process(tiny_folder, tmp_path, "checkpoint_every=2", "log_every=1", "resume=true", "stop_after=1")
    captured = capsys.readouterr()
    assert "after batch 4 of epoch 1 (step 4)" in captured.out
    assert [line.split(":")[0] for line in captured.err.splitlines() if line.startswith("train ")] == ["train 1"] * 2
    assert progress_lines(captured.err, "train 1")[0].startswith("train 1: 5/6 batches")
    run_in_process(tiny_folder, tmp_path, "checkpoint_every=2", "log_every=1", "resume=true")
    captured = capsys.readouterr()
    assert "after epoch 1 (step 6)" in captured.out
    assert progress_lines(captured.err, "train 2")[0].startswith("train 2: 1/6 batches")
    assert not progress_lines(captured.err, "train 1")
    assert [row["epoch"] for row in read_csv(tmp_path / "steps.csv")] == ["1"] * 6 + ["2"] * 6


def test_eval_py_prints_its_line_to_a_pipe_and_a_bar_when_asked(tmp_path, capsys, monkeypatch, no_override):
    make_folder(tmp_path / "data" / "val", {"a": 3, "b": 2, "c": 2}, size=(40, 36))
    torch.manual_seed(0)
    weights = save_checkpoint(tmp_path / "last.pt", resnet.build_model("resnet_tiny", num_classes=3))
    overrides = [
        f"weights={weights}",
        "data=imagefolder",
        f"data.root={tmp_path / 'data'}",
        "data.num_classes=3",
        "data.workers=0",
        "batch_size=2",
        "device=cpu",
        f"results_file={tmp_path / 'eval.jsonl'}",
    ]
    evaluate_weights(compose_config("eval", *overrides))
    captured = capsys.readouterr()
    [line] = progress_lines(captured.err, "eval")  # 4 batches, fewer than log_every's 50: the last line only
    assert re.fullmatch(rf"eval: 4/4 batches \(100%\) \| img/s [\d,]+ \| {ELAPSED}", line), line
    assert "\r" not in captured.err + captured.out and "top1_err" in captured.out

    evaluate_weights(compose_config("eval", *overrides, "log_every=3"))  # eval.py's own log_every
    lines = progress_lines(capsys.readouterr().err, "eval")
    assert [line.split(" batches")[0] for line in lines] == ["eval: 3/4", "eval: 4/4"]

    monkeypatch.setenv(ENV, "bar")  # forced: tqdm's bar, on the same non-terminal stream
    evaluate_weights(compose_config("eval", *overrides))
    captured = capsys.readouterr()
    assert "\r" in captured.err and not progress_lines(captured.err, "eval")


def test_shard_conversion_prints_a_line_every_percent(tmp_path, capsys, no_override):
    """A conversion of ImageNet runs for hours in a batch job: 100 lines, not a bar's redraws."""
    (tmp_path / "src").mkdir()
    samples = []
    for i in range(250):
        (tmp_path / "src" / f"{i}.JPEG").write_bytes(b"not decoded, only copied %d" % i)
        samples.append(Sample(f"img{i:03d}", i % 2, str(tmp_path / "src" / f"{i}.JPEG")))
    convert(samples, ["a", "b"], tmp_path / "out", "train", shard_size=64)
    captured = capsys.readouterr()
    lines = progress_lines(captured.err, "train shards", "img")
    assert len(lines) == 125 and lines[0].startswith("train shards: 2/250 img (0%) | ")  # every 250 // 100 images
    assert lines[-1].startswith("train shards: 250/250 img (100%) | ") and "\r" not in captured.err
    assert captured.out.startswith("train: 250 images in 4 shards") and captured.out.count("\n") == 1
