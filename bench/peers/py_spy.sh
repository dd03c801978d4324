#!/usr/bin/env bash
# py-spy, the sampling profiler the benchmarks' --profile uses, into build/tools (a venv of
# its own: never a dependency of parley). Usage: bench/peers/py_spy.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TOOLS="$ROOT/build/tools"
[[ -x "$TOOLS/bin/py-spy" ]] && { echo "py-spy: already in $TOOLS"; exit 0; }
python3 -m venv "$TOOLS"
"$TOOLS/bin/pip" install --quiet --disable-pip-version-check py-spy==0.4.1
"$TOOLS/bin/py-spy" --version
