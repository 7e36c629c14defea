#!/usr/bin/env bash
# Set everything up (fast when already prepared), lint, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
bash scripts/get_slurm.sh  # a real SLURM for tests/test_slurm.py, where apt can install it
.venv/bin/ruff check .
# One pytest worker per core (at most 4): most tests start processes and wait on them. Tests that
# share a costly module fixture carry @pytest.mark.xdist_group and run on one worker.
.venv/bin/python -m pytest -n auto --maxprocesses=4 --dist loadgroup "$@"
