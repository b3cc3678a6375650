#!/usr/bin/env bash
# infra/podman.sh up|down|status — a private Podman engine for the SAM CLI's
# local emulation (`sam local invoke`, `sam local start-api`), on machines
# without Docker. Everything lives under .local/podman:
#
#   up      installs podman and runc from Debian when missing (root), writes a
#           private storage.conf and containers.conf, starts
#           `podman system service` on a private socket, builds from local
#           files the base image SAM asks for, forwards MariaDB to the
#           containers' bridge, and writes .local/sam-env.json (the --env-vars
#           file). A second `up` changes nothing.
#   down    stops the service and the forwarder that `up` started, nothing else.
#   status  prints DOCKER_HOST=unix://… (to export) and the host address the
#           containers reach; exits 1 when the engine is not up.
#
# Settings this machine needs (see issue 21): default_ulimits (root lacks
# CAP_SYS_RESOURCE, and Podman's defaults make the runtime's setrlimit fail),
# runc (crun refuses the hybrid cgroup layout), cgroupfs and a file event
# log (no systemd). SAM must run with --skip-pull-image (no registry) and
# without AWS credentials (with fake ones it retries STS for seconds).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${MESH_STATE_DIR:-$ROOT/.local}"
DIR="$STATE/podman"
SOCK="$DIR/podman.sock"
SERVICE_PID="$DIR/service.pid"
FORWARD_PID="$DIR/forward.pid"
ENV_FILE="$STATE/sam-env.json"

# The image SAM derives its emulation image from (samcli/local/docker/lambda_image.py):
# public.ecr.aws/lambda/provided:al2023-<arch>, to which it adds its own
# aws-lambda-rie. Only the host's architecture: another one would need
# qemu-user-static registered with binfmt_misc.
case "$(uname -m)" in
  x86_64) ARCH=x86_64 ;;
  aarch64) ARCH=arm64 ;;
  *) ARCH="" ;;
esac
BASE_IMAGE="public.ecr.aws/lambda/provided:al2023-$ARCH"

export CONTAINERS_CONF="$DIR/containers.conf" CONTAINERS_STORAGE_CONF="$DIR/storage.conf"

say() { echo "podman: $*"; }
die() { echo "podman: $*" >&2; exit 1; }

# bounded SECONDS CMD...: CMD, killed after SECONDS (status 124). Every
# client call and install step goes through it: a CI run once hung in `up`
# without a word until the job's own limit, an hour later.
bounded() {
  local secs=$1
  shift
  timeout --kill-after=10 "$secs" "$@"
}

# pc ARGS...: a podman client call on our socket, bounded.
pc() { bounded "${PODMAN_CALL_TIMEOUT:-120}" podman --url "unix://$SOCK" "$@"; }

# alive PIDFILE NEEDLE: the process of PIDFILE runs and its command line
# contains NEEDLE (a reused pid is not ours).
alive() {
  local pid
  [[ -f $1 ]] && pid=$(<"$1") && [[ -r /proc/$pid/cmdline ]] &&
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$2"
}

# running PID: PID (a child just started) has not exited. Not alive's
# command-line check: until the child has exec'd, its command line is still
# this script's, and the start loops below took that for an early exit. A
# child that exited is a zombie until waited for, hence the state field.
running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}

# write_if_changed FILE: stdin to FILE only when it differs (up stays a no-op).
write_if_changed() {
  local tmp
  tmp=$(mktemp "$1.XXXX")
  cat >"$tmp"
  if cmp -s "$tmp" "$1" 2>/dev/null; then rm -f "$tmp"; else mv "$tmp" "$1"; say "wrote ${1#"$ROOT"/}"; fi
}

engine_ok() { [[ -S $SOCK ]] && alive "$SERVICE_PID" "$SOCK" && bounded 10 podman --url "unix://$SOCK" version >/dev/null 2>&1; }

