#!/usr/bin/env bash
# The GPU check, one command: the GPU benchmark, a short tv_v1 training on generated
# ImageNet-sized JPEGs (bf16, channels_last, compile, data.decode=gpu) and an eval.py of its
# checkpoint, nvJPEG crops against the CPU path, the decode under a concurrent backward
# (docs/gpu.md); one report.json and a summary.md in one folder. The steps are
# benchmarks/gpu_check/, one module a step (its --help says what each measures); this script finds
# a Python for it.
# Usage: bash scripts/gpu_check.sh [--device cuda|cpu] [--quick] [--out DIR] [--only STEPS] ...
#   bash scripts/gpu_check.sh                         # one CUDA device
#   bash scripts/gpu_check.sh --device cpu --quick    # smoke run of every step (the tests run it)
# Python: $GPU_CHECK_PYTHON if set; else .venv/bin/python; else a python3 that has torch and torchvision (a
# GPU machine's own PyTorch, as the device tool's machines have); else scripts/setup.sh makes .venv
# (from the package index). Packages that Python lacks are installed from the wheels in
# $WHEELS (default: .whl/, else wheels/) with no index, into a folder put on PYTHONPATH: a machine
# without internet reaches no index.
# Exits 1 when a step is not ok, 3 when no Python with the project's packages can be had.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "[gpu-check] $*"; }

# Whether interpreter $1 has torch and torchvision (found, not imported: seconds saved).
has_torch() { "$1" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("torch") and u.find_spec("torchvision")))' >/dev/null 2>&1; }

WHEELS=${WHEELS:-$( [ -d .whl ] && echo .whl || echo wheels )}
PY=${GPU_CHECK_PYTHON:-}
if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ] && has_torch .venv/bin/python; then
        PY=.venv/bin/python
    elif command -v python3 >/dev/null && has_torch python3; then
        PY=python3
        say "using $(command -v python3), this machine's PyTorch"
    else
        say "no Python with torch here: bash scripts/setup.sh (makes .venv from the package index)"
        [ -d "$WHEELS" ] && export PIP_FIND_LINKS=${PIP_FIND_LINKS:-$(realpath "$WHEELS")}
        if ! bash scripts/setup.sh; then
            say "error: no Python with torch and torchvision, and scripts/setup.sh failed (no package index?):" \
                "bring the CUDA wheels torch==2.14.1 and torchvision==0.29.1 with their nvidia-* dependencies" \
                "in $WHEELS/, or run where python3 has PyTorch (docs/benchmarks.md, GPU section)" >&2
            exit 3
        fi
        PY=.venv/bin/python
    fi
fi

# The modules train.py, eval.py and the check import, each with the distribution that has it.
missing() {
    "$PY" - <<'EOF'
import importlib.util
need = {"torch": "torch", "torchvision": "torchvision", "numpy": "numpy", "PIL": "pillow", "yaml": "pyyaml",
        "hydra": "hydra-core", "omegaconf": "omegaconf", "antlr4": "antlr4-python3-runtime", "tqdm": "tqdm",
        "h5py": "h5py"}
print(" ".join(dist for module, dist in need.items() if importlib.util.find_spec(module) is None))
EOF
}
lacking=$(missing)
if [ -n "$lacking" ] && compgen -G "$WHEELS/*.whl" >/dev/null; then
    SITE=${TMPDIR:-/tmp}/gpu_check_site
    say "$PY lacks: $lacking; installing the wheels in $WHEELS/ into $SITE (no index)"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check --upgrade --target "$SITE" \
        "$WHEELS"/*.whl
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    lacking=$(missing)
fi
if [ -n "$lacking" ]; then
    say "error: $PY lacks $lacking: bring their wheels in $WHEELS/ (where pip reaches an index:" \
        "pip wheel --no-deps -w $WHEELS $lacking, with the versions .venv has; docs/benchmarks.md, GPU section)" >&2
    exit 3
fi
exec "$PY" -m benchmarks.gpu_check "$@"
