#!/usr/bin/env bash
# The Docker image, built and run for real on this machine: start a Docker daemon (unless one
# answers already), make the base image from Debian packages (scripts/docker_base.sh: Docker Hub
# may be out of reach), build the Dockerfile on it, run the image's default command with its
# output folder mounted, then eval.py on the checkpoint it wrote, mounted read-only, as the
# image's non-root user; print the build time, the image size and a summary; clean up.
# Usage: bash scripts/docker_check.sh [--quick] [--keep]
#   --quick  train.py for 1 short epoch instead of the default command (minutes less)
#   --keep   keep the images, and the daemon's data root when this script started the daemon,
#            so a rerun reuses every cached layer
# Env: DOCKER_CHECK_DIR       work folder: daemon data, base tarball, run outputs
#                             (default /var/tmp/resnet-padding-docker)
#      DOCKER_STORAGE_DRIVER  default: dockerd's own choice (overlay2 where the kernel allows, else vfs)
#      BASE_IMAGE             skip the Debian-made base and build on this one (python:3.11-slim-bookworm)
#      IMAGE                  the image's tag (default resnet-padding:check)
#      TORCH_VERSION, TORCHVISION_VERSION   default: the Dockerfile's
#      WHEEL_DIRS             folders of wheels served to the build as pip find-links (default: the
#                             local ones this host's pip is configured with; "" for PyPI alone)
#      WHEEL_PORT             the port they are served on, 127.0.0.1 (default 8765)
# Exits non-zero on any failure, naming the step.
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=0; KEEP=0
for arg in "$@"; do
    case $arg in
        --quick) QUICK=1 ;;
        --keep) KEEP=1 ;;
        *) echo "usage: bash scripts/docker_check.sh [--quick] [--keep]" >&2; exit 2 ;;
    esac
done

DIR=${DOCKER_CHECK_DIR:-/var/tmp/resnet-padding-docker}
IMAGE=${IMAGE:-resnet-padding:check}
WHEEL_PORT=${WHEEL_PORT:-8765}
RUN=$DIR/run
STEP="set-up"
say() { echo "[docker-check] $*"; }
die() { echo "[docker-check] error: $*" >&2; exit 1; }

command -v docker >/dev/null || die "no docker client: apt-get install docker.io debootstrap"
mkdir -p "$DIR"

