#!/usr/bin/env bash
# The Docker image, built and used for real on this machine, the ways people use a container:
# start a Docker daemon (unless one answers already), make the base image from Debian packages
# (scripts/docker_base.sh: Docker Hub may be out of reach), build the Dockerfile on it, then
#   1. train into a named volume as the image's user, and into a host folder as another uid
#      (--user, no chown); eval.py with outputs/ mounted read-only;
#   2. docker stop mid-epoch (tini as PID 1 passes SIGTERM on; train.py saves and exits 143), then
#      resume=true: the same weights as a run never stopped;
#   3. torch.compile on the CPU (the image's gcc), in the tests below;
#   4. torchrun with 2 processes under --network=none, with the documented --local-addr;
#   5. the test suite inside the image (scripts/test.sh, on the image's own Python);
# print a summary; clean up. Every run is without a network: the data and the code are in the image.
# Usage: bash scripts/docker_check.sh [--quick] [--keep] [--ci]
#   --quick  short training runs instead of the image's default command, and the tests below
#            (QUICK_TESTS) instead of the whole suite (minutes less)
#   --keep   keep the images, and the daemon's data root when this script started the daemon,
#            so a rerun reuses every cached layer
#   --ci     what .ci/run does: --quick --keep; installs docker.io and debootstrap with apt when
#            missing; where no Docker engine can be started, run a container or make the Debian
#            base, says so in one line and exits 0
# Env: DOCKER_CHECK_DIR       work folder: daemon data, base tarball, run outputs
#                             (default /var/tmp/resnet-padding-docker)
#      DOCKER_STORAGE_DRIVER  default: dockerd's own choice (overlay2 where the kernel allows, else vfs)
#      BASE_IMAGE             skip the Debian-made base and build on this one (python:3.11-slim-bookworm)
#      IMAGE                  the image's tag (default resnet-padding:check)
#      TORCH_VERSION, TORCHVISION_VERSION   default: the Dockerfile's
#      OTHER_UID              the host user who is not the image's (default 4242)
# Exits non-zero on any failure, naming the step.
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=0; KEEP=0; CI=0
for arg in "$@"; do
    case $arg in
        --quick) QUICK=1 ;;
        --keep) KEEP=1 ;;
        --ci) CI=1; QUICK=1; KEEP=1 ;;
        *) echo "usage: bash scripts/docker_check.sh [--quick] [--keep] [--ci]" >&2; exit 2 ;;
    esac
done

DIR=${DOCKER_CHECK_DIR:-/var/tmp/resnet-padding-docker}
IMAGE=${IMAGE:-resnet-padding:check}
OTHER=${OTHER_UID:-4242}
RUN=$DIR/run
VOLUME=resnet-padding-check-outputs
W=/workspace/resnet-padding  # the image's WORKDIR
# The in-image tests of --quick: the image's own frame, torch.compile with its gcc, threads and
# cgroup quotas, W&B's folder, eval's folders, and the console scripts where pip put them.
QUICK_TESTS=(tests/project/test_frame.py tests/models/test_features.py tests/engine/test_cpus.py tests/engine/test_workers.py
             tests/engine/test_wandb_offline.py tests/cli/test_commands.py tests/project/test_docs.py)
STEP="set-up"
say() { echo "[docker-check] $*"; }
die() { echo "[docker-check] error: $*" >&2; exit 1; }
skip() { say "skipped: $* (the image is checked where root can start a Docker engine)"; exit 0; }

# --- an engine: CI installs one where it can, and skips where it cannot
if [ "$CI" -eq 1 ] && ! command -v dockerd >/dev/null && ! docker info >/dev/null 2>&1; then
    [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null || skip "no Docker engine, and no root with apt to install docker.io"
    say "installing docker.io and debootstrap with apt"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q docker.io debootstrap >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q docker.io debootstrap >/dev/null; } \
        || skip "apt could not install docker.io and debootstrap"
fi
command -v docker >/dev/null || die "no docker client: apt-get install docker.io debootstrap"
mkdir -p "$DIR"

