#!/usr/bin/env bash
# The packages of the real-SLURM tests (tests/cluster/test_slurm.py): Debian's slurm-wlm, munge and
# iproute2, installed where apt and root (or sudo) are available; elsewhere those tests are
# skipped with a line saying how to enable them. Nothing is started here: the tests bring the
# cluster up themselves (tests/cluster/slurm_up.sh).
set -euo pipefail
command -v slurmctld >/dev/null && command -v munged >/dev/null && command -v ip >/dev/null && exit 0
SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo -n true 2>/dev/null && SUDO="sudo -n"
command -v apt-get >/dev/null && { [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; } || exit 0
echo "[slurm] installing slurm-wlm and munge with apt (for tests/cluster/test_slurm.py)"
export DEBIAN_FRONTEND=noninteractive
packages=(slurm-wlm munge iproute2)
$SUDO apt-get install -y -q "${packages[@]}" >/dev/null 2>&1 \
    || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q "${packages[@]}" >/dev/null; } \
    || echo "[slurm] apt could not install ${packages[*]}: the real-SLURM tests will be skipped"
