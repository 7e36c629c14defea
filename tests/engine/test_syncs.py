"""Host-device synchronisations and collectives of the training loop, counted (docs/gpu.md).

Every read of a device tensor on the host (``.item()``, ``.tolist()``, ``bool()``, ``.cpu()``...)
waits for the device to finish all the work queued before it. The loop reads losses once per
``log_every`` steps, plus once at the epoch's end; ``on_nonfinite=skip`` once a step, after the
backward pass is queued. On the CPU nothing waits, so the tests count the calls that would: those
made inside ``train_one_epoch`` (the loader's own work excluded), on any tensor.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import sys
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

import resnet
from data import Normalize
from resnet.checkpoint import load_checkpoint
from resnet.engine import loop
from resnet.engine import run as engine_run
from resnet.engine.loop import NonFiniteLoss, StepContext
from resnet.runtime.device import Runtime
from resnet.runtime.distributed import DistEnv
from tests.helpers.compose import compose_config
from tests.helpers.faults import nan_at
from tests.helpers.imagegen import make_folder

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__")
# functions whose tensors live on the host by construction: reading them waits for no device
HOST_SIDE = {
    "all_reduce_host",  # resnet.runtime.distributed: a CPU tensor over gloo, the decisions taken before a step
    "draw",  # resnet.grid: a grid step's preset, from a CPU generator
}
STEPS = 20
LOG_EVERY = 10


class Reads:
    """Counts host reads of tensors (:data:`READS`) and ``dist.all_reduce`` calls while ``counting``;
    ``events`` lists them in order, with the optimizer steps and backward passes between them."""

    def __init__(self) -> None:
        self.counting = False
        self.events: list[str] = []

    def log(self, event: str) -> None:
        if self.counting:
            self.events.append(event)

    @property
    def reads(self) -> list[str]:
        return [e for e in self.events if e.split(" ")[0] in READS]

    def collectives(self) -> Counter:
        """all_reduce calls by the function that made them."""
        return Counter(e.split(" ")[1] for e in self.events if e.startswith("all_reduce"))

    def wrap(self, name: str, real, caller: bool = False):
        reads = self

        def wrapper(*args, **kwargs):
            made_by = sys._getframe(1).f_code.co_name
            if caller:
                reads.log(f"{name} {made_by}")
            elif made_by not in HOST_SIDE:
                reads.log(name)
            return real(*args, **kwargs)

        return wrapper

    @contextmanager
    def inside(self) -> Iterator[None]:
        self.counting = True
        try:
            yield
        finally:
            self.counting = False

    def quiet_loader(self, loader):
        """``loader`` whose own work (reading, decoding, collating) is not counted."""
        reads = self

        class Quiet:
            def __len__(self):
                return len(loader)

            def __iter__(self):
                reads.counting = False
                iterator = iter(loader)
                while True:
                    reads.counting = False
                    try:
                        batch = next(iterator)
                    except StopIteration:
                        return
                    finally:
                        reads.counting = True
                    yield batch

        return Quiet()

    def counting_train_one_epoch(self):
        real = loop.train_one_epoch

        def train_one_epoch(model, loader, *args, **kwargs):
            with self.inside():
                return real(model, self.quiet_loader(loader), *args, **kwargs)

        return train_one_epoch


@pytest.fixture
def reads(monkeypatch) -> Reads:
    counter = Reads()
    for name in READS:
        monkeypatch.setattr(torch.Tensor, name, counter.wrap(name, getattr(torch.Tensor, name)))
    monkeypatch.setattr(torch.Tensor, "backward", counter.wrap("backward", torch.Tensor.backward))
    monkeypatch.setattr(dist, "all_reduce", counter.wrap("all_reduce", dist.all_reduce, caller=True))
    handle = register_optimizer_step_post_hook(lambda *args: counter.log("step"))
    monkeypatch.setattr(engine_run, "train_one_epoch", counter.counting_train_one_epoch())
    yield counter
    handle.remove()


@pytest.fixture(scope="module")
def twenty_steps(tmp_path_factory) -> Path:
    """An ImageFolder of 40 training images: 20 steps of 2."""
    root = tmp_path_factory.mktemp("twenty")
    make_folder(root / "train", {"a": 14, "b": 13, "c": 13}, size=(40, 36))
    make_folder(root / "val", {"a": 2, "b": 2, "c": 2}, size=(40, 36))
    return root


def train_twenty_steps(root: Path, run_dir: Path, *extra: str) -> dict:
    return engine_run.train(compose_config(
        "train", "model=resnet_tiny", "data=imagefolder", f"data.root={root}", "data.num_classes=3",
        "data.image_size=32", "data.workers=0", "batch_size=2", "epochs=1", f"log_every={LOG_EVERY}",
        "device=cpu", f"run_dir={run_dir}", *extra,
    ))  # fmt: skip


def test_twenty_steps_read_the_device_once_per_log_every_steps(twenty_steps, tmp_path, reads):
    # Before: 29 reads, a bool() of the loss-finite check every step (20), the loss at each
    # log_every step (2), the epoch's totals one by one (7). Now: 2 + 1.
    train_twenty_steps(twenty_steps, tmp_path)
    assert json.loads((tmp_path / "results.json").read_text())["epochs"] == 1
    assert len(reads.reads) <= STEPS // LOG_EVERY + 1, Counter(reads.reads)
    steps = reads.events.count("step")
    assert steps == STEPS
    # each read comes after the optimizer step of a log_every step is queued, not between a forward
    # pass and its backward: the device has that step's backward and update to run while the host waits
    positions = [i for i, e in enumerate(reads.events) if e in READS]
    assert [reads.events[:i].count("step") for i in positions] == [10, 20, 20]


def test_on_nonfinite_skip_reads_once_a_step_after_queueing_the_backward(twenty_steps, tmp_path, reads):
    # A skipped step takes no optimizer step: the host must know before it. It reads the
    # forward's verdict once the backward is queued (on a GPU: the backward runs meanwhile).
    train_twenty_steps(twenty_steps, tmp_path, "on_nonfinite=skip")
    assert len(reads.reads) == STEPS + 1
    per_step = "".join(
        "b" if e == "backward" else "r" if e in READS else "s"
        for e in reads.events
        if e in ("backward", "step", *READS)
    )
    assert per_step == "brs" * STEPS + "r"


def test_a_checkpoint_due_after_an_unread_nonfinite_loss_is_not_written(twenty_steps, tmp_path, monkeypatch):
    # The losses are read at the log_every steps (50: none in this epoch), at the epoch's end and
    # before every checkpoint. The 5th loss (step 5, batch 5, counted from 1) is NaN; the checkpoint due after 6
    # batches reads it and stops the run: last.pt is the one written after 4 batches, steps 0-3.
    nan_at(monkeypatch, 5)
    with pytest.raises(NonFiniteLoss, match=r"non-finite loss \(nan\) at step 5 \(epoch 1, batch 5\)"):
        train_twenty_steps(twenty_steps, tmp_path, "log_every=50", "checkpoint_every=2")
    checkpoint = load_checkpoint(tmp_path / "last.pt")
    assert checkpoint["step"] == 4 and checkpoint["epoch_partial"]["batches"] == 4
    assert all(torch.isfinite(t).all() for t in checkpoint["model"].values() if t.is_floating_point())


# --- two processes (gloo, forked): the collectives, and a non-finite loss on one of them ----------


def _rank_main(rank: int, store: str, out: Path, nan_step: int | None, on_nonfinite: str) -> None:
    """One of two processes: 8 steps of 4 images, DDP, log_every=4; the loss of ``nan_step`` is NaN
    on rank 1. Writes what it counted and how its epoch ended to ``out``/<rank>.json."""
    try:
        torch.set_num_threads(1)  # two processes on the suite's cores: one thread each, as torchrun gives
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
        counter = Reads()
        for name in READS:
            setattr(torch.Tensor, name, counter.wrap(name, getattr(torch.Tensor, name)))
        dist.all_reduce = counter.wrap("all_reduce", dist.all_reduce, caller=True)
        env = DistEnv(rank=rank, world_size=2, local_rank=0, device=torch.device("cpu"))
        torch.manual_seed(0)
        model = resnet.build_model("resnet_tiny", num_classes=3)
        ddp = nn.parallel.DistributedDataParallel(model)
        generator = torch.Generator().manual_seed(rank)
        batches = [
            (
                torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8, generator=generator),
                torch.randint(0, 3, (4,), generator=generator),
            )
            for _ in range(8)
        ]
        calls = [0]

        def loss_fn(logits, labels):
            calls[0] += 1
            nan = rank == 1 and calls[0] - 1 == nan_step
            return nn.functional.cross_entropy(logits, labels) * (float("nan") if nan else 1.0)

        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        ctx = StepContext(
            runtime=Runtime(env),
            normalize=Normalize("torch"),
            loss_fn=loss_fn,
            log_every=4,
            progress=False,
            on_nonfinite=on_nonfinite,
        )
        result: dict = {}
        try:
            with counter.inside():
                stats = loop.train_one_epoch(ddp, batches, optimizer, scheduler, ctx, epoch=0, global_step=0)
            result.update(steps=stats.steps, skipped=stats.skipped_steps)
        except NonFiniteLoss as err:
            result["error"] = str(err)
        result.update(
            reads=len(counter.reads),
            collectives=dict(counter.collectives()),
            weights=float(sum(p.double().sum() for p in model.parameters())),
        )
        (out / f"{rank}.json").write_text(json.dumps(result))
        dist.destroy_process_group()
    except BaseException:
        (out / f"{rank}.json").write_text(json.dumps({"crashed": traceback.format_exc()}))
        raise


def two_processes(tmp_path: Path, nan_step: int | None, on_nonfinite: str = "stop") -> list[dict]:
    # Not fork: a parent whose autograd has run (an earlier test on this worker) cannot fork safely.
    # A forkserver is a new interpreter, as spawn's children are, that imports torch and this module
    # once per pytest worker; each process is then a fork of it (4 s of CPU less than a spawn).
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    out = tmp_path / f"{on_nonfinite}_{nan_step}"
    out.mkdir()
    procs = [
        context.Process(target=_rank_main, args=(rank, str(out / "store"), out, nan_step, on_nonfinite))
        for rank in range(2)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
    alive = [(rank, proc) for rank, proc in enumerate(procs) if proc.is_alive()]
    for _, proc in alive:
        os.kill(proc.pid, 9)
    # a process that wrote its result finished its epoch and hung, if at all, tearing gloo down
    # afterwards (seen once under load): only one that never wrote took another branch
    hung = [proc for rank, proc in alive if not (out / f"{rank}.json").exists()]
    assert not hung, "a process hung: the two took different branches"
    results = [json.loads((out / f"{rank}.json").read_text()) for rank in range(2)]
    assert not any("crashed" in r for r in results), [r.get("crashed") for r in results]
    return results


@pytest.mark.slow  # two processes each
@pytest.mark.xdist_group("forkserver")  # one worker, one forkserver (an interpreter importing torch)
def test_two_processes_agree_on_the_host_every_step_and_read_losses_every_log_every(tmp_path):
    # 8 steps, log_every=4: the host all-reduce (empty batch or stop, all_reduce_host) every step;
    # the losses' verdicts summed on the device at the 2 reads (_queue_check's all_reduce_sum), and
    # the epoch's totals once (train_one_epoch's). The reads: 2 + 1, as on one process.
    for result in two_processes(tmp_path, nan_step=None):
        assert result["steps"] == 8 and "error" not in result
        assert result["collectives"] == {"all_reduce_host": 8, "all_reduce_sum": 3}
        assert result["reads"] == 3


@pytest.mark.slow  # two processes each
@pytest.mark.xdist_group("forkserver")  # one worker, one forkserver (an interpreter importing torch)
def test_a_nonfinite_loss_on_one_process_stops_both_naming_the_same_step(tmp_path):
    # Rank 1's loss after 5 steps (the 6th step) is NaN; DDP averages its gradients into rank 0's weights,
    # so neither may go on. Both read the verdicts at step 8 (log_every=4) and stop there, naming step 6.
    first, second = two_processes(tmp_path, nan_step=5)
    assert "non-finite loss (on another process) at step 6 (epoch 1, batch 6)" in first["error"]
    assert "non-finite loss (nan) at step 6 (epoch 1, batch 6)" in second["error"]


@pytest.mark.slow  # two processes each
@pytest.mark.xdist_group("forkserver")  # one worker, one forkserver (an interpreter importing torch)
def test_a_nonfinite_loss_on_one_process_is_skipped_by_both(tmp_path):
    first, second = two_processes(tmp_path, nan_step=5, on_nonfinite="skip")
    for result in (first, second):
        assert result["steps"] == 7 and result["skipped"] == 1
        assert result["collectives"] == {"all_reduce_host": 8, "all_reduce_sum": 9}  # + the epoch's totals
    assert math.isfinite(first["weights"]) and first["weights"] == second["weights"]  # DDP kept them in step
