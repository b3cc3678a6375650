#!/usr/bin/env bash
# infra/aws-tools.sh — makes sure the local stand-ins for AWS tooling are
# installed, with pip, into a private virtualenv (.local/venv-aws; first run
# only, about a minute), and prints that virtualenv's bin directory:
#   checkov              policy checks on both templates (infra/lint-template.sh)
#   cfn-lint-serverless  AWS's serverless rule set, a cfn-lint plugin
#   moto[server]         Secrets Manager and S3 on a local port for tests
# Kept apart from .local/venv (aws-sam-cli pins its own cfn-lint and boto3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${MESH_STATE_DIR:-$ROOT/.local}"
VENV="$STATE/venv-aws"
# Pinned so a new release cannot turn CI red overnight.
PKGS=("checkov==3.3.30" "cfn-lint-serverless==0.3.6" "moto[server]==5.2.5")
STAMP="$VENV/.installed-$(echo "${PKGS[*]}" | md5sum | cut -c1-12)"

command -v python3 >/dev/null || { echo "python3 not found: install python3 and python3-venv" >&2; exit 1; }
# One installer at a time (go test runs packages in parallel).
mkdir -p "$STATE"
exec 9>"$STATE/venv-aws.lock"
flock 9
if [[ ! -f $STAMP ]]; then
  echo "aws-tools: installing ${PKGS[*]} into $VENV (first run only, about a minute)…" >&2
  rm -rf "$VENV"
  python3 -m venv "$VENV" >&2 || { echo "cannot create a virtualenv: install python3-venv" >&2; exit 1; }
  timeout --kill-after=10 900 "$VENV/bin/pip" install -q --disable-pip-version-check "${PKGS[@]}" >"$STATE/venv-aws-install.log" 2>&1 \
    || { echo "pip install failed or took over 15 minutes: $(tail -2 "$STATE/venv-aws-install.log" | tr '\n' ' ')" >&2; exit 1; }
  touch "$STAMP"
fi
echo "$VENV/bin"