# --- the daemon: one that answers already, else our own, stopped (and its data removed) on exit
OWN_DAEMON=0; DOCKERD_PID=""
cleanup() {
    local rc=$?
    set +e
    if docker info >/dev/null 2>&1; then
        docker rm -f resnet-padding-check-stop resnet-padding-check-torchrun >/dev/null 2>&1
        docker volume rm "$VOLUME" >/dev/null 2>&1
        if [ "$KEEP" -eq 0 ]; then
            docker rmi "$IMAGE" >/dev/null 2>&1
            [ -n "${BUILT_BASE:-}" ] && docker rmi "$BUILT_BASE" >/dev/null 2>&1
        fi
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
    if [ "$(id -u)" -ne 0 ]; then
        [ "$CI" -eq 1 ] && skip "no Docker daemon runs, and starting one needs root"
        die "no Docker daemon runs, and starting one needs root: run as root, or set DOCKER_HOST to a daemon"
    fi
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
        if ! kill -0 "$DOCKERD_PID" 2>/dev/null; then
            tail -5 "$DIR/dockerd.log" >&2; DOCKERD_PID=""
            [ "$CI" -eq 1 ] && skip "dockerd does not start here ($DIR/dockerd.log)"
            die "dockerd exited (log above: $DIR/dockerd.log)"
        fi
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
elif ! BASE=$(DOCKER_CACHE=$DIR bash scripts/docker_base.sh); then
    [ "$CI" -eq 1 ] && skip "no base image: debootstrap could not reach Debian's mirror"
    die "scripts/docker_base.sh failed (above)"
else
    BUILT_BASE=$BASE
fi
# an engine that starts but cannot run a container (no cgroups, no overlay mounts) is no engine here
if ! docker run --rm --network=none "$BASE" true > "$DIR/run-check.log" 2>&1; then
    [ "$CI" -eq 1 ] && skip "dockerd runs but cannot start a container: $(tail -1 "$DIR/run-check.log")"
    die "the engine cannot start a container: $(tail -1 "$DIR/run-check.log")"
fi
BASE_S=$(( $(date +%s) - t0 ))
say "base image $BASE ($BASE_S s)"

# --- the build (the classic builder: it needs no buildx plugin; the host's network, as there is
# no bridge)
STEP="docker build"
args=(--network=host --build-arg "BASE_IMAGE=$BASE")
[ -n "${TORCH_VERSION:-}" ] && args+=(--build-arg "TORCH_VERSION=$TORCH_VERSION")
[ -n "${TORCHVISION_VERSION:-}" ] && args+=(--build-arg "TORCHVISION_VERSION=$TORCHVISION_VERSION")
t0=$(date +%s)
DOCKER_BUILDKIT=0 docker build "${args[@]}" -t "$IMAGE" . > "$DIR/build.log" 2>&1 \
    || { tail -30 "$DIR/build.log" >&2; die "docker build failed (log: $DIR/build.log)"; }
BUILD_S=$(( $(date +%s) - t0 ))
in_image() { docker run --rm --network=none "$@"; }
SIZE_B=$(docker image inspect --format '{{.Size}}' "$IMAGE")
SIZE=$(awk -v b="$SIZE_B" 'BEGIN { printf "%.2f GB", b / 1e9 }')
VERSIONS=$(in_image "$IMAGE" python -c \
    "import sys, torch, torchvision; print(f'Python {sys.version.split()[0]}, torch {torch.__version__}, torchvision {torchvision.__version__}')")
GCC=$(in_image "$IMAGE" gcc -dumpfullversion 2>/dev/null) || die "the image has no gcc (torch.compile needs a C compiler)"
PID1=$(in_image "$IMAGE" cat /proc/1/comm)
[ "$PID1" = tini ] || die "PID 1 in the image is $PID1, not tini: docker stop's SIGTERM would not reach train.py"
say "built $IMAGE in $BUILD_S s: $SIZE ($VERSIONS; gcc $GCC; PID 1 $PID1)"

STEP="user check"
WHO=$(in_image "$IMAGE" sh -c 'echo "$(id -un) (uid $(id -u))"')
case $WHO in root*) die "the image runs as root" ;; esac
rm -rf "$RUN" && mkdir -p "$RUN/outputs" "$RUN/results"
chown -R "$OTHER:$OTHER" "$RUN" 2>/dev/null || chmod a+rwx "$RUN/outputs" "$RUN/results"
OTHER_RUN=(--user "$OTHER:$OTHER" -v "$RUN/outputs:$W/outputs" -v "$RUN/results:$W/results")

# "top-1 / top-5 error %" of a results.json, or of eval.jsonl's last row
errors() {
    python3 - "$1" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
row = json.loads(text if sys.argv[1].endswith(".json") else text.splitlines()[-1])
print(f"{row['top1_err']:.2f} / {row['top5_err']:.2f}")
PY
}
# the quick runs: short epochs, 2,000 of the 10,000 test images, a progress line every 5 steps
SHORT=(epochs=2 max_steps_per_epoch=40 val_images=2000 log_every=5)

