#!/usr/bin/env bash
# infra/sam-local.sh api | invoke <dir> [event] — the stock SAM CLI on the
# private Podman engine (infra/podman.sh up, run first):
#
#   api              sam build, then sam local start-api on 127.0.0.1:$MESH_SAM_PORT
#                    (3000) with warm containers (make sam-api);
#   invoke DIR EVENT sam build of that one function, then sam local invoke with
#                    EVENT (make invoke FN=… when Podman is up).
#
# Functions get .local/sam-env.json (infra/podman.sh writes it): the local
# MariaDB through the bridge, meshlocal's keys. The build is for the host's
# architecture (template.yaml says arm64 for AWS) from a derived template
# under .local/sam; SAM runs without AWS credentials and without the mesh's
# variables of this shell (SAM would give them to the functions).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${MESH_STATE_DIR:-$ROOT/.local}"
DIR="$STATE/sam"
cd "$ROOT"

status=$(infra/podman.sh status) || { echo "Podman is not up: run infra/podman.sh up" >&2; exit 1; }
DOCKER_HOST=$(sed -n 's/^DOCKER_HOST=//p' <<<"$status")
ARCH=$(sed -n 's/^MESH_SAM_ARCH=//p' <<<"$status")
SAM=$(infra/sam-cli.sh)
mkdir -p "$DIR"
go run ./cmd/samlocal template -arch "$ARCH" -out "$DIR/template.yaml"

PORT="${MESH_SAM_PORT:-3000}"
for v in $(compgen -e); do
  case $v in AWS_* | MESH_* | KAFKA_* | MYSQL_DSN | GOARCH) unset "$v" ;; esac
done
# A one-function sam build writes no build graph: LAMBDA_ARCH tells the
# Makefile's rule the architecture.
export DOCKER_HOST SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION=us-east-1 LAMBDA_ARCH="$ARCH"
export AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_CONFIG_FILE=/dev/null
common=(--config-file "$ROOT/samconfig.toml" --env-vars "$STATE/sam-env.json" --skip-pull-image)

case "${1:-}" in
  api)
    "$SAM" build --config-file "$ROOT/samconfig.toml" --template-file "$DIR/template.yaml" --build-dir "$DIR/build"
    exec "$SAM" local start-api "${common[@]}" --template-file "$DIR/build/template.yaml" \
      --warm-containers LAZY --host 127.0.0.1 --port "$PORT"
    ;;
  invoke)
    fn="${2:?usage: $0 invoke <dir under functions/> [event]}"
    event="${3:-events/$fn.json}"
    id=""
    for l in $(grep -oE '^  [A-Za-z0-9]+Function:$' template.yaml | tr -d ' :'); do
      [[ $(sed -E 's/Function$//; s/([a-z0-9])([A-Z])/\1-\2/g' <<<"$l" | tr 'A-Z' 'a-z') == "$fn" ]] && id=$l
    done
    [[ -n $id ]] || { echo "no function of template.yaml lives in functions/$fn" >&2; exit 2; }
    "$SAM" build --config-file "$ROOT/samconfig.toml" --template-file "$DIR/template.yaml" --build-dir "$DIR/build-invoke" "$id"
    exec "$SAM" local invoke "${common[@]}" --template-file "$DIR/build-invoke/template.yaml" --event "$event" "$id"
    ;;
  *) echo "usage: $0 api | invoke <dir> [event]" >&2; exit 2 ;;
esac
