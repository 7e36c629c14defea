#!/usr/bin/env bash
# Prepare everything once: a virtual environment in .venv with the project, and the built-in
# Fashion-MNIST data. `bash scripts/setup.sh test` adds the test extras (pytest, ruff, keras,
# onnxruntime, ...: 16 s more on a fresh machine, which the demo does without). Re-running on a
# prepared machine takes seconds: the install is skipped while pyproject.toml is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
    "" | test) EXTRAS=${1:-} ;;
    *) echo "error: unknown extras '$1'; run bash scripts/setup.sh (the project) or bash scripts/setup.sh test (and its tests)" >&2
       exit 2 ;;
esac

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

# One stamp per pyproject.toml: .installed-<hash> (the project), .installed-<hash>-test (and its
# test extras, which covers the project too).
stamp="$VENV/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp-test" ] && { [ -n "$EXTRAS" ] || [ ! -f "$stamp" ]; }; then
    "$VENV/bin/python" -m pip install -q --upgrade pip
    if [ -n "$EXTRAS" ]; then
        echo "[setup] installing the project and its test extras into $VENV (first time: minutes)"
        "$VENV/bin/python" -m pip install -q -e ".[test]"
        rm -f "$VENV"/.installed-* && touch "$stamp-test"
    else
        echo "[setup] installing the project into $VENV (first time: about a minute)"
        "$VENV/bin/python" -m pip install -q -e .
        rm -f "$VENV"/.installed-* && touch "$stamp"
    fi
fi

bash scripts/get_data.sh "$VENV/bin/python"
