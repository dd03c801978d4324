#!/usr/bin/env bash
# LiteLLM's proxy as a benchmark peer (a gateway in front of an OpenAI-compatible upstream),
# in its own venv under build/peers/ (never parley's).
#
#   bench/peers/litellm.sh [install]              create build/peers/litellm-venv, install
#                                                 litellm[proxy] (pinned, the wheel by sha256)
#   bench/peers/litellm.sh serve CONFIG PORT [ARGS]   run `litellm --config CONFIG` on
#                                                 127.0.0.1:PORT, offline (no telemetry, the
#                                                 bundled model cost map)
#
# The version is pinned: never 1.107.x (that release was compromised and yanked from PyPI).
# The litellm wheel itself is downloaded with --require-hashes (the manylinux x86_64 wheel's
# sha256 below), then installed from that file (--no-deps) after the requirements of litellm
# and of its `proxy` extra, read from the wheel, certifi's floor relaxed (see install()); those
# come from PyPI as pip resolves them (the install log and `pip freeze` keep the versions).
# Environment: LITELLM_VERSION (1.106.10; changing it needs LITELLM_SHA256 too),
# INSTALL_TIMEOUT (900 s).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PEERS="$ROOT/build/peers"
VENV="$PEERS/litellm-venv"
VERSION=${LITELLM_VERSION:-1.106.10}
SHA256=${LITELLM_SHA256:-7714b34e1a1483a034cca3929702b3e7bf646026e2cc3b358bc2d9e2b6402fce}
LOG="$PEERS/litellm-install.log"
WHEELS="$PEERS/litellm-wheel"

log() { printf '[litellm] %s\n' "$*" >&2; }

installed() {
    [[ -x "$VENV/bin/litellm" ]] &&
        [[ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("litellm"))' \
            2>/dev/null)" == "$VERSION" ]]
}

install() {
    case "$VERSION" in
        1.107.*) log "refusing litellm $VERSION: the 1.107 releases were compromised"; exit 1 ;;
    esac
    if installed; then
        log "already installed: litellm $VERSION in $VENV"
        return
    fi
    local start=$SECONDS
    mkdir -p "$PEERS" "$WHEELS"
    [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
    log "downloading litellm==$VERSION (wheel, sha256 pinned) into $WHEELS"
    local req="$WHEELS/requirements.txt"
    printf 'litellm==%s --hash=sha256:%s\n' "$VERSION" "$SHA256" >"$req"
    "$VENV/bin/pip" download --quiet --progress-bar off --no-deps --only-binary litellm \
        --require-hashes -r "$req" -d "$WHEELS" >"$LOG" 2>&1 ||
        { tail -25 "$LOG" >&2; exit 1; }
    local wheel
    wheel=$(ls "$WHEELS"/litellm-"$VERSION"-*.whl)
    echo "$SHA256  $wheel" | sha256sum -c --quiet -
    # The wheel's own requirements (and the proxy extra's), with one relaxed: certifi. 1.109.1
    # and 1.106.10 both ask for certifi>=2026.10.19, which the package index reachable here
    # does not have (its newest is 2026.10.18): `pip install litellm[proxy]` finds no
    # solution. A CA bundle a day older changes nothing for a proxy that only talks to
    # 127.0.0.1. litellm itself then goes in with --no-deps.
    "$VENV/bin/python" - "$wheel" >"$WHEELS/deps.txt" <<'PY'
import sys
import zipfile

from pip._vendor.packaging.requirements import Requirement

with zipfile.ZipFile(sys.argv[1]) as wheel:
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    lines = wheel.read(meta).decode().splitlines()
for line in lines:
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.marker and not any(req.marker.evaluate({"extra": e}) for e in ("", "proxy")):
        continue
    req.marker = None
    if req.name == "certifi":
        req.specifier = type(req.specifier)("")
    print(req)
PY
    log "installing $wheel with the proxy extra's requirements into $VENV (log: $LOG)"
    if ! timeout "${INSTALL_TIMEOUT:-900}" "$VENV/bin/pip" install --progress-bar off \
        -r "$WHEELS/deps.txt" >>"$LOG" 2>&1 ||
        ! "$VENV/bin/pip" install --progress-bar off --no-deps "$wheel" >>"$LOG" 2>&1; then
        log "install failed after $((SECONDS - start)) s; last lines of $LOG:"
        tail -25 "$LOG" >&2
        exit 1
    fi
    installed || { log "litellm $VERSION not found in $VENV after the install"; exit 1; }
    log "installed in $((SECONDS - start)) s"
}

serve() {
    local config=${1:?usage: litellm.sh serve CONFIG PORT [extra litellm args]}
    local port=${2:?usage: litellm.sh serve CONFIG PORT [extra litellm args]}
    shift 2
    installed || { log "not installed: run bench/peers/litellm.sh first"; exit 1; }
    log "serving $config on 127.0.0.1:$port"
    # Offline: no telemetry (a no-op flag in this version), and every file it would fetch
    # from GitHub (model cost map, Anthropic beta headers, blog posts, policy templates,
    # auto-router presets) taken from the copy bundled with the package; no Hugging Face.
    LITELLM_TELEMETRY=False LITELLM_LOCAL_MODEL_COST_MAP=True \
        LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS=True LITELLM_LOCAL_BLOG_POSTS=True \
        LITELLM_LOCAL_POLICY_TEMPLATES=True LITELLM_LOCAL_AUTOROUTER_PRESETS=True \
        HF_HUB_OFFLINE=1 NO_DOCS=True NO_REDOC=True \
        exec "$VENV/bin/litellm" --config "$config" --host 127.0.0.1 --port "$port" "$@"
}

case "${1:-install}" in
    install) install ;;
    serve) shift; serve "$@" ;;
    *) echo "usage: $0 [install] | serve CONFIG PORT [ARGS]" >&2; exit 2 ;;
esac
