#!/usr/bin/env bash
# A local stand-in for the Dockerfile's default base (python:3.11-slim-bookworm), made from
# Debian packages for machines that cannot reach Docker Hub: debootstrap bookworm (minbase) with
# Debian's Python 3.11, pip and `python` (python-is-python3), imported as an image.
# Usage: bash scripts/docker_base.sh [IMAGE]      (default resnet-padding-base:bookworm-py3.11)
# Env:   DOCKER_HOST     the daemon, as for the docker client
#        DOCKER_CACHE    where the root filesystem's tarball is kept, so a rerun imports it in
#                        seconds (default /var/tmp/resnet-padding-docker)
#        DEBIAN_MIRROR / DEBIAN_SECURITY_MIRROR   default: the ones this host's apt uses
# Needs root (debootstrap) and a running Docker daemon. Prints the image's name last.
set -euo pipefail

IMAGE=${1:-resnet-padding-base:bookworm-py3.11}
CACHE=${DOCKER_CACHE:-/var/tmp/resnet-padding-docker}
TARBALL=$CACHE/base-bookworm-python3.11.tar

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "$IMAGE"
    exit 0
fi

# The host's Debian mirror: Docker Hub is out of reach here, the host's apt mirror is not.
host_uris() {
    {
        grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | cut -d' ' -f2-
        grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | grep -o '[a-z]*://[^ ]*'
    } | tr ' ' '\n' | sed 's:/*$::'
}
URIS=$(host_uris || true)
MIRROR=${DEBIAN_MIRROR:-$(grep -m1 '/debian$' <<< "$URIS" || echo http://deb.debian.org/debian)}
SECURITY=${DEBIAN_SECURITY_MIRROR:-$(grep -m1 '/debian-security$' <<< "$URIS" || echo http://deb.debian.org/debian-security)}

if [ ! -f "$TARBALL" ]; then
    command -v debootstrap >/dev/null || { echo "error: debootstrap is missing: apt-get install debootstrap" >&2; exit 1; }
    [ "$(id -u)" -eq 0 ] || { echo "error: debootstrap needs root (run as root or with sudo)" >&2; exit 1; }
    mkdir -p "$CACHE"
    ROOTFS=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    trap 'rm -rf "$ROOTFS"' EXIT
    echo "[base] debootstrap bookworm from $MIRROR (a few minutes, once)" >&2
    # python3-venv: the official image's Python has venv built in; Debian ships it apart.
    debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,python-is-python3,ca-certificates \
        bookworm "$ROOTFS" "$MIRROR" >&2
    # apt inside the image: the release, its updates and security, like the official image.
    rm -f "$ROOTFS/etc/apt/sources.list"
    cat > "$ROOTFS/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    # The CAs this host added to its own (/usr/local/share/ca-certificates): where HTTPS goes
    # through a proxy with its own CA, as here, pip in the build needs it to reach PyPI.
    if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
        cp /usr/local/share/ca-certificates/*.crt "$ROOTFS/usr/local/share/ca-certificates/"
        chroot "$ROOTFS" update-ca-certificates >&2
    fi
    # The official python image's pip installs system-wide: no PEP 668 marker there either.
    rm -f "$ROOTFS"/usr/lib/python3*/EXTERNALLY-MANAGED
    rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/cache/apt/*.bin
    tar --numeric-owner -C "$ROOTFS" -cf "$TARBALL.part" .
    mv "$TARBALL.part" "$TARBALL"
fi

echo "[base] importing $TARBALL as $IMAGE" >&2
docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python"]' \
    "$TARBALL" "$IMAGE" >/dev/null
echo "$IMAGE"
