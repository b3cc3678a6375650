#!/usr/bin/env bash
# infra/fuzz-api.sh — fuzzes the HTTP API with schemathesis (a third-party
# property-based API fuzzer) against a private local stack: a fresh database
# on the MariaDB of infra/mariadb.sh (or MYSQL_DSN), embedded Kafka, a free
# port and a private state directory, so it never meets a running `make run`.
# Fails on any 5xx, any status, body, Content-Type or header that openapi.yaml
# does not document, any request openapi.yaml calls valid that the server
# refuses as malformed, and any secured operation that answers without valid
# credentials. `make test` runs it after the Go tests.
#
# schemathesis and PyMySQL (infra/fuzz-requirements.txt) are installed with
# pip into .local/venv-fuzz (once; later runs reuse them). Settings:
# infra/schemathesis.toml;
# MESH_FUZZ_EXAMPLES (examples per operation, default 30), MESH_FUZZ_SEED (1),
# MESH_FUZZ_CHECKS (schemathesis --checks, to explore beyond the gate: "all").
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${MESH_STATE_DIR:-$ROOT/.local}"
# Not lint-template.sh's .local/venv: that one is wiped whenever SAM's pin
# changes. Every package is pinned (schemathesis 4.x, whose CLI and config
# file differ from 3.x, and all it pulls in).
VENV="$STATE/venv-fuzz"
# shellcheck source=infra/pyvenv.sh
source "$ROOT/infra/pyvenv.sh"
pyvenv_install fuzz "$VENV" "$ROOT/infra/fuzz-requirements.txt" 'schemathesis|PyMySQL'

DSN="${MYSQL_DSN:-}"
if [[ -z $DSN ]]; then
  DSN="$("$ROOT/infra/mariadb.sh" dsn)" || { echo "fuzz: no MYSQL_DSN and infra/mariadb.sh dsn failed; run infra/mariadb.sh up" >&2; exit 1; }
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/mesh-fuzz-bin.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
echo "fuzz: building meshlocal"
(cd "$ROOT" && go build -o "$WORK/meshlocal" ./cmd/meshlocal)

mkdir -p "$STATE/fuzz"
"$VENV/bin/python" "$ROOT/infra/fuzz-api.py" --root "$ROOT" --meshlocal "$WORK/meshlocal" --dsn "$DSN" \
  --examples "${MESH_FUZZ_EXAMPLES:-30}" --seed "${MESH_FUZZ_SEED:-1}" \
  --checks "${MESH_FUZZ_CHECKS:-}" --log "$STATE/fuzz/schemathesis.log"
