#!/usr/bin/env bash
# Set everything up (fast when already prepared), then run the main job, the built-in
# demo: train the default model on Fashion-MNIST under `symmetric` and `asymmetric`
# padding, evaluate each under both, print the 2x2 table of top-1 / top-5 errors and
# write it (Markdown, CSV, PNG) to results/demo/. Extra arguments go to train.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m resnet.demo "$@"
