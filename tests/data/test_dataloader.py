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


def test_too_little_shared_memory_for_the_workers_batches_is_one_line_before_any_worker_starts(tmp_path):
    # Docker's default: 64 MB of /dev/shm. A real tmpfs that small stands for it (root mounts it).
    import os
    import subprocess

    from data import shm

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    small = tmp_path / "shm"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(small)], check=True)
    try:
        batch = shm.batch_bytes(128, 224)  # 18.4 MiB
        with pytest.raises(
            ValueError,
            match=r"has 64 MiB free, but 2 loader worker\(s\) need about 92 MiB for the "
            r"batches in flight \(18.4 MiB each\): in Docker run with --shm-size=2g "
            r"\(or --ipc=host\); elsewhere lower data.workers or batch_size",
        ):
            shm.check_room(2, batch, where=str(small))
        shm.check_room(1, shm.batch_bytes(64, 224), where=str(small))  # 3 x 9.2 MiB fit
        shm.check_room(0, batch, where=str(small))  # no workers: the batches never leave the process
    finally:
        subprocess.run(["umount", str(small)], check=True)


@pytest.mark.slow
def test_train_py_under_dockers_default_64_mb_of_dev_shm_refuses_in_one_line(tiny_folder, tmp_path):
    # /dev/shm as `docker run` without --shm-size gives it: a 64 MB tmpfs, in a mount namespace of the command's own.
    import os
    import shutil
    import subprocess

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a private /dev/shm needs root and unshare (util-linux)")
    from tests.helpers.training import PY, REPO, tiny_overrides

    args = [a for a in tiny_overrides(tiny_folder, tmp_path / "run", "data.image_size=224", "batch_size=128",
                                      "data.workers=2") if not a.startswith("run_dir")]  # fmt: skip
    script = 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"'
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", PY, "train.py", *args,
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=REPO, capture_output=True, text=True,
                          timeout=180, env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: /dev/shm has 64 MiB free, but 2 loader worker(s) need about ")
    assert "--shm-size=2g (or --ipc=host)" in line


def test_the_shared_memory_estimate_counts_every_process_of_the_node(monkeypatch):
    # The arithmetic alone, anywhere: the node's processes share /dev/shm. 512 MiB holds one process's
    # 2 workers x 2 batches + 1 of 18.4 MiB (92 MiB), not eight processes' (735 MiB).
    import os
    from types import SimpleNamespace

    from data import shm

    monkeypatch.setattr(os, "statvfs", lambda where: SimpleNamespace(f_bavail=1 << 17, f_frsize=4096))  # 512 MiB
    batch = shm.batch_bytes(128, 224)
    shm.check_room(2, batch, processes=1)
    with pytest.raises(
        ValueError,
        match=r"has 512 MiB free, but 2 loader worker\(s\) of each of this node's 8 "
        r"processes need about 735 MiB",
    ):
        shm.check_room(2, batch, processes=8)
