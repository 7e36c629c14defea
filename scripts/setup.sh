#!/usr/bin/env bash
# Prepare everything once: a virtual environment in .venv with the project and its
# test extras, and the built-in Fashion-MNIST data. Re-running on a prepared machine
# takes seconds: the install is skipped while pyproject.toml is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PY=${PYTHON:-$(command -v python3.11 || command -v python3)}
SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo -n true 2>/dev/null && SUDO="sudo -n"

if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup] creating $VENV with $PY"
    if ! "$PY" -m venv "$VENV" 2>/dev/null; then  # Debian/Ubuntu ship venv separately
        rm -rf "$VENV"
        $SUDO apt-get install -y -q python3-venv "python$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv" >/dev/null \
            || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q python3-venv >/dev/null; }
        "$PY" -m venv "$VENV"
    fi
fi

stamp="$VENV/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ]; then
    echo "[setup] installing the project and its test extras into $VENV (first time: minutes)"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e ".[test]"
    rm -f "$VENV"/.installed-* && touch "$stamp"
fi

bash scripts/get_data.sh "$VENV/bin/python"
