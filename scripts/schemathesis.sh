#!/usr/bin/env bash
# Fuzz the running API from its own OpenAPI document with schemathesis, authenticated.
#
#   scripts/schemathesis.sh [SECONDS] [DATABASE_URL]
#
# Starts `parley serve` on a free port (SQLite in a temporary directory unless a database
# URL is given), signs up a user, and runs every schemathesis check over /openapi.json
# except positive_data_acceptance (an opaque cursor or an undeliverable email address is
# schema-valid but rightly refused). Fails on any 5xx, any response that breaks the
# documented schema, status codes, content types or headers.
#
# Two passes share the SECONDS: every operation (two thirds), then the values a client hands
# back (a third): paging cursors, Last-Event-ID (header and query) and Idempotency-Key, sent
# to a real chat and a finished run so that each request reaches its decoder (a made-up id
# stops at 404), half of them drawn from dictionaries of crafted values (cursors holding
# 2^63 or year 1 at +01:00, a tampered real cursor, ids with a superscript digit or past
# 2^64, an id past the end of the stream).
set -euo pipefail
seconds=${1:-60}
database_url=${2:-}
here=$(cd "$(dirname "$0")/.." && pwd)
py=$(realpath -s "${PYTHON:-$here/.venv/bin/python}")
st=$(dirname "$py")/st
work=$(mktemp -d)
port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
args=(serve --data-dir "$work" --port "$port")
[ -n "$database_url" ] && args+=(--database-url "$database_url")
# a fast fake engine, so that every streamed answer ends within moments
PARLEY_ENGINE=fake PARLEY_FAKE_ENGINE__TIME_TO_FIRST_TOKEN_MS=0 PARLEY_FAKE_ENGINE__INTER_TOKEN_LATENCY_MS=0 \
  PARLEY_FAKE_ENGINE__OUTPUT_TOKENS=4 \
  "$py" -m parley "${args[@]}" >"$work/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true; rm -rf "$work"' EXIT
base=http://127.0.0.1:$port
for _ in $(seq 100); do curl -fs "$base/readyz" >/dev/null && break; sleep 0.2; done
json() { "$py" -c "import json,sys; print(json.load(sys.stdin)$1)"; }
signup() {
  curl -fs -X POST "$base/api/auth/signup" -H 'content-type: application/json' \
    -d "{\"email\":\"fuzz-$1-$(date +%s%N)@example.com\",\"password\":\"fuzzing password\"}" |
    json '["token"]'
}
token=$(signup all)
auth=(-H "Authorization: Bearer $token")
# the second pass's own user (the first may end its sessions), with a chat of two messages
# (so a page of one has a next_cursor) and a finished run
values_auth=(-H "Authorization: Bearer $(signup values)")
chat=$(curl -fs -X POST "$base/api/chats" "${values_auth[@]}" -H 'content-type: application/json' \
  -d '{}' | json '["id"]')
run=$(curl -fs -X POST "$base/api/chats/$chat/messages" "${values_auth[@]}" \
  -H 'accept: application/json' -H 'content-type: application/json' -d '{"content":"hello"}' |
  json '["run_id"]')
curl -fs -N "$base/api/runs/$run/events" "${values_auth[@]}" >/dev/null
cursor=$(curl -fs "$base/api/chats/$chat/messages?limit=1" "${values_auth[@]}" |
  json '["next_cursor"]')
"$py" - "$work/values.toml" "$chat" "$run" "$cursor" <<'PY'
import base64, json, sys
path, chat, run, cursor = sys.argv[1:]
def unsigned(*key):
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode().rstrip("=")
cursors = [cursor, cursor[:-2] + ("AA" if not cursor.endswith("AA") else "BB"),
           unsigned(2**63), unsigned(10**30), unsigned(-(2**63) - 1),
           unsigned("0001-01-01T00:00:00+01:00", chat), unsigned("9999-12-31T23:59:59-01:00", chat)]
event_ids = ["\u00b2-0", "0-\u00b2", "99999999999999999999-0", f"{2**64 - 1}-{2**64 - 1}",
             "0-0", "1-0", "0-1", "-0"]
keys = ["k", "k" * 255, "same-key"]
toml = lambda values: "[" + ", ".join(json.dumps(v) for v in values) + "]"
with open(path, "w") as f:
    f.write(f"""
[dictionaries.cursors]
values = {toml(cursors)}
[dictionaries.event_ids]
values = {toml(event_ids)}
[dictionaries.keys]
values = {toml(keys)}

[parameters]
"path.chat_id" = {json.dumps(chat)}
"path.run_id" = {json.dumps(run)}
"query.cursor" = {{ dictionary = "cursors", probability = 0.5 }}
"query.last_event_id" = {{ dictionary = "event_ids", probability = 0.5 }}
"header.Last-Event-ID" = {{ dictionary = "event_ids", probability = 0.5 }}
"header.Idempotency-Key" = {{ dictionary = "keys", probability = 0.3 }}
""")
PY
cd "$work"
status=0
everything=$(( seconds * 2 / 3 ))
# one worker: with two threads, CPython 3.11.7's ast.parse (used by hypothesis to describe
# lambdas) intermittently raises "AST constructor recursion depth mismatch" (gh-106905).
# Not the routes that end the fuzzer's own session (it would test the rest logged out).
"$st" run "$base/openapi.json" "${auth[@]}" \
  --checks all --exclude-checks positive_data_acceptance \
  --exclude-path-regex '^/api/(auth/logout(-all)?|sessions/\{session_id\})$' \
  --max-time "$(( everything > 0 ? everything : 1 ))" --workers 1 --seed 1 || status=$?
values=$(( seconds - everything ))
"$st" --config-file "$work/values.toml" run "$base/openapi.json" "${values_auth[@]}" \
  --checks all --exclude-checks positive_data_acceptance \
  --include-operation-id-regex '^(list_chats|list_messages|send_message|run_events)_' \
  --max-time "$(( values > 0 ? values : 1 ))" --workers 1 --seed 2 || status=$?
if grep -q '" 5[0-9][0-9] ' "$work/serve.log"; then
  echo "server answered 5xx:"; grep '" 5[0-9][0-9] ' "$work/serve.log"; status=1
fi
exit $status
