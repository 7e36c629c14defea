#!/usr/bin/env bash
# Stop the cluster tests/cluster/slurm_up.sh started: its jobs, daemons, namespaces and state.
# munged is left running (other programs may use it). Safe to run when nothing is up.
set -uo pipefail

DIR=${SLURM_TEST_DIR:-/tmp/resnet-slurm}
CONF=$DIR/slurm.conf
[ -f "$CONF" ] && SLURM_CONF=$CONF timeout 10 scancel --full --user="$(id -un)" 2>/dev/null
pkill -f "^slurmctld -f $CONF" 2>/dev/null
pkill -f "^slurmd -f $CONF" 2>/dev/null
pkill -f "slurmstepd" 2>/dev/null
for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^rsl-/ {print $1}'); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9
    ip netns del "$ns"
    rm -rf "/etc/netns/$ns"
done
ip link del rsl-br 2>/dev/null
rm -rf "$DIR"
echo "[slurm_down] stopped" >&2
