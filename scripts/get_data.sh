#!/usr/bin/env bash
# The built-in data: Debian's dataset-fashion-mnist where apt and root (or sudo) are
# available, torchvision's download into ~/.cache/resnet-padding otherwise.
# Usage: bash scripts/get_data.sh [PYTHON]   (PYTHON: the interpreter with the project)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
FMNIST_APT=/usr/share/datasets/fashion-mnist
[ -f "$FMNIST_APT/t10k-labels-idx1-ubyte.gz" ] && exit 0
[ -n "${FASHION_MNIST_ROOT:-}" ] && [ -f "$FASHION_MNIST_ROOT/t10k-labels-idx1-ubyte.gz" ] && exit 0
SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo -n true 2>/dev/null && SUDO="sudo -n"
if command -v apt-get >/dev/null && { [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; }; then
    echo "[data] installing Fashion-MNIST with apt (dataset-fashion-mnist)"
    if $SUDO apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 \
        || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q dataset-fashion-mnist >/dev/null; }; then
        exit 0
    fi
    echo "[data] apt has no dataset-fashion-mnist here; downloading with torchvision instead"
fi
"$PY" -m data.fashion_mnist --download
