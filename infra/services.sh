#!/usr/bin/env bash
# infra/services.sh up|down|status
#
# Starts/stops every local service the tests need (used by `make test` and CI):
# MariaDB first, then Kafka. A service the caller already provides is skipped:
#   MYSQL_DSN set     -> no private MariaDB (tests use that DSN)
#   KAFKA_BROKERS set -> no local Kafka broker (tests use those brokers)
# Exit status: non-zero if any service failed to start (up) or is not up (status).
set -euo pipefail

INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

cmd="${1:-}"
case "$cmd" in
  up | down | status) ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac

rc=0

if [[ -n "${MYSQL_DSN:-}" ]]; then
  echo "mariadb: using MYSQL_DSN"
else
  "$INFRA_DIR/mariadb.sh" "$cmd" || rc=1
  # Starting Kafka after a failed MariaDB would only hide the first error.
  [[ $cmd == up && $rc != 0 ]] && exit 1
fi

if [[ -n "${KAFKA_BROKERS:-}" ]]; then
  echo "kafka: using KAFKA_BROKERS ($KAFKA_BROKERS)"
else
  "$INFRA_DIR/kafka.sh" "$cmd" || rc=1
fi

exit $rc
