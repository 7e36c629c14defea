"""docker run --rm without a volume: the run folder goes with the container, and the start and
"to go on" lines say so, naming the -v that keeps it (resnet/runtime/container.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from resnet.job.ending import resume_command
from resnet.runtime import container
from resnet.runtime.distributed import DistEnv

ONE = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


@pytest.fixture
def inside(tmp_path, monkeypatch):
    """A container whose root is the overlay and whose /data is a volume, by the files that tell."""
    marker = tmp_path / ".dockerenv"
    marker.write_text("")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "1064 979 0:51 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n"
        "1065 1064 0:53 / /proc rw,nosuid - proc proc rw\n"
        f"1090 1064 8:1 /var/lib/docker/volumes/v/_data {tmp_path / 'volume'} rw,relatime - ext4 /dev/sda1 rw\n"
    )
    monkeypatch.setattr(container, "MARKERS", (marker,))
    monkeypatch.setattr(container, "MOUNTINFO", mountinfo)
    monkeypatch.setenv(container.IMAGE_ENV, "installed")  # the image's Dockerfile sets it
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_run_folder_in_the_containers_own_layer_gets_the_volume_to_mount(inside):
    advice = container.volume_advice(Path("outputs/2026-11-28/10-00-00"))
    assert advice is not None and f"docker run -v resnet-outputs:{inside / 'outputs'} " in advice
    line = resume_command(Path("outputs/2026-11-28/10-00-00"), ONE)
    assert line.startswith("python train.py resume=true hydra.run.dir=outputs/2026-11-28/10-00-00 (but ")
    assert "not on a volume" in line


def test_a_run_folder_that_is_the_working_directory_gets_the_same_advice(inside):
    # hydra.run.dir=. in the image: the -v names the folder itself
    assert f"docker run -v resnet-outputs:{inside} " in container.volume_advice(Path("."))


def test_a_run_folder_on_a_volume_or_outside_a_container_needs_no_advice(inside, monkeypatch):
    assert container.volume_advice(inside / "volume" / "runs" / "a") is None  # under the mount point
    assert container.mount_point(inside / "volume" / "x") == inside / "volume"
    monkeypatch.delenv(container.IMAGE_ENV)  # a checkout in some other container: its layout is its own
    assert container.volume_advice(Path("outputs/x")) is None
    monkeypatch.setenv(container.IMAGE_ENV, "installed")
    monkeypatch.setattr(container, "MARKERS", (inside / "no-such-marker",))  # the image's Python, outside Docker
    assert container.volume_advice(Path("outputs/x")) is None
    assert resume_command(Path("outputs/x"), ONE) == "python train.py resume=true hydra.run.dir=outputs/x"
