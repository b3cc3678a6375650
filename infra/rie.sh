#!/usr/bin/env bash
# infra/rie.sh FUNCTION_DIR EVENT_FILE
#
# Invokes one function the way Lambda runs it: builds its bootstrap with the
# Lambda build flags for this machine's architecture, runs it under the AWS
# Lambda Runtime Interface Emulator (aws-lambda-rie, installed by this script
# with `go install` into .local/bin at a pinned version), POSTs EVENT_FILE to
# the emulator's invocations endpoint, prints the function's response on
# stdout and stops the emulator. The emulator's and the function's logs go to
# stderr.
#
#   infra/rie.sh functions/health events/health.json
#
# The function gets the caller's environment, with defaults for the local
# services: MYSQL_DSN (the private MariaDB, infra/mariadb.sh dsn),
# KAFKA_BROKERS (127.0.0.1:29092), and fresh random MESH_ADMIN_KEY,
# MESH_JWT_KEYS and MESH_INBOX_MASTER_KEY (set your own to call routes that
# need a token). RIE_TIMEOUT is the function timeout in seconds (default 30).
#
# Exit status: 0 when the function answered, 1 when it failed (build, init or
# handler error), 2 for a usage error.
set -euo pipefail

INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "$INFRA_DIR")"
STATE_DIR="${MESH_STATE_DIR:-$REPO_DIR/.local}"
[[ "$STATE_DIR" == /* ]] || STATE_DIR="$PWD/$STATE_DIR"
BIN_DIR="$STATE_DIR/bin"
GO="${GO:-go}"

# The emulator is a Go module; this pseudo-version is the one the Go module
# proxy serves (its tagged releases are not served as modules).
RIE_MODULE=github.com/aws/aws-lambda-runtime-interface-emulator
RIE_VERSION=v0.0.0-20261030222936-bef5c4ba774d
RIE="$BIN_DIR/aws-lambda-rie"

die() { echo "rie: $*" >&2; exit 1; }

[[ $# -eq 2 ]] || { echo "usage: $0 FUNCTION_DIR EVENT_FILE   (e.g. $0 functions/health events/health.json)" >&2; exit 2; }
fn_dir="${1%/}"
event="$2"
[[ -f "$fn_dir/main.go" ]] || { echo "rie: $fn_dir/main.go not found (FUNCTION_DIR is a directory under functions/)" >&2; exit 2; }
[[ -f "$event" ]] || { echo "rie: event file $event not found" >&2; exit 2; }
command -v "$GO" >/dev/null || die "the go command is not on PATH; install Go 1.26 or later"
command -v curl >/dev/null || die "curl is missing; install it (apt-get install curl)"

# ensure_rie installs the pinned emulator unless that exact version is there.
ensure_rie() {
  if [[ -x "$RIE" ]] && "$GO" version -m "$RIE" 2>/dev/null | grep -q "mod[[:space:]]*$RIE_MODULE[[:space:]]*$RIE_VERSION"; then
    return 0
  fi
  echo "rie: installing aws-lambda-rie $RIE_VERSION into $BIN_DIR" >&2
  mkdir -p "$BIN_DIR"
  (cd "$REPO_DIR" && GOBIN="$BIN_DIR" CGO_ENABLED=0 "$GO" install "$RIE_MODULE/cmd/aws-lambda-rie@$RIE_VERSION") >&2 ||
    die "could not install $RIE_MODULE@$RIE_VERSION with go install (is the Go module proxy reachable? GOPROXY=$("$GO" env GOPROXY))"
}

# free_port prints a TCP port on 127.0.0.1 that nothing listens on. It picks
# below Linux's ephemeral range (32768+), where busy test traffic holds
# outgoing sockets that would make the bind fail.
free_port() {
  local p i
  for i in $(seq 1 50); do
    p=$((20000 + RANDOM % 12000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  die "no free port found on 127.0.0.1"
}

ensure_rie

work="$(mktemp -d "${TMPDIR:-/tmp}/mesh-rie.XXXXXX")"
rie_pid=""
cleanup() {
  if [[ -n "$rie_pid" ]]; then
    # The emulator runs in its own process group with the bootstrap it started.
    kill -TERM -- "-$rie_pid" 2>/dev/null || true
    wait "$rie_pid" 2>/dev/null || true
  fi
  # The emulator's log holds the function's own output: show it on stderr.
  [[ -f "$work/rie.err" ]] && cat "$work/rie.err" >&2
  rm -rf "$work"
}
trap cleanup EXIT

# The deploy flags of the Makefile, for the architecture this machine runs.
arch="$("$GO" env GOHOSTARCH)"
echo "rie: building $fn_dir for linux/$arch" >&2
(cd "$REPO_DIR" && CGO_ENABLED=0 GOOS=linux GOARCH="$arch" "$GO" build -tags lambda.norpc -trimpath -ldflags='-s -w' \
  -o "$work/bootstrap" "./${fn_dir#"$REPO_DIR"/}") >&2 || die "build of $fn_dir failed"

# Local defaults; anything the caller set wins.
rand_b64() { head -c 32 /dev/urandom | base64 | tr -d '\n'; }
# A setting given as a Secrets Manager ARN (MESH_DB_SECRET_ARN,
# MESH_<NAME>_SECRET_ARN; e.g. served by moto) gets no local default.
[[ -n "${MESH_DB_SECRET_ARN:-}" ]] || export MYSQL_DSN="${MYSQL_DSN:-$("$INFRA_DIR/mariadb.sh" dsn)}"
export KAFKA_BROKERS="${KAFKA_BROKERS:-127.0.0.1:29092}"
[[ -n "${MESH_ADMIN_KEY_SECRET_ARN:-}" ]] || export MESH_ADMIN_KEY="${MESH_ADMIN_KEY:-local-$(rand_b64 | tr -dc 'A-Za-z0-9' | head -c 32)}"
[[ -n "${MESH_JWT_KEYS_SECRET_ARN:-}" ]] || export MESH_JWT_KEYS="${MESH_JWT_KEYS:-local:$(rand_b64)}"
[[ -n "${MESH_INBOX_MASTER_KEY_SECRET_ARN:-}" ]] || export MESH_INBOX_MASTER_KEY="${MESH_INBOX_MASTER_KEY:-$(rand_b64)}"
timeout="${RIE_TIMEOUT:-30}"
export AWS_LAMBDA_FUNCTION_TIMEOUT="$timeout"
export AWS_LAMBDA_FUNCTION_NAME="${AWS_LAMBDA_FUNCTION_NAME:-$(basename "$fn_dir")}"
export AWS_REGION="${AWS_REGION:-eu-west-1}"

# A port found free can still be taken before rie binds it: try a few times.
up=""
for attempt in 1 2 3 4 5; do
  api_port="$(free_port)"
  rapid_port="$(free_port)"
  while [[ "$rapid_port" == "$api_port" ]]; do rapid_port="$(free_port)"; done

  # setsid: a process group of its own, so cleanup stops the bootstrap too.
  (cd "$work" && exec setsid "$RIE" \
    --runtime-interface-emulator-address "127.0.0.1:$api_port" \
    --runtime-api-address "127.0.0.1:$rapid_port" \
    --log-level "${RIE_LOG_LEVEL:-warn}" \
    ./bootstrap) >"$work/rie.err" 2>&1 &
  rie_pid=$!

  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$api_port") 2>/dev/null; then up=1; break; fi
    kill -0 "$rie_pid" 2>/dev/null || break
    sleep 0.1
  done
  [[ -n "$up" ]] && break
  kill -0 "$rie_pid" 2>/dev/null && kill -- "-$rie_pid" 2>/dev/null || true
  if grep -q "address already in use" "$work/rie.err"; then
    echo "rie: port taken before aws-lambda-rie bound it (attempt $attempt); trying others" >&2
    continue
  fi
  die "aws-lambda-rie exited before listening"
done
[[ -n "$up" ]] || die "aws-lambda-rie did not listen on 127.0.0.1:$api_port within 10 s"

echo "rie: invoking $(basename "$fn_dir") with $event" >&2
status="$(curl -sS -o "$work/response" -D "$work/headers" -w '%{http_code}' --max-time "$((timeout + 10))" \
  -X POST --data-binary @"$event" "http://127.0.0.1:$api_port/2015-03-31/functions/function/invocations")" ||
  die "the invocation request failed"
cat "$work/response"
echo

# A function error comes back as 200 with an errorType body (Lambda's
# X-Amz-Function-Error is not always set by the emulator).
if [[ "$status" != 200 ]] || grep -qi '^x-amz-function-error:' "$work/headers" ||
  grep -q '"errorType"' "$work/response"; then
  die "the function failed (HTTP $status from the emulator)"
fi
