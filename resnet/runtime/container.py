"""Whether this process runs in a container, and whether a folder of it outlives the container.

``docker run --rm resnet-padding`` trains into the image's own ``outputs/``: the container's
writable layer, which ``--rm`` deletes with it. A run there cannot be resumed, so the start line and
every "to go on" line say so and name the ``-v`` that keeps it (:func:`volume_advice`).
"""

from __future__ import annotations

import os
from pathlib import Path

MARKERS = (Path("/.dockerenv"), Path("/run/.containerenv"))  # Docker's, Podman's
MOUNTINFO = Path("/proc/self/mountinfo")
IMAGE_ENV = "RESNET_PADDING_ENV"  # "installed": set by this project's Dockerfile


def mount_point(path: Path) -> Path:
    """The mount point ``path`` lies under: the longest of /proc/self/mountinfo's that holds it."""
    path = path.resolve()
    try:
        lines = MOUNTINFO.read_text().splitlines()
    except OSError:
        return Path("/")
    points = [Path(line.split()[4].replace("\\040", " ")) for line in lines if len(line.split()) > 4]
    held = [point for point in points if point == path or point in path.parents]
    return max(held, key=lambda point: len(point.parts), default=Path("/"))


def volume_advice(run_dir: Path) -> str | None:
    """In a container of this image, where ``run_dir`` is not on a volume or bind mount: one sentence naming the
    ``-v`` that keeps it; else None."""
    # a container of this project's image, not a checkout in another container (a dev container, a CI runner)
    ours = os.environ.get(IMAGE_ENV) == "installed" and any(marker.exists() for marker in MARKERS)
    if not ours or mount_point(run_dir) != Path("/"):
        return None
    absolute = run_dir.resolve()
    inside = absolute.relative_to(Path.cwd()).parts if absolute.is_relative_to(Path.cwd()) else ()
    top = Path.cwd() / inside[0] if inside else absolute  # outputs/ for outputs/<date>/<time>; the folder itself
    return (
        f"{absolute} is in this container's own layer, not on a volume: it goes with the container "
        f"(docker run --rm), and no resume can find it; keep runs with docker run -v resnet-outputs:{top} ..."
    )
