#!/usr/bin/env bash
# Prepare everything once: a virtual environment in .venv with the project, and the built-in
# Fashion-MNIST data. `bash scripts/setup.sh test` adds the test extras (pytest, ruff, keras,
# onnxruntime, ...: 16 s more on a fresh machine, which the demo does without). `bash scripts/setup.sh
# min-deps` makes .venv-min instead: the test extras with every dependency at the lowest version
# pyproject.toml allows (scripts/min_deps.py), for `bash scripts/test.sh --min-deps`. Re-running on a
# prepared machine takes seconds: the install is skipped while pyproject.toml is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
MIN_DEPS=0
case "${1:-}" in
    "" | test) EXTRAS=${1:-} ;;
    min-deps) EXTRAS=test; MIN_DEPS=1 ;;
    *) echo "error: unknown extras '$1'; run bash scripts/setup.sh (the project), bash scripts/setup.sh test (and its tests) or bash scripts/setup.sh min-deps (the tests at the lowest versions)" >&2
       exit 2 ;;
esac

if [ "$MIN_DEPS" -eq 1 ]; then VENV=${VENV:-.venv-min}; else VENV=${VENV:-.venv}; fi
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
# pip install, its progress shown as one line per package it collects and downloads (pip -q shows
# nothing for minutes; pip's full output is hundreds of lines); its errors still reach stderr.
pip_install() {
    local t0=$SECONDS
    "$VENV/bin/python" -m pip install --progress-bar off "$@" \
        | awk '/^ *(Collecting|Downloading|Installing collected)/ { sub(/^ +/, ""); print "[setup]   " $0; fflush() }'
    echo "[setup] installed in $(( SECONDS - t0 )) s"
}

stamp="$VENV/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp-test" ] && { [ -n "$EXTRAS" ] || [ ! -f "$stamp" ]; }; then
    "$VENV/bin/python" -m pip install -q --upgrade pip
    if [ "$MIN_DEPS" -eq 1 ]; then
        # the dashboard extra is left out: wandb-workspaces needs wandb>=0.28.2, above the minimum
        echo "[setup] installing the project and its test extras into $VENV, each dependency at its lowest allowed version"
        "$VENV/bin/python" scripts/min_deps.py > "$VENV/constraints.txt"
        cat "$VENV/constraints.txt" | sed 's/^/[setup]   /'
        # and the build backend pyproject names: tests/project/test_wheel.py builds the wheel with it
        PIP_CONSTRAINT="$VENV/constraints.txt" pip_install -e ".[test]" "setuptools>=77"
        rm -f "$VENV"/.installed-* && touch "$stamp-test"
    elif [ -n "$EXTRAS" ]; then
        echo "[setup] installing the project and its test extras into $VENV (first time: 1.5-4 min, most of it fetching torch)"
        pip_install -e ".[test,dashboard]"
        rm -f "$VENV"/.installed-* && touch "$stamp-test"
    else
        echo "[setup] installing the project into $VENV (first time: 1-4 min, most of it fetching torch)"
        pip_install -e .
        rm -f "$VENV"/.installed-* && touch "$stamp"
    fi
fi

bash scripts/get_data.sh "$VENV/bin/python"
