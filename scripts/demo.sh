#!/usr/bin/env bash
# Set everything up (fast when already prepared), then run the main job: train the
# small default model on the built-in Fashion-MNIST and print its summary table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python train.py "$@"
