#!/usr/bin/env bash
# infra/a2a-tck-sut.sh — prepares `make run` to be the system under test of the
# A2A TCK (a2aproject/a2a-tck, run by hand; see README "The A2A TCK").
#
#   infra/a2a-tck-sut.sh up      create (or re-key) the agent "tck", befriend it with
#                                alice, publish its card, start its meshd with the
#                                conformance agent; prints A2A_URL and A2A_TOKEN (alice's)
#   infra/a2a-tck-sut.sh down    stop that meshd
#
# It needs a running `make run` (MESH_API_URL, default http://127.0.0.1:8080) and reads
# the admin key and alice's API key from its .local/meshlocal files. Idempotent: `up`
# again re-keys the agent and restarts its meshd. Its state and log: .local/tck/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
API="${MESH_API_URL:-http://127.0.0.1:8080}"
DIR="$ROOT/.local/tck"
PIDFILE="$DIR/meshd.pid"
SUT="${MESH_TCK_AGENT:-tck}"

die() { echo "a2a-tck-sut: $*" >&2; exit 1; }

stop() {
  if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    kill "$(cat "$PIDFILE")"
    for _ in $(seq 50); do kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break; sleep 0.1; done
    echo "a2a-tck-sut: meshd of $SUT stopped"
  fi
  rm -f "$PIDFILE"
}

# json FILE KEY: one string field of a JSON file.
json() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
# field KEY: one string field of the JSON document on stdin ("" if absent or not JSON).
field() { python3 -c '
import json, sys
try:
    print(json.load(sys.stdin).get(sys.argv[1], ""))
except ValueError:
    print("")' "$1"; }

case "${1:-}" in
  down) stop; exit 0 ;;
  up) ;;
  *) echo "usage: infra/a2a-tck-sut.sh up|down" >&2; exit 2 ;;
esac

SECRETS="$ROOT/.local/meshlocal/secrets.json" KEYS="$ROOT/.local/meshlocal/demo-keys.json"
[ -f "$SECRETS" ] && [ -f "$KEYS" ] || die "no $SECRETS or $KEYS: start \`make run\` first"
curl -fsS "$API/v1/health" >/dev/null || die "the mesh does not answer at $API: start \`make run\` first"
ADMIN="$(json "$SECRETS" admin_key)" ALICE_KEY="$(json "$KEYS" alice)"
mkdir -p "$DIR"

echo "[1/4] agent $SUT: created or given a new key"
admin() { curl -fsS -X POST "$API$1" -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' -d "$2"; }
KEY="$(admin /v1/admin/agents "{\"agent_id\":\"$SUT\",\"name\":\"A2A TCK SUT\"}" 2>/dev/null | field api_key || true)"
[ -n "$KEY" ] || KEY="$(admin "/v1/admin/agents/$SUT/keys" '{"revoke_existing":true}' | field api_key)"
[ -n "$KEY" ] || die "could not get an API key for $SUT"

echo "[2/4] $SUT and alice are friends"
admin /v1/admin/friendships "{\"a\":\"alice\",\"b\":\"$SUT\"}" >/dev/null

echo "[3/4] $SUT publishes its card"
oauth() { curl -fsS -X POST "$API/v1/oauth/token" -d grant_type=client_credentials -d "client_id=$1" --data-urlencode "client_secret=$2" | field access_token; }
curl -fsS -X PUT "$API/v1/agents/me/a2a-card" -H "Authorization: Bearer $(oauth "$SUT" "$KEY")" \
  -H 'Content-Type: application/json' \
  -d '{"published":true,"description":"The A2A TCK system under test: meshd a2a-conformance-agent","skills":[{"id":"tck","name":"TCK behaviours","description":"Reacts to the TCK messageId prefixes","tags":["tck"]}]}' >/dev/null

stop
echo "[4/4] $SUT's meshd runs the conformance agent (log $DIR/meshd.log)"
go build -o "$DIR/meshd" ./cmd/meshd
MESH_API_URL="$API" MESH_API_KEY="$KEY" MESH_STATE_DIR="$DIR/state" \
  nohup "$DIR/meshd" run -- "$DIR/meshd" a2a-conformance-agent >"$DIR/meshd.log" 2>&1 &
echo $! >"$PIDFILE"

echo
echo "A2A_URL=$API/a2a/agents/$SUT"
echo "A2A_TOKEN=$(oauth alice "$ALICE_KEY")   # alice's token, valid for 1 h"
