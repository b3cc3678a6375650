#!/usr/bin/env bash
# infra/lint-template.sh — validates template.yaml with `sam validate --lint`
# and `cfn-lint`, both installed with pip into a private virtualenv under
# .local/venv (once; later runs reuse it). No AWS account is needed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${MESH_STATE_DIR:-$ROOT/.local}"
VENV="$STATE/venv"
# Pinned so a new release cannot turn CI red overnight. cfn-lint comes with
# aws-sam-cli (sam validate --lint runs it), at the version SAM pins.
SAM_VERSION="1.150.1"
STAMP="$VENV/.installed-$SAM_VERSION"

command -v python3 >/dev/null || { echo "python3 not found: install python3 and python3-venv" >&2; exit 1; }

if [[ ! -f $STAMP ]]; then
  echo "lint: installing aws-sam-cli $SAM_VERSION (with cfn-lint) into $VENV (first run only, about a minute)…"
  rm -rf "$VENV"
  python3 -m venv "$VENV" || { echo "cannot create a virtualenv: install python3-venv" >&2; exit 1; }
  "$VENV/bin/pip" install -q --disable-pip-version-check "aws-sam-cli==$SAM_VERSION" >"$STATE/venv-install.log" 2>&1 \
    || { echo "pip install failed; see $STATE/venv-install.log" >&2; exit 1; }
  touch "$STAMP"
fi

cd "$ROOT"
echo "==> cfn-lint template.yaml"
"$VENV/bin/cfn-lint" template.yaml
echo "==> sam validate --lint"
# sam validate needs a region but no credentials.
AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}" SAM_CLI_TELEMETRY=0 \
  "$VENV/bin/sam" validate --lint --template-file template.yaml

echo "==> sam build (every function, arm64, into $STATE/sam-build)"
# samconfig.toml builds in source: make runs in this checkout, nothing is
# copied or hashed, so .local/ (MariaDB's socket, the venvs) is never read.
rm -rf "$STATE/sam-build"
start=$SECONDS
AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}" SAM_CLI_TELEMETRY=0 \
  "$VENV/bin/sam" build --template-file template.yaml --build-dir "$STATE/sam-build" >"$STATE/sam-build.log" 2>&1 \
  || { tail -30 "$STATE/sam-build.log" >&2; echo "sam build failed; see $STATE/sam-build.log" >&2; exit 1; }
want=$(grep -c 'Type: AWS::Serverless::Function' template.yaml)
got=$(find "$STATE/sam-build" -name bootstrap -type f | wc -l)
[[ $got -eq $want ]] || { echo "sam build produced $got bootstrap binaries for $want functions" >&2; exit 1; }
echo "sam build: $got functions in $((SECONDS - start)) s"
rm -rf "$STATE/sam-build"
