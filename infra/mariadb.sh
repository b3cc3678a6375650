#!/usr/bin/env bash
# infra/mariadb.sh up|down|status|dsn
#
# A private MariaDB 10.11 server for tests and `make run` (ARCHITECTURE.md §6).
# It never touches the system's MariaDB: its own datadir, socket, pid file and
# log live under $MESH_STATE_DIR/mariadb, it listens on 127.0.0.1 only, and it
# is started with --no-defaults so /etc/mysql/*.cnf cannot change its behaviour.
# The sql_mode is strict and includes ONLY_FULL_GROUP_BY so that SQL which
# passes here also passes on Aurora MySQL 8 (MariaDB's default mode is laxer).
set -euo pipefail

INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "$INFRA_DIR")"
STATE_DIR="${MESH_STATE_DIR:-$REPO_DIR/.local}"
[[ "$STATE_DIR" == /* ]] || STATE_DIR="$PWD/$STATE_DIR"   # absolute, so paths hold from any cwd
DB_DIR="$STATE_DIR/mariadb"
DATA_DIR="$DB_DIR/data"
SOCKET="$DB_DIR/mysqld.sock"
PID_FILE="$DB_DIR/mariadbd.pid"
LOG_FILE="$DB_DIR/mariadbd.log"
PORT="${MESH_MARIADB_PORT:-23306}"
HOST=127.0.0.1

# Same settings as the project documents for Aurora compatibility.
SQL_MODE='ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'

die() { echo "mariadb: $*" >&2; exit 1; }

dsn() { echo "mesh:mesh@tcp($HOST:$PORT)/mesh?parseTime=true"; }

# find_bin NAME: the binary on PATH or in /usr/sbin (not on a normal user's PATH).
find_bin() {
  command -v "$1" 2>/dev/null && return 0
  [[ -x "/usr/sbin/$1" ]] && { echo "/usr/sbin/$1"; return 0; }
  [[ -x "/usr/bin/$1" ]] && { echo "/usr/bin/$1"; return 0; }
  return 1
}

# is_running: the pid in our pid file is alive and is a mariadbd.
# (A stale pid file after a reboot may name an unrelated process.)
is_running() {
  [[ -s "$PID_FILE" ]] || return 1
  local pid; pid="$(cat "$PID_FILE" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  grep -q mariadbd "/proc/$pid/cmdline" 2>/dev/null
}

answers() { "$ADMIN" --no-defaults --socket="$SOCKET" -uroot ping >/dev/null 2>&1; }

where() { echo "mariadb: up on $HOST:$PORT (socket $SOCKET, data $DATA_DIR, log $LOG_FILE)"; }

# install_server: bring in Debian's mariadb-server (10.11 on bookworm) when missing.
install_server() {
  if [[ "$(id -u)" != 0 ]]; then
    echo "mariadbd not found: install mariadb-server 10.11 (apt-get install mariadb-server) or set MYSQL_DSN" >&2
    exit 1
  fi
  echo "mariadb: mariadbd not found, installing mariadb-server from Debian packages (first run only)…"
  # apt-get update only when the package lists don't know the package yet (slow, needs network).
  if ! apt-cache policy mariadb-server 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    apt-get update -qq || die "apt-get update failed; install mariadb-server by hand or set MYSQL_DSN"
  fi
  # The package's postinst would start a system server on port 3306. A temporary
  # policy-rc.d that answers 101 ("action forbidden") stops invoke-rc.d from
  # starting it; we only add one if none exists, and remove only our own.
  local policy=/usr/sbin/policy-rc.d added_policy=0
  if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && added_policy=1
  fi
  local rc=0
  DEBIAN_FRONTEND=noninteractive timeout --kill-after=10 900 apt-get install -y -qq mariadb-server >"$STATE_DIR/mariadb-apt.log" 2>&1 || rc=$?
  [[ $added_policy == 1 ]] && rm -f "$policy"
  [[ $rc == 0 ]] || die "apt-get install mariadb-server failed (exit $rc); see $STATE_DIR/mariadb-apt.log"
  # Belt and braces: if a system server got started anyway, stop and disable it so
  # it takes neither port 3306 nor CPU. Failures are fine (no systemd in containers).
  service mariadb stop >/dev/null 2>&1 || true
  systemctl disable mariadb >/dev/null 2>&1 || true
  update-rc.d mariadb disable >/dev/null 2>&1 || true
}

resolve_bins() {
  MARIADBD="$(find_bin mariadbd)" || { install_server; MARIADBD="$(find_bin mariadbd)" || die "mariadbd still missing after install"; }
  INSTALL_DB="$(find_bin mariadb-install-db)" || die "mariadb-install-db not found: reinstall mariadb-server"
  ADMIN="$(find_bin mariadb-admin)" || die "mariadb-admin not found: install mariadb-client"
  CLIENT="$(find_bin mariadb)" || die "mariadb client not found: install mariadb-client"
}

sql() { "$CLIENT" --no-defaults --socket="$SOCKET" -uroot -e "$1"; }

cmd_up() {
  mkdir -p "$STATE_DIR"
  resolve_bins
  if is_running && answers; then where; return 0; fi
  if is_running; then
    die "a mariadbd (pid $(cat "$PID_FILE")) runs but does not answer on $SOCKET; run '$0 down' and retry, log: $LOG_FILE"
  fi
  # Refuse early with a clear message if someone else holds the port.
  if (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then
    die "port $HOST:$PORT is already in use by another process; set MESH_MARIADB_PORT or stop it"
  fi

  # A tmpdir of its own: mariadbd deletes every "#sql*" file of its tmpdir
  # at start, so a second instance sharing /tmp (a test's private server)
  # would delete the running one's internal temporary tables mid-query.
  mkdir -p "$DB_DIR" "$DATA_DIR" "$DB_DIR/tmp"
  rm -f "$PID_FILE" "$SOCKET"   # leftovers of a crash or reboot

  # Initialise the datadir only once; an existing one keeps its data across restarts.
  if [[ -z "$(ls -A "$DATA_DIR")" ]]; then
    echo "mariadb: initialising $DATA_DIR"
    "$INSTALL_DB" --no-defaults --datadir="$DATA_DIR" --auth-root-authentication-method=normal \
      --skip-test-db --user=root >"$DB_DIR/install-db.log" 2>&1 \
      || die "mariadb-install-db failed; see $DB_DIR/install-db.log"
  fi

  echo "mariadb: starting on $HOST:$PORT"
  # setsid+nohup: the server outlives this script and its terminal/session.
  setsid nohup "$MARIADBD" --no-defaults \
    --datadir="$DATA_DIR" --tmpdir="$DB_DIR/tmp" --socket="$SOCKET" --port="$PORT" --bind-address="$HOST" \
    --user=root --pid-file="$PID_FILE" --log-error="$LOG_FILE" \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci \
    --sql-mode="$SQL_MODE" \
    --innodb-buffer-pool-size=128M --max-connections=500 --skip-name-resolve \
    --innodb-flush-log-at-trx-commit=1 \
    >>"$DB_DIR/mariadbd.out" 2>&1 </dev/null &
  local child=$!

  # Wait up to 30 s for the server to answer on its socket.
  local i
  for ((i = 0; i < 60; i++)); do
    answers && break
    kill -0 "$child" 2>/dev/null || die "mariadbd exited during startup; see: tail -n 30 $LOG_FILE"
    ((i % 10 == 9)) && echo "mariadb: waiting for the server to answer… ($(( (i + 1) / 2 )) s)"
    sleep 0.5
  done
  answers || die "mariadbd did not answer within 30 s; see: tail -n 30 $LOG_FILE"

  # Database and user, idempotently. `mesh\_%` covers the throwaway mesh_test_xxx
  # databases the tests create; PROCESS lets tests read SHOW GLOBAL STATUS.
  # CREATE USER and GRANT OPTION make mesh what Aurora's master user is to
  # the migration: it creates the application user with DML only.
  sql "
    CREATE DATABASE IF NOT EXISTS mesh CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
    CREATE USER IF NOT EXISTS 'mesh'@'127.0.0.1' IDENTIFIED BY 'mesh';
    CREATE USER IF NOT EXISTS 'mesh'@'localhost' IDENTIFIED BY 'mesh';
    GRANT ALL PRIVILEGES ON \`mesh\`.* TO 'mesh'@'127.0.0.1', 'mesh'@'localhost' WITH GRANT OPTION;
    GRANT ALL PRIVILEGES ON \`mesh\\_%\`.* TO 'mesh'@'127.0.0.1', 'mesh'@'localhost' WITH GRANT OPTION;
    GRANT PROCESS, CREATE USER ON *.* TO 'mesh'@'127.0.0.1', 'mesh'@'localhost';
    FLUSH PRIVILEGES;" >>"$DB_DIR/setup.log" 2>&1 \
    || die "creating database/user failed; see $DB_DIR/setup.log and $LOG_FILE"
  # mariadb-install-db also creates anonymous users (''@localhost, ''@<hostname>);
  # drop them, as mysql_secure_installation would, so a wrong user name fails
  # instead of logging in anonymously.
  local host
  for host in $("$CLIENT" --no-defaults --socket="$SOCKET" -uroot -Nse \
      "SELECT Host FROM mysql.global_priv WHERE User='' AND Host<>''"); do
    sql "DROP USER IF EXISTS ''@'$host'" >>"$DB_DIR/setup.log" 2>&1 || true
  done
  where
}

cmd_down() {
  if ! is_running; then
    rm -f "$PID_FILE"
    echo "mariadb: down"
    return 0
  fi
  local pid; pid="$(cat "$PID_FILE")"
  echo "mariadb: stopping (pid $pid)"
  # Clean shutdown via the admin tool if we can; otherwise SIGTERM (also clean for mariadbd).
  local admin; admin="$(find_bin mariadb-admin)" || admin=""
  if [[ -n "$admin" ]]; then
    "$admin" --no-defaults --socket="$SOCKET" -uroot shutdown >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
  else
    kill -TERM "$pid" 2>/dev/null || true
  fi
  local i
  for ((i = 0; i < 60; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "mariadb: still running after 30 s, sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    sleep 1
  fi
  rm -f "$PID_FILE"
  echo "mariadb: down"
}

cmd_status() {
  if is_running; then
    ADMIN="$(find_bin mariadb-admin)" || ADMIN=""
    if [[ -n "$ADMIN" ]] && answers; then where; return 0; fi
    echo "mariadb: process $(cat "$PID_FILE") alive but not answering on $SOCKET (log $LOG_FILE)"
    return 1
  fi
  echo "mariadb: down"
  return 1
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  dsn) dsn ;;
  *) echo "usage: $0 up|down|status|dsn" >&2; exit 2 ;;
esac