# --- 1. a named volume, written by the image's user: no chown, as the volume starts as app's folder
STEP="named volume"
docker volume rm "$VOLUME" >/dev/null 2>&1 || true
docker volume create "$VOLUME" >/dev/null
if [ "$QUICK" -eq 1 ]; then
    TRAIN=(python train.py "${SHORT[@]}"); TRAIN_DESC="${TRAIN[*]}"
else
    TRAIN=(); TRAIN_DESC="the default command: $(docker image inspect --format '{{join .Config.Cmd " "}}' "$IMAGE")"
fi
say "docker run -v $VOLUME:$W/outputs $IMAGE ${TRAIN_DESC}"
t0=$(date +%s)
in_image -v "$VOLUME:$W/outputs" "$IMAGE" "${TRAIN[@]}" > "$DIR/train.log" 2>&1 \
    || { tail -20 "$DIR/train.log" >&2; die "training into the named volume failed ($DIR/train.log)"; }
TRAIN_S=$(( $(date +%s) - t0 ))
# the volume's run, read through a container: the volume is the daemon's, not a host path
RUN_IN=$(in_image -v "$VOLUME:$W/outputs:ro" "$IMAGE" sh -c 'ls -t outputs/*/*/results.json | head -1')
[ -n "$RUN_IN" ] || die "the run wrote no results.json into the named volume"
in_image -v "$VOLUME:$W/outputs:ro" "$IMAGE" cat "$RUN_IN" > "$DIR/volume-results.json"
TRAIN_ERR=$(errors "$DIR/volume-results.json")

# ... eval.py on that run's last.pt, as another uid, with outputs/ mounted read-only and a host
# folder for results/
STEP="eval.py, outputs read-only"
say "docker run --user $OTHER:$OTHER -v $VOLUME:$W/outputs:ro -v $RUN/results:$W/results $IMAGE python eval.py ..."
t0=$(date +%s)
in_image --user "$OTHER:$OTHER" -v "$VOLUME:$W/outputs:ro" -v "$RUN/results:$W/results" "$IMAGE" \
    python eval.py "weights=${RUN_IN%results.json}last.pt" data=fashion_mnist > "$DIR/eval.log" 2>&1 \
    || { tail -20 "$DIR/eval.log" >&2; die "eval.py with outputs/ read-only failed ($DIR/eval.log)"; }
EVAL_S=$(( $(date +%s) - t0 ))
ROWS=$RUN/results/eval.jsonl
[ -s "$ROWS" ] || die "eval.py wrote no row to results/eval.jsonl"
EVAL_ERR=$(errors "$ROWS")
OWNER=$(stat -c %u "$ROWS")
[ "$OWNER" = "$OTHER" ] || die "results/eval.jsonl belongs to uid $OWNER, not the --user uid $OTHER"
if [ "$QUICK" -eq 1 ]; then  # 2,000 images in training, all 10,000 here: only the full check can compare
    SAME="(the run scored 2,000 images: $TRAIN_ERR)"
else
    [ "$EVAL_ERR" = "$TRAIN_ERR" ] || die "eval.py gives $EVAL_ERR, the run's own validation $TRAIN_ERR"
    SAME="= the run's validation"
fi

# --- 2. docker stop mid-epoch, as another uid into a host folder, then resume=true: the weights
# of a run never stopped
STEP="docker stop, then resume"
straight=(python train.py "${SHORT[@]}" hydra.run.dir=outputs/straight)
stopped=(python train.py "${SHORT[@]}" hydra.run.dir=outputs/stopped)
in_image "${OTHER_RUN[@]}" "$IMAGE" "${straight[@]}" > "$DIR/straight.log" 2>&1 \
    || { tail -20 "$DIR/straight.log" >&2; die "the run never stopped failed ($DIR/straight.log)"; }
docker run -d --name resnet-padding-check-stop --network=none "${OTHER_RUN[@]}" "$IMAGE" "${stopped[@]}" >/dev/null
for _ in $(seq 240); do  # until epoch 1 is 10 steps in
    docker logs resnet-padding-check-stop 2>&1 | grep -q "^train 1: 10/" && break
    [ "$(docker inspect -f '{{.State.Running}}' resnet-padding-check-stop)" = true ] || break
    sleep 0.5
