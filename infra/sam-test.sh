#!/usr/bin/env bash
# infra/sam-test.sh — the SAM tier of `make test`: the functions as the SAM
# CLI runs them (sam build, sam local start-api, sam local invoke) on the
# private Podman engine of infra/podman.sh, against the tests' MariaDB
# (shared/samlocal's TestSAMTier). Podman is started when it is not up, and
# then stopped again. Where Podman cannot run, the tier fails under CI
# (CI set) with the reason and is skipped elsewhere, as the other services.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

started=0
stop() { if ((started)); then infra/podman.sh down >/dev/null || echo "warning: infra/podman.sh down failed" >&2; fi; }
trap stop EXIT
if ! infra/podman.sh status >/dev/null 2>&1; then
  # Ours from here: a failed up stops what it had started.
  started=1
  # Its progress is shown as it goes (a CI run once stood silent here for an
  # hour), and the whole `up` is bounded.
  log=$(mktemp)
  status=0
  timeout --kill-after=10 1500 infra/podman.sh up 2>&1 | tee "$log" || status=$?
  reason=$(tail -1 "$log")
  rm -f "$log"
  ((status != 124)) || reason="infra/podman.sh up did not finish in 25 minutes; its last words: $reason"
  if ((status != 0)); then
    if [[ -n ${CI:-} ]]; then
      echo "sam tier: FAILED: Podman cannot run on this machine ($reason); under CI the tier must run" >&2
      exit 1
    fi
    echo "sam tier: SKIPPED: Podman cannot run on this machine ($reason); under CI this fails"
    exit 0
  fi
fi

SAM=$(infra/sam-cli.sh)
start=$SECONDS
MESH_SAM_TIER=1 MESH_SAM="$SAM" go test -count=1 -timeout 20m -run '^TestSAMTier$' -v ./shared/samlocal/
echo "sam tier: $((SECONDS - start)) s"
