"""How close the native decode step comes to reading its weights at memory speed (issue 19).

    .venv/bin/python bench/native_floor.py [--precisions fp32,int8,int4] [--batches 1,4]
        [--rounds 40]

At one to a few decoding rows a step is bound by reading the weights: every matrix is read
once a step. So the floor of a step is the time to read those same bytes, and the step's
time over that floor says what the step adds (its arithmetic, its barriers, attention). For
each precision this builds a ``BuiltinEngine`` (bundled SmolLM2-135M), prefills ``batch``
sequences, and then alternates, ``--rounds`` times on the engine's own thread kind: (a) one
native decode forward of the batch, (b) one pass of a small C function (compiled here with
the native step's compiler and flags) that sums every byte of the matrices the native step
reads, in the same order and split over the same OpenMP threads. It prints the medians and
(a) ÷ (b): 1.0 would be a step that costs nothing beyond reading its weights. The host's
memory speed drifts minute to minute; the ratio, measured side by side, holds.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from engine_profile import fill
from stacks import cpu

from parley.engines.builtin.engine import BuiltinEngine, BuiltinEngineConfig
from parley.engines.builtin.loader import load_model
from parley.engines.builtin.native import build
from parley.engines.builtin.native.decoder import NativeDecoder
from parley.engines.builtin.precision import Precision
from parley.engines.builtin.threads import on_fresh_thread

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# sums `sizes[i]` bytes at `ptrs[i]`, 128 at a time into two vector accumulators, the chunks
# split statically over the threads as the native step splits its rows (one OpenMP region, a
# barrier a matrix)
SUM_BYTES = r"""
#include <stdint.h>
#include <stddef.h>
typedef uint64_t v8 __attribute__((vector_size(64)));
uint64_t sum_bytes(int count, const unsigned char *const *ptrs, const int64_t *sizes, int threads) {
    uint64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(+:total)
    {
        v8 a = {0}, b = {0};
        for (int m = 0; m < count; m++) {
            const unsigned char *p = ptrs[m];
#pragma omp for schedule(static)
            for (int64_t c = 0; c < sizes[m] / 128; c++) {
                v8 x, y;
                __builtin_memcpy(&x, p + c * 128, 64);
                __builtin_memcpy(&y, p + c * 128 + 64, 64);
                a += x, b += y;
            }
        }
        for (int l = 0; l < 8; l++) total += a[l] + b[l];
    }
    return total;
}
"""


def summer(workdir: Path) -> ctypes.CDLL:
    src, lib = workdir / "sum_bytes.c", workdir / "sum_bytes.so"
    src.write_text(SUM_BYTES)
    cmd = [build.compiler(), *build.flags(), "-o", str(lib), str(src)]
    subprocess.run(cmd, check=True, capture_output=True)
    return ctypes.CDLL(str(lib))


def matrices(native: NativeDecoder) -> list[tuple[int, int]]:
    """(address, bytes) of every matrix the native step reads, in its order."""
    model = native._model
    mats = []
    for i in range(model.num_layers):
        layer = native._layers[i]
        mats += [layer.qkv, layer.o, layer.gate_up, layer.down]
    mats.append(model.lm_head)
    out = []
    for mat in mats:
        per_row = {0: 4 * mat.cols, 1: mat.cols, 2: mat.cols // 2, 3: mat.cols}[mat.kind]
        rows = -(-mat.rows // 4) * 4 if mat.kind == 0 else mat.rows  # fp32 in fours
        out.append((int(mat.w), rows * per_row))
    return out


def measure(precision: str, batch: int, rounds: int, lib: ctypes.CDLL) -> tuple[float, float]:
    engine = BuiltinEngine(
        load_model(), BuiltinEngineConfig(kv_cache_tokens=8192, precision=Precision(precision))
    )
    native = engine.core.runner.model.native
    if not isinstance(native, NativeDecoder):
        raise SystemExit(f"{precision}: no native decode step here")
    mats = matrices(native)
    ptrs = (ctypes.c_void_p * len(mats))(*(a for a, _ in mats))
    sizes = (ctypes.c_int64 * len(mats))(*(n for _, n in mats))
    lib.sum_bytes.restype = ctypes.c_uint64
    threads = torch.get_num_threads()
    result: dict[str, list[float]] = {"step": [], "read": []}

    def run() -> None:
        torch.set_grad_enabled(False)
        fill(engine, batch, 400)
        runner = engine.core.runner
        layout, ids = runner.layout(engine.core.scheduler.schedule().chunks)
        for i in range(rounds + 5):
            for name in ("step", "read") if i % 2 else ("read", "step"):
                start = time.perf_counter()
                if name == "step":
                    native.decode(ids, layout, runner.kv_cache)
                else:
                    lib.sum_bytes(len(mats), ptrs, sizes, threads)
                if i >= 5:
                    result[name].append(time.perf_counter() - start)

    on_fresh_thread(run, name="native-floor")
    return statistics.median(result["step"]), statistics.median(result["read"])


def main() -> None:
    parser = argparse.ArgumentParser(description="the native step against reading its weights")
    parser.add_argument("--precisions", default="fp32,int8,int4")
    parser.add_argument("--batches", default="1,4")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    print(f"CPU: {cpu()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("\n| precision | rows | native step ms | reading its weights ms | step ÷ read |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        lib = summer(Path(tmp))
        for precision in args.precisions.split(","):
            for batch in (int(b) for b in args.batches.split(",")):
                step, read = measure(precision, batch, args.rounds, lib)
                print(
                    f"| {precision} | {batch} | {step * 1e3:.2f} | {read * 1e3:.2f} |"
                    f" {step / read:.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
