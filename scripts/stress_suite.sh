#!/usr/bin/env bash
# Runs the whole pytest suite N times in a row with both cores kept busy by `stress --cpu 2`
# beside it (Debian's `stress` package), and prints each run's wall time and result; stops at
# the first failure. Usage: scripts/stress_suite.sh [N] [POSTGRES_URL]
#   N             runs (default 10)
#   POSTGRES_URL  a database of its own (default postgresql://postgres@127.0.0.1:5432/test),
#                 so that no other test run truncates its tables meanwhile (each xdist
#                 worker adds _gwN to its name); WORKERS as in the Makefile (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
url=${2:-postgresql://postgres@127.0.0.1:5432/test}
command -v stress >/dev/null || { echo "needs stress: apt-get install stress" >&2; exit 2; }
mkdir -p build/stress
for i in $(seq "$runs"); do
  stress --cpu 2 >/dev/null 2>&1 &
  hog=$!
  start=$(date +%s)
  set +e
  PARLEY_TEST_POSTGRES_URL=${url/postgresql:/postgresql+asyncpg:} \
    PARLEY_TEST_CHROMIUM=${PARLEY_TEST_CHROMIUM:-/usr/bin/chromium} \
    .venv/bin/pytest -q -p no:cacheprovider -n "${WORKERS:-3}" --durations=25 \
    >"build/stress/run-$i.log" 2>&1
  rc=$?
  set -e
  kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null || true
  pkill -x stress 2>/dev/null || true
  echo "run $i: $(( $(date +%s) - start )) s, $(tail -n 1 "build/stress/run-$i.log")"
  [ "$rc" -eq 0 ] || { echo "run $i failed: build/stress/run-$i.log"; exit 1; }
done
echo "$runs runs passed"
