#!/usr/bin/env bash
# Set everything up (fast when already prepared), lint, then run the whole test suite.
# `bash scripts/test.sh --min-deps`: the same, in .venv-min, where every dependency is at the lowest
# version pyproject.toml allows (scripts/setup.sh min-deps), which is how those bounds are held.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --min-deps ]; then
    shift
    bash scripts/setup.sh min-deps
    bash scripts/get_slurm.sh
    PY=.venv-min/bin/python
    export RESNET_PADDING_MIN_DEPS=1  # tests/report/test_dashboard.py: its extra needs a newer wandb
elif [ "${RESNET_PADDING_ENV:-}" = installed ]; then
    # The Docker image (its Dockerfile sets this): the project and its test extras are installed
    # on its Python already, and there is no network to make a .venv with.
    PY=python
else
    bash scripts/setup.sh test
    bash scripts/get_slurm.sh  # a real SLURM for tests/cluster/test_slurm.py, where apt can install it
    PY=.venv/bin/python
fi
"$PY" -m ruff check .
"$PY" -m ruff format --check .  # one formatting: `ruff format .` gives it
# Bytecode caches, even where PYTHONDONTWRITEBYTECODE is set: the suite starts about 200 Python
# commands, each of which would compile the project again (0.25 s of CPU), and every pytest worker
# would rewrite every test module (6 s). __pycache__/ is gitignored.
unset PYTHONDONTWRITEBYTECODE
# One pytest worker per core plus one (at most 4): while a worker waits on a process, a SLURM job
# or a timer, the others keep every core busy. Tests that share a costly module fixture carry
# @pytest.mark.xdist_group and run on one worker.
workers=$(( $(nproc) + 1 < 4 ? $(nproc) + 1 : 4 ))
"$PY" -m pytest -n "$workers" --dist loadgroup "$@"
