#!/usr/bin/env bash
# infra/sam-cli.sh — prints the path of the SAM CLI that infra/lint-template.sh
# pins, installing it into the same virtualenv (.local/venv) when missing.
# Used by infra/sam-test.sh and infra/sam-local.sh.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${MESH_STATE_DIR:-$ROOT/.local}"
VENV="$STATE/venv"
# One pin for the whole repository: lint-template.sh's.
SAM_VERSION=$(sed -n 's/^SAM_VERSION="\(.*\)"$/\1/p' "$ROOT/infra/lint-template.sh")
[[ -n $SAM_VERSION ]] || { echo "sam-cli: no SAM_VERSION in infra/lint-template.sh" >&2; exit 1; }
if [[ ! -f $VENV/.installed-$SAM_VERSION ]]; then
  mkdir -p "$STATE"
  exec 9>"$STATE/venv.lock"
  flock 9
  if [[ ! -f $VENV/.installed-$SAM_VERSION ]]; then
    echo "sam-cli: installing aws-sam-cli $SAM_VERSION into $VENV (first run only, about a minute)…" >&2
    rm -rf "$VENV"
    python3 -m venv "$VENV" || { echo "cannot create a virtualenv: install python3-venv" >&2; exit 1; }
    # Bounded, as every install step of infra/: pip's own timeouts are per
    # read, and a trickling mirror could hold it for ever.
    timeout --kill-after=10 900 "$VENV/bin/pip" install -q --disable-pip-version-check "aws-sam-cli==$SAM_VERSION" >"$STATE/venv-install.log" 2>&1 ||
      { echo "pip install of aws-sam-cli $SAM_VERSION failed or took over 15 minutes: $(tail -2 "$STATE/venv-install.log" | tr '\n' ' ')" >&2; exit 1; }
    touch "$VENV/.installed-$SAM_VERSION"
  fi
fi
echo "$VENV/bin/sam"
