#!/usr/bin/env bash
# Set everything up (fast when already prepared), then run the main job, the built-in
# demo: train the default model on Fashion-MNIST under `symmetric`, under `asymmetric`
# and on both (grid-robust), evaluate each under both schemes, re-grid the asymmetric
# model to symmetric by each method, print the 3x2 table of top-1 / top-5 errors and the
# re-gridding table, and write them (Markdown, CSV, PNG) to results/demo/. Extra
# arguments go to resnet-demo (train.py overrides, --no-grid, --no-regrid), run as its module.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m resnet.cli.demo "$@"
