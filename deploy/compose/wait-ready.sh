#!/bin/sh
# Wait until the stack answers /readyz through the proxy (at most 300 s); print how long.
set -eu
url="http://127.0.0.1:${PARLEY_PORT:-8080}/readyz"
start=$(date +%s)
while ! curl -fsS -o /dev/null "$url" 2>/dev/null; do
  if [ $(( $(date +%s) - start )) -ge 300 ]; then
    echo "not ready after 300 s: $url" >&2
    exit 1
  fi
  sleep 1
done
echo "ready in $(( $(date +%s) - start )) s: http://127.0.0.1:${PARLEY_PORT:-8080}/"
