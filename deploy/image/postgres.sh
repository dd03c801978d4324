#!/bin/sh
# Postgres for compose.yaml and the Kubernetes example: the cluster made on first start (user parley, database parley,
# password from POSTGRES_PASSWORD), then the server in the foreground.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  printf '%s\n' "$POSTGRES_PASSWORD" > /tmp/pw
  initdb -U parley --pwfile=/tmp/pw -A scram-sha-256 -D "$PGDATA" >/dev/null
  rm /tmp/pw
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  echo "CREATE DATABASE parley" | postgres --single -D "$PGDATA" postgres >/dev/null
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/tmp