# --- the daemon: one that answers already, else our own, stopped (and its data removed) on exit
OWN_DAEMON=0; DOCKERD_PID=""; SERVER_PID=""
cleanup() {
    local rc=$?
    set +e
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
    if [ "$KEEP" -eq 0 ] && docker info >/dev/null 2>&1; then
        docker rmi "$IMAGE" >/dev/null 2>&1
        [ -n "${BUILT_BASE:-}" ] && docker rmi "$BUILT_BASE" >/dev/null 2>&1
    fi
    if [ -n "$DOCKERD_PID" ]; then
        kill "$DOCKERD_PID" 2>/dev/null
        for _ in $(seq 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
        # a namespace or layer mount dockerd left behind would make rm fail
        awk -v d="$DIR/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r | xargs -r -n1 umount -l
        [ "$KEEP" -eq 0 ] && rm -rf "$DIR/data" "$DIR/exec"
    fi
    [ "$rc" -ne 0 ] && echo "[docker-check] FAILED at step: $STEP (exit $rc)" >&2
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

STEP="docker daemon"
if docker info >/dev/null 2>&1; then
    say "using the running daemon (${DOCKER_HOST:-default socket})"
else
    command -v dockerd >/dev/null || die "no Docker daemon runs and dockerd is missing: apt-get install docker.io debootstrap"
    [ "$(id -u)" -eq 0 ] || die "no Docker daemon runs, and starting one needs root: run as root, or set DOCKER_HOST to a daemon"
    mkdir -p "$DIR/data" "$DIR/exec"
    export DOCKER_HOST="unix://$DIR/docker.sock"
    # No iptables rules and no docker0 bridge: this leaves the host's network alone; the build
    # uses the host's network and the runs need none.
    dockerd --data-root "$DIR/data" --exec-root "$DIR/exec" -H "$DOCKER_HOST" --pidfile "$DIR/dockerd.pid" \
        --iptables=false --bridge=none ${DOCKER_STORAGE_DRIVER:+--storage-driver="$DOCKER_STORAGE_DRIVER"} \
        > "$DIR/dockerd.log" 2>&1 &
    DOCKERD_PID=$!; OWN_DAEMON=1
    for _ in $(seq 60); do
        docker info >/dev/null 2>&1 && break
        kill -0 "$DOCKERD_PID" 2>/dev/null || { tail -5 "$DIR/dockerd.log" >&2; DOCKERD_PID=""; die "dockerd exited (log above: $DIR/dockerd.log)"; }
        sleep 1
    done
    docker info >/dev/null 2>&1 || { tail -5 "$DIR/dockerd.log" >&2; die "dockerd did not answer within 60 s ($DIR/dockerd.log)"; }
    say "started dockerd (pid $DOCKERD_PID) on $DOCKER_HOST, data in $DIR/data"
fi
DRIVER=$(docker info --format '{{.Driver}}')
ENGINE=$(docker version --format '{{.Server.Version}}')
say "engine $ENGINE, storage driver $DRIVER"

# --- the base image
STEP="base image"
t0=$(date +%s)
if [ -n "${BASE_IMAGE:-}" ]; then
    BASE=$BASE_IMAGE
else
    BASE=$(DOCKER_CACHE=$DIR bash scripts/docker_base.sh)
    BUILT_BASE=$BASE
fi
BASE_S=$(( $(date +%s) - t0 ))
say "base image $BASE ($BASE_S s)"

# --- this host's wheels, served to the build: the CUDA torch stack is gigabytes, and pip would
# otherwise download it (or a version this host's index lacks)
STEP="wheel server"
if [ -z "${WHEEL_DIRS+set}" ]; then
    WHEEL_DIRS=$(python3 -m pip config list 2>/dev/null \
        | sed -n "s/^[^=]*\.\(find-links\|extra-index-url\)='\(.*\)'$/\2/p" | tr ' ' '\n' \
        | sed 's:^file\://::; s:/simple/*$:/files:' | sort -u \
        | while read -r d; do [ -d "$d" ] && echo "$d"; done | xargs)
fi
FIND_LINKS=""
if [ -n "${WHEEL_DIRS// /}" ]; then
    rm -rf "$DIR/wheels" && mkdir -p "$DIR/wheels"
    i=0
    for d in $WHEEL_DIRS; do
        ln -s "$d" "$DIR/wheels/$i"
        FIND_LINKS+="http://127.0.0.1:$WHEEL_PORT/$i/ "
        i=$((i + 1))
    done
    python3 -m http.server --bind 127.0.0.1 --directory "$DIR/wheels" "$WHEEL_PORT" > "$DIR/wheels.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 20); do
        python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$WHEEL_PORT/')" 2>/dev/null && break
        kill -0 "$SERVER_PID" 2>/dev/null || die "the wheel server did not start (port $WHEEL_PORT busy? set WHEEL_PORT): $(tail -1 "$DIR/wheels.log")"
        sleep 0.5
    done
    FIND_LINKS=${FIND_LINKS% }
    say "serving $WHEEL_DIRS as pip find-links on 127.0.0.1:$WHEEL_PORT"
fi

# --- the build (the classic builder: it needs no buildx plugin, and the wheels' server on the
# host's loopback is reachable from --network=host)
STEP="docker build"
args=(--network=host --build-arg "BASE_IMAGE=$BASE" --build-arg "PIP_FIND_LINKS=$FIND_LINKS")
[ -n "${TORCH_VERSION:-}" ] && args+=(--build-arg "TORCH_VERSION=$TORCH_VERSION")
[ -n "${TORCHVISION_VERSION:-}" ] && args+=(--build-arg "TORCHVISION_VERSION=$TORCHVISION_VERSION")
t0=$(date +%s)
DOCKER_BUILDKIT=0 docker build "${args[@]}" -t "$IMAGE" . 2>&1 | tee "$DIR/build.log"
BUILD_S=$(( $(date +%s) - t0 ))
SIZE_B=$(docker image inspect --format '{{.Size}}' "$IMAGE")
SIZE=$(awk -v b="$SIZE_B" 'BEGIN { printf "%.2f GB", b / 1e9 }')
VERSIONS=$(docker run --rm --network=none "$IMAGE" python -c \
    "import sys, torch, torchvision; print(f'Python {sys.version.split()[0]}, torch {torch.__version__}, torchvision {torchvision.__version__}')")
say "built $IMAGE in $BUILD_S s: $SIZE ($VERSIONS)"
docker image ls "$IMAGE"

# --- runs as the image's user, with no network: the data and the code are in the image
STEP="user check"
WHO=$(docker run --rm --network=none "$IMAGE" sh -c 'echo "$(id -un) (uid $(id -u))"')
case $WHO in root*) die "the image runs as root" ;; esac
UID_IN=$(docker run --rm --network=none "$IMAGE" id -u)
rm -rf "$RUN" && mkdir -p "$RUN/outputs" "$RUN/results"
if [ "$(id -u)" -eq 0 ]; then chown -R "$UID_IN:$UID_IN" "$RUN"; else chmod a+rwx "$RUN/outputs" "$RUN/results"; fi

STEP="default command"
WORKDIR_IN=$(docker image inspect --format '{{.Config.WorkingDir}}' "$IMAGE")
if [ "$QUICK" -eq 1 ]; then
    TRAIN=(python train.py epochs=1 max_steps_per_epoch=50); TRAIN_DESC="--quick: ${TRAIN[*]}"
else
    TRAIN=(); TRAIN_DESC="default command: $(docker image inspect --format '{{join .Config.Cmd " "}}' "$IMAGE")"
fi
say "docker run --rm -v $RUN/outputs:$WORKDIR_IN/outputs $IMAGE${TRAIN[*]:+ ${TRAIN[*]}} ($TRAIN_DESC)"
t0=$(date +%s)
docker run --rm --network=none -v "$RUN/outputs:$WORKDIR_IN/outputs" "$IMAGE" "${TRAIN[@]}" 2>&1 | tee "$RUN/train.log"
TRAIN_S=$(( $(date +%s) - t0 ))
CKPT=$(find "$RUN/outputs" -name last.pt -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2-)
[ -n "$CKPT" ] || die "the run wrote no last.pt under $RUN/outputs"
# "top-1 / top-5 error %" of a results.json, or of eval.jsonl's last row
errors() {
    python3 - "$1" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
row = json.loads(text if sys.argv[1].endswith(".json") else text.splitlines()[-1])
print(f"{row['top1_err']:.2f} / {row['top5_err']:.2f}")
PY
}
TRAIN_ERR=$(errors "$(dirname "$CKPT")/results.json")

STEP="eval.py"
say "eval.py on ${CKPT#"$DIR"/}, mounted read-only at /checkpoint"
t0=$(date +%s)
docker run --rm --network=none -v "$(dirname "$CKPT"):/checkpoint:ro" -v "$RUN/results:$WORKDIR_IN/results" \
    "$IMAGE" python eval.py weights=/checkpoint/last.pt data=fashion_mnist 2>&1 | tee "$RUN/eval.log"
EVAL_S=$(( $(date +%s) - t0 ))
ROWS=$RUN/results/eval.jsonl
[ -s "$ROWS" ] || die "eval.py wrote no row to results/eval.jsonl"
EVAL_ERR=$(errors "$ROWS")
# Same weights, same 10,000 test images: eval.py must give the run's own last validation.
[ "$EVAL_ERR" = "$TRAIN_ERR" ] && SAME="as the run's validation" || SAME="the run's validation: $TRAIN_ERR"
OWNER=$(stat -c %u "$ROWS")

STEP="summary"
row() { printf '| %-10s | %-84s |\n' "$1" "$2"; }
line="+$(printf -- '-%.0s' $(seq 12))+$(printf -- '-%.0s' $(seq 86))+"
echo
echo "Docker check, $(date +%F), $(nproc) cores, engine $ENGINE, storage driver $DRIVER"
echo "$line"
row "step" "result"
echo "$line"
row "base image" "$BASE, $BASE_S s"
row "build" "$BUILD_S s: $VERSIONS"
row "image size" "$SIZE ($SIZE_B bytes)"
row "runs as" "$WHO"
row "train" "$TRAIN_DESC"
row "" "$TRAIN_S s, top-1 / top-5 err % $TRAIN_ERR"
row "eval.py" "the mounted last.pt, read-only: $EVAL_S s"
row "" "top-1 / top-5 err % $EVAL_ERR, $SAME; row written by uid $OWNER"
echo "$line"
say "logs: $DIR/build.log, $RUN/train.log, $RUN/eval.log"
[ "$KEEP" -eq 1 ] && say "kept: $IMAGE and ${BUILT_BASE:-the base}$([ "$OWN_DAEMON" -eq 1 ] && echo ", data root $DIR/data (start dockerd on it to use them)")"
STEP="clean-up"
