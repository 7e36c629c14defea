#!/usr/bin/env bash
# A real two-node SLURM on one machine, for the tests marked `slurm`: munged and slurmctld on
# the host, and one slurmd per node, each in its own network namespace with its own address on
# a bridge (10.231.0.1 and .2; the controller is .254), so a 2-node job's processes talk over a
# real interface, not loopback. State, logs and spool live under $SLURM_TEST_DIR. Idempotent: a
# second call finds the cluster up and only prints where it is. Stop it with slurm_down.sh.
#
#   eval "$(bash tests/cluster/slurm_up.sh)"   # exports SLURM_CONF; then sbatch, squeue, scontrol
#
# Needs root and Debian's `slurm-wlm munge iproute2`. Prints the exports on stdout, the rest on
# stderr. Inside a namespace the host's name resolves to that node's own address
# (/etc/netns/<ns>/hosts), as it would on a real node; the host's /etc/hosts is not touched.
set -euo pipefail

DIR=${SLURM_TEST_DIR:-/tmp/resnet-slurm}
CONF=$DIR/slurm.conf
NET=10.231.0
BRIDGE=rsl-br
NODES=(node1 node2)
say() { echo "[slurm_up] $*" >&2; }
trap 'say "failed at line $LINENO: $BASH_COMMAND (logs in $DIR/log/)"' ERR

for tool in munged slurmctld slurmd sinfo ip; do
    command -v "$tool" >/dev/null || { say "$tool not found: apt-get install slurm-wlm munge iproute2"; exit 2; }
done
[ "$(id -u)" -eq 0 ] || { say "needs root (network namespaces, munged, slurmd); run it with sudo"; exit 2; }

mkdir -p "$DIR"
exec 9>"$DIR.lock"  # one start at a time (test workers may call this together); the daemons
flock 9             # are started with 9>&- so that none of them holds the lock after this script

idle_nodes() { SLURM_CONF=$CONF timeout 5 sinfo -h -N -p test -o '%N %t' 2>/dev/null | grep -cE ' (idle|mix|alloc)' || true; }


# munge: the daemons and every command authenticate through its socket (shared by the namespaces).
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
if ! munge -n </dev/null >/dev/null 2>&1; then
    [ -f /etc/munge/munge.key ] || mungekey --create 2>/dev/null || create-munge-key -f
    munged --force 2>/dev/null 9>&-
fi

# The network: a bridge on the host, a veth from it into each node's namespace.
HOST=$(hostname)
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
    ip addr add "$NET.254/24" dev "$BRIDGE"
fi
ip link set "$BRIDGE" up
for i in "${!NODES[@]}"; do
    n=$((i + 1)) ns=rsl-${NODES[$i]}
    if ! ip netns list | grep -qw "$ns"; then
        ip netns add "$ns"
        ip link add "rsl-h$n" type veth peer name "rsl-n$n"
        ip link set "rsl-n$n" netns "$ns"
        ip link set "rsl-h$n" master "$BRIDGE" up
        ip netns exec "$ns" ip addr add "$NET.$n/24" dev "rsl-n$n"
        ip netns exec "$ns" ip link set "rsl-n$n" up
        ip netns exec "$ns" ip link set lo up
    fi
    mkdir -p "/etc/netns/$ns"
    {
        echo "127.0.0.1 localhost"
        echo "$NET.$n $HOST"
        for j in "${!NODES[@]}"; do echo "$NET.$((j + 1)) ${NODES[$j]}"; done
        echo "$NET.254 slurm-controller"
    } > "/etc/netns/$ns/hosts"
done

mkdir -p "$DIR"/{state,log} "${NODES[@]/#/$DIR/spool/}"
CPUS=$(getconf _NPROCESSORS_ONLN)  # not nproc: it reports OMP_NUM_THREADS where that is set
MEM=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))  # MB: half, the rest for the host
{
    cat <<CONF
ClusterName=resnet-test
SlurmctldHost=$HOST($NET.254)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# A requeued job waits out the job credentials' lifetime before it runs again (default 120 s).
AuthInfo=cred_expire=5
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# Look for runnable jobs every second or two (defaults: 30 and 60 s): a requeued job starts at once.
SchedulerParameters=bf_interval=1,sched_interval=2
ReturnToService=2
JobRequeue=1
KillWait=5
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=30
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
CONF
    for i in "${!NODES[@]}"; do
        echo "NodeName=${NODES[$i]} NodeHostname=$HOST NodeAddr=$NET.$((i + 1)) CPUs=$CPUS RealMemory=$MEM State=UNKNOWN"
    done
    nodes=$(IFS=,; echo "${NODES[*]}")
    echo "PartitionName=test Nodes=$nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
    # Stock preemption: a job in "high" that needs a "low" job's CPUs gets them; the low job is sent
    # SIGTERM, has GraceTime seconds, then is killed and requeued (no preempt_send_user_signal: no USR1).
    echo "PartitionName=low Nodes=$nodes MaxTime=INFINITE State=UP PriorityTier=1 OverSubscribe=NO GraceTime=20"
    echo "PartitionName=high Nodes=$nodes MaxTime=INFINITE State=UP PriorityTier=2 OverSubscribe=NO PreemptMode=OFF"
} > "$CONF.new"

if [ -f "$CONF" ] && cmp -s "$CONF" "$CONF.new" && [ "$(idle_nodes)" -ge ${#NODES[@]} ]; then
    rm -f "$CONF.new"
    say "already up ($CONF)"
    echo "export SLURM_CONF=$CONF"
    exit 0
fi
mv "$CONF.new" "$CONF"

# Daemons of an earlier start that is no longer whole: stopped before the new ones bind their ports.
for _ in $(seq 50); do
    pkill -f "^slurm(ctl)?d -f $CONF" 2>/dev/null || break
    sleep 0.2
done
slurmctld -f "$CONF" -i 9>&-
# Each slurmd enters its node's network namespace and sees the node's own hosts file. Not
# `ip netns exec`: it remounts /sys, and slurmd needs the host's /sys/fs/cgroup.
for node in "${NODES[@]}"; do
    nsenter --net="/run/netns/rsl-$node" unshare --mount --propagation private \
        sh -c 'mount --bind "$1" /etc/hosts && exec slurmd -f "$2" -N "$3"' sh "/etc/netns/rsl-$node/hosts" "$CONF" "$node" 9>&-
done

for _ in $(seq 60); do
    [ "$(idle_nodes)" -ge ${#NODES[@]} ] && break
    sleep 0.5
done
if [ "$(idle_nodes)" -lt ${#NODES[@]} ]; then
    say "the nodes did not come up; logs in $DIR/log/"
    SLURM_CONF=$CONF sinfo -N >&2 || true
    exit 1
fi
say "up: ${NODES[*]} at $NET.1-${#NODES[@]}, controller $NET.254 ($CONF)"
echo "export SLURM_CONF=$CONF"
