#!/usr/bin/env bash
# The structured-generation libraries side by side (issue 42: "measure and say why you
# chose one"): llguidance (parley's), xgrammar (vLLM's default) and outlines-core, each
# compiling the 50 schemas of bench/structured.py for the bundled model's tokenizer and
# computing a token mask at every step of a valid answer. The other two are installed into
# a venv of their own under build/ (never dependencies of parley).
#
#   bench/grammar_libs.sh            # prints the table; writes build/grammar-libs/results.json
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
out="$repo/build/grammar-libs"
mkdir -p "$out"
# the inputs, from parley's own venv: the bundled model's tokenizer and the bench's schemas
"$repo/.venv/bin/python" - "$out" <<'PY'
import json, sys
sys.path.insert(0, "bench")
from pathlib import Path
import torch
from parley.engines.builtin.loader import load_model
from structured import schemas
out = Path(sys.argv[1])
m = load_model(None, dtype=torch.float32)
(out / "tokenizer.json").write_text(m.tokenizer.tokenizer.to_str())
meta = {"vocab_size": m.config.vocab_size, "eos": list(m.tokenizer.eos_token_ids)}
(out / "meta.json").write_text(json.dumps(meta))
(out / "schemas.json").write_text(json.dumps([s for _, s in schemas(50)]))
PY
if [[ ! -x "$out/venv/bin/python" ]]; then
    python3 -m venv "$out/venv"
    "$out/venv/bin/pip" install --quiet --disable-pip-version-check \
        -c "$repo/constraints.txt" torch==2.13.0 tokenizers llguidance jsonschema numpy
    "$out/venv/bin/pip" install --quiet --disable-pip-version-check \
        xgrammar==0.2.8 outlines-core==0.2.14
fi
"$out/venv/bin/python" "$here/grammar_libs.py" "$out"