done
t0=$(date +%s.%N)
docker stop resnet-padding-check-stop >/dev/null
STOP_S=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
STOP_RC=$(docker inspect -f '{{.State.ExitCode}}' resnet-padding-check-stop)
docker logs resnet-padding-check-stop > "$DIR/stopped.log" 2>&1
docker rm resnet-padding-check-stop >/dev/null
[ "$STOP_RC" = 143 ] || { tail -20 "$DIR/stopped.log" >&2; die "docker stop: exit $STOP_RC, not 143 (saved, then stopped by SIGTERM)"; }
grep -q "^stopped by SIGTERM: saved " "$DIR/stopped.log" || die "docker stop: train.py did not save ($DIR/stopped.log)"
SAVED="saved at $(grep -o "^train [0-9]*: [0-9]*/[0-9]*" "$DIR/stopped.log" | tail -1)"
in_image "${OTHER_RUN[@]}" "$IMAGE" "${stopped[@]}" resume=true > "$DIR/resumed.log" 2>&1 \
    || { tail -20 "$DIR/resumed.log" >&2; die "resume=true after docker stop failed ($DIR/resumed.log)"; }
in_image "${OTHER_RUN[@]}" "$IMAGE" python -c '
import sys, torch
a, b = (torch.load(f"outputs/{name}/last.pt", map_location="cpu", weights_only=False)["model"] for name in ("straight", "stopped"))
different = [k for k in a if not torch.equal(a[k], b[k])]
sys.exit(f"{len(different)} of {len(a)} tensors differ, e.g. {different[:3]}" if different or a.keys() != b.keys() else 0)' \
    || die "the resumed run's weights are not the weights of the run never stopped"
STOP_OWNER=$(stat -c %u "$RUN/outputs/stopped/last.pt")
[ "$STOP_OWNER" = "$OTHER" ] || die "outputs/stopped/last.pt belongs to uid $STOP_OWNER, not the --user uid $OTHER"

# --- 4. torchrun, 2 processes, no network: the documented --local-addr (without it, c10d looks
# the container's hostname up, fails, and retries for 5 minutes)
STEP="torchrun --network=none"
t0=$(date +%s)
docker run -d --name resnet-padding-check-torchrun --network=none "${OTHER_RUN[@]}" "$IMAGE" \
    torchrun --standalone --local-addr=127.0.0.1 --nproc_per_node=2 train.py epochs=1 max_steps_per_epoch=10 \
    val_images=500 hydra.run.dir=outputs/torchrun >/dev/null
TR_RC=$(timeout 300 docker wait resnet-padding-check-torchrun) || TR_RC="still running after 300 s"
docker logs resnet-padding-check-torchrun > "$DIR/torchrun.log" 2>&1
docker rm -f resnet-padding-check-torchrun >/dev/null
TR_S=$(( $(date +%s) - t0 ))
[ "$TR_RC" = 0 ] || { tail -20 "$DIR/torchrun.log" >&2; die "torchrun --nproc_per_node=2 under --network=none: $TR_RC ($DIR/torchrun.log)"; }
WORLD=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["world_size"])' "$RUN/outputs/torchrun/results.json")
[ "$WORLD" = 2 ] || die "torchrun's run says world_size $WORLD, not 2 ($RUN/outputs/torchrun/results.json)"

# --- 6. Docker's default /dev/shm (64 MB) under loader workers with ImageNet-sized batches: one
# line that names --shm-size / --ipc=host, status 2, before any worker starts (not a crash mid-epoch)
STEP="default /dev/shm"
in_image "$IMAGE" sh -c 'python -c "from pathlib import Path; from tests.helpers.imagegen import make_tiny_folder; \
make_tiny_folder(Path(\"/tmp/tiny\"))" && df -m /dev/shm | tail -1 && python train.py data=imagefolder \
data.root=/tmp/tiny data.num_classes=3 data.image_size=224 batch_size=128 data.workers=2 hydra.run.dir=/tmp/run' \
    > "$DIR/shm.log" 2>&1 && die "train.py with 2 workers under the default /dev/shm did not refuse ($DIR/shm.log)"
SHM_LINE=$(grep "^error: /dev/shm has" "$DIR/shm.log" || true)
case $SHM_LINE in
    *"--shm-size"*"--ipc=host"*) ;;
    *) tail -20 "$DIR/shm.log" >&2; die "train.py under the default /dev/shm: no one-line refusal naming --shm-size ($DIR/shm.log)" ;;
esac
SHM_SIZE=$(awk 'NR==1 {print $2 " MB"}' <(grep -E "^(tmpfs|shm) " "$DIR/shm.log") 2>/dev/null || true)

