#!/usr/bin/env bash
# infra/with-services.sh CMD [ARGS...]
#
# Runs CMD with MariaDB and Kafka up, then stops the services this script
# started (ones already running, or given by MYSQL_DSN / KAFKA_BROKERS, are
# left alone). Used by `make test` and `make bench`. CMD's exit status wins.
set -euo pipefail

INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
started=()

stop_started() {
  local s
  for s in "${started[@]}"; do
    "$INFRA_DIR/$s.sh" down >/dev/null 2>&1 || echo "warning: could not stop $s" >&2
  done
}
trap stop_started EXIT

for s in mariadb kafka; do
  [[ $s == mariadb && -n "${MYSQL_DSN:-}" ]] && { echo "mariadb: using MYSQL_DSN"; continue; }
  [[ $s == kafka && -n "${KAFKA_BROKERS:-}" ]] && { echo "kafka: using KAFKA_BROKERS ($KAFKA_BROKERS)"; continue; }
  if "$INFRA_DIR/$s.sh" status >/dev/null 2>&1; then
    "$INFRA_DIR/$s.sh" status
  else
    "$INFRA_DIR/$s.sh" up
    started+=("$s")
  fi
done

set +e
"$@"
rc=$?
set -e
exit $rc
