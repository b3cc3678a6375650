#!/usr/bin/env bash
# infra/a2a-sdk.sh — runs the official A2A Python client, a2a-sdk 1.3.0, against
# a mesh agent: the Go test TestA2ASDK (shared/e2e) boots the local stack with a
# real meshd running the conformance agent, then runs the pytest suite in
# shared/e2e/testdata/a2a_sdk/ with this virtualenv's Python, the card URLs and
# the credentials. `make test` runs it after the Go tests (which skip
# TestA2ASDK: they have no MESH_A2A_SDK_PYTHON).
#
# a2a-sdk, Authlib and pytest (infra/a2a-sdk-requirements.txt, every package
# pinned) are installed with pip into .local/venv-a2a-sdk (once; later runs
# reuse them; a changed list reinstalls). Needs MYSQL_DSN and KAFKA_BROKERS, as
# infra/with-services.sh sets them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${MESH_STATE_DIR:-$ROOT/.local}"
VENV="$STATE/venv-a2a-sdk"
# shellcheck source=infra/pyvenv.sh
source "$ROOT/infra/pyvenv.sh"
pyvenv_install a2a-sdk "$VENV" "$ROOT/infra/a2a-sdk-requirements.txt" 'a2a-sdk|Authlib|pytest'

echo "a2a-sdk: pytest against the local stack and a real meshd (go test -run TestA2ASDK ./shared/e2e/)"
cd "$ROOT"
MESH_A2A_SDK_PYTHON="$VENV/bin/python" exec go test -count=1 -timeout 10m -run '^TestA2ASDK$' -v ./shared/e2e/