# --- 6. as users type it: a read-only root with the --tmpfs it needs (and a volume for the runs),
# and the default --rm with no volume, whose first line says the run goes with the container
STEP="--read-only; --rm without a volume"
TINY=(epochs=1 max_steps_per_epoch=5 val_images=500)
in_image --read-only --tmpfs /tmp -v "$VOLUME:$W/outputs" "$IMAGE" python train.py "${TINY[@]}" \
    hydra.run.dir=outputs/read-only > "$DIR/read-only.log" 2>&1 \
    || { tail -20 "$DIR/read-only.log" >&2; die "train.py under --read-only --tmpfs /tmp failed ($DIR/read-only.log)"; }
in_image "$IMAGE" python train.py "${TINY[@]}" > "$DIR/no-volume.log" 2>&1 \
    || { tail -20 "$DIR/no-volume.log" >&2; die "train.py without a volume failed ($DIR/no-volume.log)"; }
grep -q "^training .* run folder $W/outputs/" "$DIR/no-volume.log" || die "train.py printed no start line ($DIR/no-volume.log)"
grep -q "^note: .* not on a volume.* -v resnet-outputs:$W/outputs " "$DIR/no-volume.log" \
    || die "train.py without a volume did not name the -v that keeps its run ($DIR/no-volume.log)"

# --- 3 and 5. the tests, in the image, on its own Python (no .venv, no network)
STEP="tests in the image"
if [ "$QUICK" -eq 1 ]; then TESTS=("${QUICK_TESTS[@]}"); TESTS_DESC="${#QUICK_TESTS[@]} files (--quick)"; else TESTS=(); TESTS_DESC="the whole suite"; fi
t0=$(date +%s)
in_image "$IMAGE" bash scripts/test.sh -q -rs -p no:cacheprovider "${TESTS[@]}" > "$DIR/tests.log" 2>&1 \
    || { tail -40 "$DIR/tests.log" >&2; die "the tests failed in the image ($DIR/tests.log)"; }
TESTS_S=$(( $(date +%s) - t0 ))
TESTS_SUM=$(grep -E "^[0-9]+ passed|^=+ .*passed" "$DIR/tests.log" | tail -1 | tr -d '=' | xargs)
grep -q "torch_compile_gives_the_eager_outputs.*SKIP\|SKIPPED.*no C compiler" "$DIR/tests.log" \
    && die "the torch.compile test skipped in the image ($DIR/tests.log)"

STEP="summary"
row() { printf '| %-22s | %-92s |\n' "$1" "$2"; }
line="+$(printf -- '-%.0s' $(seq 24))+$(printf -- '-%.0s' $(seq 94))+"
echo
echo "Docker check, $(date +%F), $(nproc) cores, engine $ENGINE, storage driver $DRIVER$([ "$QUICK" -eq 1 ] && echo ", --quick")"
echo "$line"
row "step" "result"
echo "$line"
row "base image" "$BASE, $BASE_S s"
row "build" "$BUILD_S s: $VERSIONS, gcc $GCC"
row "image size" "$SIZE ($SIZE_B bytes)"
row "runs as" "$WHO, PID 1 $PID1"
row "train, named volume" "$TRAIN_DESC"
row "" "$TRAIN_S s, top-1 / top-5 err % $TRAIN_ERR, no chown"
row "eval.py, outputs :ro" "as uid $OTHER: $EVAL_S s, top-1 / top-5 err % $EVAL_ERR $SAME; row owned by uid $OWNER"
row "docker stop, resume" "stopped in $STOP_S s, exit $STOP_RC, $SAVED; resume=true: the weights of the run never stopped"
row "" "as uid $OTHER into a host folder: last.pt owned by uid $STOP_OWNER"
row "torchrun, no network" "--standalone --local-addr=127.0.0.1 --nproc_per_node=2 under --network=none: exit 0, world size $WORLD, $TR_S s"
row "--read-only; no volume" "--read-only --tmpfs /tmp with a volume: trained; --rm without one: the first line names -v resnet-outputs:$W/outputs"
row "default /dev/shm" "${SHM_SIZE:-64 MB}, 2 workers, batch 128 at 224 px: $(echo "$SHM_LINE" | cut -c1-88)"
row "tests in the image" "bash scripts/test.sh, $TESTS_DESC: $TESTS_SUM, $TESTS_S s (torch.compile ran, with gcc)"
echo "$line"
say "logs: $DIR/{build,train,eval,straight,stopped,resumed,torchrun,shm,tests}.log"
[ "$KEEP" -eq 1 ] && say "kept: $IMAGE and ${BUILT_BASE:-the base}$([ "$OWN_DAEMON" -eq 1 ] && echo ", data root $DIR/data (start dockerd on it to use them)")"
STEP="clean-up"