install_packages() {
  local missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v runc >/dev/null || missing+=(runc)
  command -v socat >/dev/null || missing+=(socat)
  # Debian's busybox-static: the image's shell must not need a libc.
  dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'install ok installed' || missing+=(busybox-static)
  ((${#missing[@]} == 0)) && return 0
  [[ $(id -u) -eq 0 ]] || die "missing ${missing[*]}: install them (apt-get install ${missing[*]}) or run as root"
  say "installing ${missing[*]} from Debian (first run only)…"
  local status=0
  DEBIAN_FRONTEND=noninteractive bounded 900 apt-get install -y --no-install-recommends "${missing[@]}" >"$DIR/apt.log" 2>&1 ||
    status=$?
  ((status == 124)) && die "apt-get install ${missing[*]} did not finish in 15 minutes: $(tail -2 "$DIR/apt.log" | tr '\n' ' ')"
  ((status == 0)) || die "apt-get install ${missing[*]} failed: $(tail -2 "$DIR/apt.log" | tr '\n' ' ')"
}

write_config() {
  write_if_changed "$DIR/storage.conf" <<EOF
# Written by infra/podman.sh: images and containers of the SAM CLI's local runs.
[storage]
driver = "overlay"
graphroot = "$DIR/storage"
runroot = "$DIR/run"
EOF
  write_if_changed "$DIR/containers.conf" <<EOF
# Written by infra/podman.sh (see the settings at its top).
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$DIR/events.log"
tmp_dir = "$DIR/tmp"
volume_path = "$DIR/volumes"
[network]
network_config_dir = "$DIR/networks"
EOF
}

start_service() {
  engine_ok && return 0
  local attempt pid status deadline why=""
  # A service that exits or does not answer is started again (twice at
  # most), saying how it ended. The failures CI saw were most likely the
  # start race that running() fixes; the retries stay for a slow or
  # unlucky start.
  for attempt in 1 2 3; do
    rm -f "$SOCK"
    say "starting podman system service on $SOCK…"
    setsid podman system service --time=0 "unix://$SOCK" >"$DIR/service.log" 2>&1 </dev/null 9>&- &
    pid=$!
    echo "$pid" >"$SERVICE_PID"
    # A first start on a new store can take tens of seconds. A deadline,
    # not a count: each probe is bounded, but may take its whole bound.
    deadline=$((SECONDS + 60))
    while ((SECONDS < deadline)); do
      engine_ok && return 0
      running "$pid" || break
      sleep 0.2
    done
    if running "$pid"; then
      why="no answer on $SOCK in 60 s; its log ends: $(tail -3 "$DIR/service.log" 2>/dev/null | tr '\n' ' ')"
      # Its whole session (setsid): a child left behind could hold the store's
      # locks, and the next start would wait on them.
      kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
    else
      status=0
      wait "$pid" 2>/dev/null || status=$?
      why="exited with status $status: $(tail -3 "$DIR/service.log" 2>/dev/null | tr '\n' ' ')"
    fi
    say "podman system service did not start (attempt $attempt: $why)"
  done
  die "podman system service did not start ($why); see $DIR/service.log"
}

# The base image from local files: busybox-static (SAM's Dockerfile runs
# mv and chmod), the Lambda directories, /etc/passwd and a CA bundle. A
# label holds the recipe's hash, so a changed recipe rebuilds it.
build_base() {
  local ctx="$DIR/base" recipe hash
  rm -rf "$ctx" && mkdir -p "$ctx"/rootfs/{bin,etc/ssl/certs,var/task,var/runtime,var/rapid,opt,tmp}
  cp /bin/busybox "$ctx/rootfs/bin/busybox"
  for a in sh mv chmod cp ls cat env; do ln -s busybox "$ctx/rootfs/bin/$a"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nsbx_user1051:x:993:990::/home/sbx_user1051:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n' >"$ctx/rootfs/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' >"$ctx/rootfs/etc/group"
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt" 2>/dev/null ||
    die "no CA bundle at /etc/ssl/certs/ca-certificates.crt (apt-get install ca-certificates)"
  recipe='FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin LAMBDA_TASK_ROOT=/var/task LAMBDA_RUNTIME_DIR=/var/runtime
WORKDIR /var/task'
  hash=$( (echo "$recipe"; cd "$ctx" && find rootfs -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16)
  if [[ $(pc image inspect --format '{{index .Labels "org.agentmesh.recipe"}}' "$BASE_IMAGE" 2>/dev/null) == "$hash" ]]; then
    return 0
  fi
  printf '%s\nLABEL org.agentmesh.recipe=%s\n' "$recipe" "$hash" >"$ctx/Containerfile"
  say "building $BASE_IMAGE from local files…"
  PODMAN_CALL_TIMEOUT=600 pc build -q -t "$BASE_IMAGE" "$ctx" >"$DIR/build.log" 2>&1 || die "image build failed (status $?): $(tail -2 "$DIR/build.log" | tr '\n' ' ')"
}

# MariaDB as the tests and meshlocal reach it: MYSQL_DSN's address, else
# infra/mariadb.sh's port.
mariadb_addr() {
  local dsn="${MYSQL_DSN:-}" addr
  if [[ -n $dsn ]]; then
    addr=$(sed -nE 's/.*@tcp\(([^)]*)\).*/\1/p' <<<"$dsn")
    [[ -n $addr ]] || die "MYSQL_DSN has no tcp(host:port) address"
    echo "$addr"
  else
    echo "127.0.0.1:${MESH_MARIADB_PORT:-23306}"
  fi
}

# The containers sit on Podman's bridge (--docker-network host does not give
# host networking on Podman) and reach the host as host.containers.internal,
# the bridge's gateway. A forwarder there relays to MariaDB's address, so
# the server still sees 127.0.0.1 and the mesh@127.0.0.1 grant holds.
host_ip() {
  pc network inspect podman --format '{{range .Subnets}}{{.Gateway}}{{end}}' 2>/dev/null
}

start_forwarder() {
  local gw="$1" target="$2" port="${2##*:}"
  local want="TCP-LISTEN:$port,bind=$gw,reuseaddr,fork"
  alive "$FORWARD_PID" "$want TCP:$target" && return 0
  if alive "$FORWARD_PID" "socat"; then kill "$(<"$FORWARD_PID")" 2>/dev/null || true; fi
  # The bridge appears with the first container; one throwaway run (of the
  # image's own shell: it has no `true`) makes it.
  ip -4 addr show 2>/dev/null | grep -qF "inet $gw/" ||
    PODMAN_CALL_TIMEOUT=300 pc run --rm "$BASE_IMAGE" sh -c : >/dev/null 2>&1 ||
    die "cannot run a container ($(pc run --rm "$BASE_IMAGE" sh -c : 2>&1 | tail -1); the service's log ends: $(tail -3 "$DIR/service.log" 2>/dev/null | tr '\n' ' '))"
  # Started again once when it does not answer, saying why (CI deletes the
  # clone and its logs). The failure a fresh-clone rehearsal saw was most
  # likely the start race that running() fixes.
  local attempt deadline pid why=""
  for attempt in 1 2; do
    setsid socat "$want" "TCP:$target" >"$DIR/forward.log" 2>&1 </dev/null 9>&- &
    pid=$!
    echo "$pid" >"$FORWARD_PID"
    deadline=$((SECONDS + 5))
    while ((SECONDS < deadline)); do
      bounded 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$gw" "$port" 2>/dev/null && { say "MariaDB ($target) reachable from containers at host.containers.internal:$port"; return 0; }
      running "$pid" || break
      sleep 0.1
    done
    if running "$pid"; then
      why="no connection to $gw:$port in 5 s"
      kill "$pid" 2>/dev/null || true
    else
      why="socat exited: $(tail -3 "$DIR/forward.log" 2>/dev/null | tr '\n' ' ')"
    fi
    why="$why; $(ip -4 addr show 2>/dev/null | grep -F "inet $gw/" >/dev/null && echo "$gw is up" || echo "no interface holds $gw")"
    say "the MariaDB forwarder did not start (attempt $attempt: $why)"
  done
  die "the MariaDB forwarder did not start on $gw:$port ($why); see $DIR/forward.log"
}

write_env_file() {
  local port="$1" dsn
  dsn="${MYSQL_DSN:-mesh:mesh@tcp(127.0.0.1:${MESH_MARIADB_PORT:-23306})/mesh?parseTime=true}"
  dsn=$(sed -E "s/@tcp\([^)]*\)/@tcp(host.containers.internal:$port)/" <<<"$dsn")
  local vars
  # meshlocal's keys (make run), so one admin key and one meshd config serve both.
  vars=$(cd "$ROOT" && bounded 600 go run ./cmd/samlocal env -dsn "$dsn" -secrets "$STATE/meshlocal/secrets.json") ||
    die "cannot write $ENV_FILE (go run ./cmd/samlocal env failed)"
  printf '%s\n' "$vars" | write_if_changed "$ENV_FILE"
  chmod 600 "$ENV_FILE"
}

cmd_up() {
  [[ -n $ARCH ]] || die "unsupported host architecture $(uname -m)"
  mkdir -p "$DIR"
  exec 9>"$DIR/lock"
  flock -w 900 9 || die "another infra/podman.sh up has held $DIR/lock for 15 minutes"
  install_packages
  write_config
  start_service
  build_base
  local gw target
  gw=$(host_ip)
  [[ -n $gw ]] || die "no gateway for Podman's default network; see $DIR/service.log"
  target=$(mariadb_addr)
  start_forwarder "$gw" "$target"
  write_env_file "${target##*:}"
  say "up: DOCKER_HOST=unix://$SOCK ($BASE_IMAGE)"
}

cmd_down() {
  local f needle stopped=0
  for f in "$FORWARD_PID:socat" "$SERVICE_PID:$SOCK"; do
    needle="${f#*:}" f="${f%%:*}"
    if alive "$f" "$needle"; then
      kill "$(<"$f")" 2>/dev/null || true
      # Bounded wait for it to exit, so the mounts below are free.
      for _ in $(seq 50); do alive "$f" "$needle" || break; sleep 0.2; done
      stopped=1
    fi
    rm -f "$f"
  done
  rm -f "$SOCK"
  # The engine bind-mounts its overlay store onto itself and leaves it
  # mounted: unmount what lies under our own directory (deepest first), so
  # `rm -rf` of a checkout works. Nothing outside $DIR is touched.
  local m
  while read -r m; do
    [[ $m == "$DIR"/* ]] && bounded 10 umount "$m" 2>/dev/null || true
  done < <(awk '{print $5}' /proc/self/mountinfo | sort -r)
  ((stopped)) && say "stopped the service and forwarder this script started" || say "nothing of ours was running"
}

cmd_status() {
  engine_ok || { echo "podman: not up (infra/podman.sh up)" >&2; exit 1; }
  echo "DOCKER_HOST=unix://$SOCK"
  echo "MESH_PODMAN_HOST_IP=$(host_ip)"
  echo "MESH_SAM_ARCH=$ARCH"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
