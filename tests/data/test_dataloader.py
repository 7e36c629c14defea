"""data.dataloader: a dead worker is one RuntimeError from next(), never a signal-time raise."""

import os
import signal

import pytest
import torch

from data.dataloader import DataLoader


class Items(torch.utils.data.Dataset):
    """Item i is i; item ``die_at`` SIGKILLs the worker reading it, item ``fail_at`` raises."""

    def __init__(self, n: int, die_at: int = -1, fail_at: int = -1):
        self.n, self.die_at, self.fail_at = n, die_at, fail_at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if i == self.fail_at:
            raise ValueError(f"item {i} is bad")
        return i


def test_a_killed_worker_is_one_runtime_error_from_next_naming_pid_and_signal():
    loader = DataLoader(Items(8, die_at=5), batch_size=2, num_workers=1)
    seen = []
    with pytest.raises(RuntimeError, match=r"^DataLoader worker \(pid \d+\) was killed by signal 9 \(SIGKILL\)$"):
        for batch in loader:
            seen += batch.tolist()
    # batches before the dead one, in order; one the dead worker was still handing over is lost with it
    assert seen in ([0, 1], [0, 1, 2, 3])
    # torch's SIGCHLD handler, which raises at any line of the main thread, is gone
    assert signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL


def test_a_dataset_error_in_a_worker_is_raised_as_itself():
    loader = DataLoader(Items(8, fail_at=3), batch_size=2, num_workers=1)
    with pytest.raises(ValueError, match="item 3 is bad"):
        list(loader)


def test_without_workers_it_is_torchs_loader_and_iterator():
    loader = DataLoader(Items(5), batch_size=2, num_workers=0)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4]]
    assert type(iter(loader)) is type(iter(torch.utils.data.DataLoader(Items(5), batch_size=2)))
