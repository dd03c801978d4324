#!/bin/sh
# Start deploy/compose.yaml in order: the stores, then `parley migrate` (once), then the api
# and worker containers and the proxy; then wait for /readyz through the proxy.
set -eu
cd "$(dirname "$0")/.."
compose="${COMPOSE:-../build/compose/bin/podman-compose} -f compose.yaml"
$compose up -d postgres redis seaweed
until podman exec parley_postgres_1 pg_isready -q -h 127.0.0.1 -U parley 2>/dev/null; do sleep 1; done
until podman exec parley_redis_1 redis-cli ping >/dev/null 2>&1; do sleep 1; done
$compose run --rm migrate
$compose up -d api1 api2 worker1 worker2 proxy
exec compose/wait-ready.sh
