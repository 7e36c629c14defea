"""git over this working tree, in a checkout or in the Docker image (which has no .git/)."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def git_over_the_tree(tmp_path: Path) -> list[str]:
    """git, reading the working tree through a new, empty repository: the same answers in a
    checkout and in the Docker image, which holds the files but not .git/."""
    subprocess.run(["git", "init", "-q", "--bare", tmp_path / "git"], check=True)
    return ["git", f"--git-dir={tmp_path / 'git'}", f"--work-tree={REPO}"]
