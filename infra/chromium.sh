#!/usr/bin/env bash
# infra/chromium.sh: install Debian's chromium for the console's browser test
# (ARCHITECTURE.md §6), idempotently, and print the binary's path.
# Exit 0 with the path when chromium is (now) there; exit 1 with one line
# saying why otherwise (not root, apt-get failed). The browser test skips
# outside CI and fails under CI when this script fails.
set -euo pipefail

STATE_DIR="${MESH_STATE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.local}"

find_chromium() {
  local b
  for b in chromium chromium-browser; do
    if command -v "$b" >/dev/null 2>&1; then command -v "$b"; return 0; fi
  done
  return 1
}

if bin="$(find_chromium)"; then echo "$bin"; exit 0; fi
if [[ $(id -u) != 0 ]]; then
  echo "chromium: not installed and not root: install it with apt-get install chromium" >&2
  exit 1
fi
mkdir -p "$STATE_DIR"
# apt-get update only when the package lists don't know chromium yet.
if ! apt-cache show chromium >/dev/null 2>&1; then
  apt-get update -qq >"$STATE_DIR/chromium-apt.log" 2>&1 || { echo "chromium: apt-get update failed; see $STATE_DIR/chromium-apt.log" >&2; exit 1; }
fi
rc=0
DEBIAN_FRONTEND=noninteractive timeout --kill-after=10 900 apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >>"$STATE_DIR/chromium-apt.log" 2>&1 || rc=$?
[[ $rc == 0 ]] || { echo "chromium: apt-get install chromium failed (exit $rc); see $STATE_DIR/chromium-apt.log" >&2; exit 1; }
find_chromium || { echo "chromium: still missing after apt-get install" >&2; exit 1; }
