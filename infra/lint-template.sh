#!/usr/bin/env bash
# infra/lint-template.sh — checks template.yaml and infra/aws/platform.yaml
# with cfn-lint, `sam validate --lint`, AWS's serverless rules and checkov,
# then runs `sam build`. The tools are installed with pip into private
# virtualenvs under .local (once; later runs reuse them). No AWS account is
# needed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${MESH_STATE_DIR:-$ROOT/.local}"
VENV="$STATE/venv"
# Pinned so a new release cannot turn CI red overnight. cfn-lint comes with
# aws-sam-cli (sam validate --lint runs it), at the version SAM pins.
SAM_VERSION="1.150.1"

command -v python3 >/dev/null || { echo "python3 not found: install python3 and python3-venv" >&2; exit 1; }
# One installer of that pin into $VENV, shared with the SAM tier (it locks,
# so two callers do not install at once).
"$ROOT/infra/sam-cli.sh" >/dev/null

cd "$ROOT"
# The app stack and the platform stack it deploys onto (docs/deploy.md).
TEMPLATES=(template.yaml infra/aws/platform.yaml)
echo "==> cfn-lint ${TEMPLATES[*]}"
"$VENV/bin/cfn-lint" "${TEMPLATES[@]}"
for t in "${TEMPLATES[@]}"; do
  echo "==> sam validate --lint $t"
  # sam validate needs a region but no credentials.
  AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}" SAM_CLI_TELEMETRY=0 \
    "$VENV/bin/sam" validate --lint --template-file "$t"
done

# checkov and AWS's serverless rules live in their own virtualenv
# (infra/aws-tools.sh): aws-sam-cli pins another cfn-lint.
TOOLS="$("$ROOT/infra/aws-tools.sh")"
echo "==> cfn-lint with the serverless rules (cfn-lint-serverless)"
"$TOOLS/cfn-lint" "${TEMPLATES[@]}" -a cfn_lint_serverless.rules
echo "==> checkov"
# Skipped for every function of template.yaml; the reasons are at the top
# of template.yaml. Every other skip sits on its resource with its reason.
"$TOOLS/checkov" --framework cloudformation --compact --quiet --skip-download \
  --skip-check CKV_AWS_115,CKV_AWS_116,CKV_AWS_173 -f template.yaml
"$TOOLS/checkov" --framework cloudformation --compact --quiet --skip-download -f infra/aws/platform.yaml

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
