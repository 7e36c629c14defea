#!/usr/bin/env bash
# Prepare everything once: a virtual environment in .venv with the project and its
# test extras, and the built-in Fashion-MNIST data. Re-running on a prepared machine
# takes seconds: the install is skipped while pyproject.toml is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PY=${PYTHON:-$(command -v python3.11 || command -v python3)}
SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"

apt_install() {  # apt_install PKG...: only where apt and root (or sudo) are available
    command -v apt-get >/dev/null || return 1
    [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ] || return 1
    $SUDO apt-get install -y -q "$@" >/dev/null 2>&1 || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q "$@" >/dev/null; }
}

if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup] creating $VENV with $PY"
    "$PY" -m venv "$VENV" 2>/dev/null || { apt_install python3-venv && "$PY" -m venv "$VENV"; }
fi

stamp="$VENV/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ]; then
    echo "[setup] installing the project and its test extras into $VENV (first time: minutes)"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e ".[test]"
    rm -f "$VENV"/.installed-* && touch "$stamp"
fi

# Built-in data: Debian's dataset-fashion-mnist, else torchvision's download.
FMNIST_APT=/usr/share/datasets/fashion-mnist
if [ ! -f "$FMNIST_APT/t10k-labels-idx1-ubyte.gz" ] && [ -z "${FASHION_MNIST_ROOT:-}" ]; then
    if apt_install dataset-fashion-mnist; then
        echo "[setup] installed Fashion-MNIST into $FMNIST_APT (apt)"
    else
        "$VENV/bin/python" -m data.fashion_mnist --download
    fi
fi
