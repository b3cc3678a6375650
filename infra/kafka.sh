#!/usr/bin/env bash
# infra/kafka.sh up|down|status|brokers|stop-node N [--kill]|start-node N
#
# A real single-node Apache Kafka 4.x broker in KRaft mode (broker+controller in
# one JVM) for the integration tests (ARCHITECTURE.md §6). No distribution
# tarball can be downloaded here, so the jars come from Maven Central through
# infra/kafka/pom.xml, and the broker runs as `java -cp "lib/*" kafka.Kafka`.
# State (jars, config, data, logs, pid) lives under $MESH_STATE_DIR/kafka.
#
# MESH_KAFKA_NODES=3 runs a KRaft cluster instead, as on MSK (issue 19): three
# JVMs, each both broker and controller (a static quorum of three voters), node
# N on MESH_KAFKA_PORT+N-1 and its controller on MESH_KAFKA_CONTROLLER_PORT+N-1
# (default 29192, clear of the brokers), heap <= 384 MiB each, state under
# $MESH_STATE_DIR/kafka-cluster/node-N (the jars stay in $MESH_STATE_DIR/kafka/lib).
# stop-node/start-node stop (SIGKILL with --kill) or start one node of it.
set -euo pipefail

# Keep in step with <kafka.version> in infra/kafka/pom.xml.
KAFKA_VERSION=4.1.1

INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "$INFRA_DIR")"
STATE_DIR="${MESH_STATE_DIR:-$REPO_DIR/.local}"
[[ "$STATE_DIR" == /* ]] || STATE_DIR="$PWD/$STATE_DIR"   # absolute: the broker runs from another cwd
NODES="${MESH_KAFKA_NODES:-1}"
[[ "$NODES" == 1 || "$NODES" == 3 ]] || { echo "kafka: MESH_KAFKA_NODES must be 1 or 3, not '$NODES'" >&2; exit 2; }
# The jars are resolved once, for the single broker and the cluster alike.
LIB_DIR="$STATE_DIR/kafka/lib"
STAMP="$LIB_DIR/.mesh-kafka-stamp"
POM="$INFRA_DIR/kafka/pom.xml"
LOG4J_CONFIG="$INFRA_DIR/kafka/log4j2.properties"
HOST=127.0.0.1
PORT="${MESH_KAFKA_PORT:-29092}"
if ((NODES == 1)); then
  K_DIR="$STATE_DIR/kafka"
  CONTROLLER_PORT="${MESH_KAFKA_CONTROLLER_PORT:-29093}"
else
  K_DIR="$STATE_DIR/kafka-cluster"
  # Not PORT+1: the brokers take PORT..PORT+2.
  CONTROLLER_PORT="${MESH_KAFKA_CONTROLLER_PORT:-$((PORT + 100))}"
  if ((CONTROLLER_PORT < PORT + NODES && PORT < CONTROLLER_PORT + NODES)); then
    echo "kafka: broker ports $PORT.. and controller ports $CONTROLLER_PORT.. overlap; set MESH_KAFKA_CONTROLLER_PORT at least $NODES apart" >&2
    exit 2
  fi
fi
START_TIMEOUT=90

# node_vars N sets the paths and ports of node N. The single broker keeps the
# layout it always had (everything directly in $K_DIR).
node_vars() {
  NODE=$1
  local dir="$K_DIR"
  ((NODES == 1)) || dir="$K_DIR/node-$NODE"
  NODE_DIR="$dir"
  DATA_DIR="$dir/data"
  CONFIG="$dir/server.properties"
  LOG_FILE="$dir/kafka.log"        # written by log4j2 (infra/kafka/log4j2.properties)
  OUT_FILE="$dir/kafka.out"        # JVM stdout/stderr: crashes, JVM warnings
  PID_FILE="$dir/kafka.pid"
  NODE_PORT=$((PORT + NODE - 1))
  NODE_CONTROLLER_PORT=$((CONTROLLER_PORT + NODE - 1))
  # A small heap is plenty for a test broker; G1 keeps pauses short. Three
  # cluster nodes share the machine: 384 MiB each at most.
  local heap=(-Xms256m -Xmx512m)
  ((NODES == 1)) || heap=(-Xms128m -Xmx384m)
  JAVA_OPTS=("${heap[@]}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20
    -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$LOG4J_CONFIG" "-Dkafka.logs.dir=$dir")
}
node_vars 1

die() { echo "kafka: $*" >&2; exit 1; }

# is_running: our pid file names a live JVM running kafka.Kafka with OUR config
# (a stale pid file after a reboot may name an unrelated process).
is_running() {
  [[ -s "$PID_FILE" ]] || return 1
  local pid; pid="$(cat "$PID_FILE" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "kafka.Kafka $CONFIG"
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# started_in_log: the broker logs this once it has joined the quorum, been
# unfenced by the controller (so it has rejoined the cluster) and opened its
# listeners; the port alone opens earlier.
started_in_log() { grep -q 'Kafka Server started' "$LOG_FILE" 2>/dev/null; }

where() {
  if ((NODES == 1)); then
    echo "kafka: up on $HOST:$PORT (controller $HOST:$CONTROLLER_PORT, pid $(cat "$PID_FILE"), data $DATA_DIR, log $LOG_FILE)"
  else
    echo "kafka: node $NODE up on $HOST:$NODE_PORT (controller $HOST:$NODE_CONTROLLER_PORT, pid $(cat "$PID_FILE"), data $DATA_DIR, log $LOG_FILE)"
  fi
}

need_java() {
  command -v java >/dev/null 2>&1 || { echo "java not found: install openjdk-17-jre-headless" >&2; exit 1; }
}

# stamp_value: what the lib dir must have been resolved from (version + POM
# content), so a POM edit or version bump re-resolves and a plain rerun doesn't.
stamp_value() { echo "kafka=$KAFKA_VERSION pom=$(sha256sum "$POM" | cut -d' ' -f1)"; }

resolve_jars() {
  if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(stamp_value)" ]] && compgen -G "$LIB_DIR/kafka_2.13-$KAFKA_VERSION.jar" >/dev/null; then
    return 0
  fi
  command -v mvn >/dev/null 2>&1 || { echo "mvn not found: install maven (apt-get install maven)" >&2; exit 1; }
  echo "kafka: resolving jars from Maven Central (first run only)…"
  # Resolve into a fresh directory and swap it in whole, so that jars of an older
  # version never sit on the classpath next to the new ones.
  mkdir -p "$STATE_DIR/kafka"
  local tmp="$STATE_DIR/kafka/lib.tmp"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  if ! (cd "$INFRA_DIR/kafka" && mvn -q -B -Dstyle.color=never -f "$POM" \
        dependency:copy-dependencies -DoutputDirectory="$tmp") >"$STATE_DIR/kafka/mvn.log" 2>&1; then
    die "resolving jars with Maven failed; see $STATE_DIR/kafka/mvn.log"
  fi
  [[ -f "$tmp/kafka_2.13-$KAFKA_VERSION.jar" ]] \
    || die "kafka_2.13-$KAFKA_VERSION.jar missing after resolution: is KAFKA_VERSION in $0 the same as in $POM?"
  stamp_value >"$tmp/.mesh-kafka-stamp"
  rm -rf "$LIB_DIR"
  mv "$tmp" "$LIB_DIR"
  local jars=("$LIB_DIR"/*.jar)
  echo "kafka: ${#jars[@]} jars in $LIB_DIR"
}

# write_config: regenerated on every start so port settings always apply.
# The single broker is node 1 of a cluster of one.
write_config() {
  local voters="" n isr=1
  for ((n = 1; n <= NODES; n++)); do
    voters+="${voters:+,}$n@$HOST:$((CONTROLLER_PORT + n - 1))"
  done
  # Internal topics: replicated on every node, acknowledged by two when
  # there are several (defaults are replication factor 3).
  ((NODES == 1)) || isr=2
  cat >"$CONFIG" <<PROPS
# Generated by infra/kafka.sh on every start; edit the script, not this file.
# Node $NODE of $NODES: one JVM is both KRaft controller (static quorum of
# $NODES voter(s); of three, losing two loses the quorum) and broker.
process.roles=broker,controller
node.id=$NODE
controller.quorum.voters=$voters
listeners=PLAINTEXT://$HOST:$NODE_PORT,CONTROLLER://$HOST:$NODE_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$HOST:$NODE_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DATA_DIR

num.partitions=1
default.replication.factor=$NODES
# Deliberately 1 even on three nodes: the project sets min.insync.replicas=2
# on its topic itself (kafka.EnsureTopic), which is what must hold on MSK too.
min.insync.replicas=1
offsets.topic.replication.factor=$NODES
transaction.state.log.replication.factor=$NODES
transaction.state.log.min.isr=$isr
share.coordinator.state.topic.replication.factor=$NODES
share.coordinator.state.topic.min.isr=$isr
# The project creates its topic itself with explicit settings, as in MSK;
# a typo'd topic name must fail rather than silently create a topic.
auto.create.topics.enable=false
# Tests start consumer groups often; don't wait 3 s for more members.
group.initial.rebalance.delay.ms=0
PROPS
}

# cluster_id: one id for every node of a cluster (kept beside the nodes).
# A cluster id is 16 random bytes, base64url without padding (22 chars), which
# is what `kafka-storage random-uuid` prints, without a JVM start. Like Kafka's
# Uuid.randomUuid, never one that starts with '-': the StorageTool would read
# it as an option (1 run in 64 failed so).
cluster_id() {
  local f="$K_DIR/cluster.id" id="-"
  if ((NODES > 1)) && [[ -s "$f" ]]; then cat "$f"; return; fi
  while [[ $id == -* ]]; do
    id="$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
  done
  ((NODES == 1)) || echo "$id" >"$f"
  echo "$id"
}

# launch: start the JVM of the current node (node_vars) in the background;
# wait_ready waits for it.
launch() {
  rm -f "$PID_FILE"
  local p
  for p in "$NODE_PORT" "$NODE_CONTROLLER_PORT"; do
    port_open "$p" && die "port $HOST:$p is already in use by another process; stop it or set MESH_KAFKA_PORT / MESH_KAFKA_CONTROLLER_PORT"
  done
  mkdir -p "$NODE_DIR"
  write_config
  mkdir -p "$DATA_DIR"

  # Format the KRaft storage once; meta.properties marks a formatted log dir and
  # reformatting would wipe the cluster's identity (and so its data).
  if [[ ! -f "$DATA_DIR/meta.properties" ]]; then
    local id; id="$(cluster_id)"
    echo "kafka: formatting storage in $DATA_DIR (cluster id $id)"
    # Plain format (no --standalone): the quorum is the static controller.quorum.voters above.
    java "${JAVA_OPTS[@]}" -cp "$LIB_DIR/*" kafka.tools.StorageTool format \
      -t "$id" -c "$CONFIG" >"$NODE_DIR/format.log" 2>&1 \
      || die "formatting storage failed; see $NODE_DIR/format.log"
  fi

  # Keep the previous run's log for post-mortems; readiness is read from a fresh one.
  [[ -f "$LOG_FILE" ]] && mv -f "$LOG_FILE" "$LOG_FILE.prev"
  if ((NODES == 1)); then
    echo "kafka: starting broker $KAFKA_VERSION on $HOST:$PORT"
  else
    echo "kafka: starting node $NODE ($KAFKA_VERSION) on $HOST:$NODE_PORT"
  fi
  # setsid+nohup: the broker outlives this script and its terminal/session.
  # Working dir = node dir so nothing (hs_err files, ...) lands in the repo.
  (cd "$NODE_DIR" && exec setsid nohup java "${JAVA_OPTS[@]}" -cp "$LIB_DIR/*" kafka.Kafka "$CONFIG" \
    >"$OUT_FILE" 2>&1 </dev/null) &
  echo "$!" >"$PID_FILE"
}

# wait_ready T0: the current node's JVM is up and unfenced (it has joined the
# cluster), within START_TIMEOUT.
wait_ready() {
  local pid t0=$1 i
  pid="$(cat "$PID_FILE")"
  for ((i = 1; i <= START_TIMEOUT * 2; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PID_FILE"
      die "node $NODE exited during startup; see: tail -n 40 $LOG_FILE $OUT_FILE"
    fi
    if started_in_log && port_open "$NODE_PORT"; then
      echo "kafka: ready after $((SECONDS - t0)) s"
      where
      return 0
    fi
    ((i % 10 == 0)) && echo "kafka: waiting for node $NODE… ($((i / 2)) s)"
    sleep 0.5
  done
  die "node $NODE not ready within $START_TIMEOUT s (pid $pid still running; '$0 down' stops it); see: tail -n 40 $LOG_FILE"
}

# up_node N: node N already runs (and answers), or it is launched and
# LAUNCHED=1 tells the caller to wait for it.
up_node() {
  node_vars "$1"
  LAUNCHED=0
  if is_running; then
    if port_open "$NODE_PORT"; then where; return 0; fi
    die "node $NODE (pid $(cat "$PID_FILE")) runs but $HOST:$NODE_PORT does not answer; run '$0 down' and retry, log: $LOG_FILE"
  fi
  launch
  LAUNCHED=1
}

cmd_up() {
  need_java
  mkdir -p "$K_DIR"
  resolve_jars
  # Every node is launched before any is waited for: a node of the cluster
  # only becomes ready once a quorum of voters runs.
  local t0=$SECONDS n started=()
  for ((n = 1; n <= NODES; n++)); do
    up_node "$n"
    if ((LAUNCHED)); then started+=("$n"); fi
  done
  for n in "${started[@]}"; do
    node_vars "$n"
    wait_ready "$t0"
  done
}

# stop_node N [--kill]: SIGTERM runs Kafka's shutdown hook: a controlled
# shutdown that moves leadership away and flushes logs, so the next start
# needs no log recovery. --kill is a crash (SIGKILL): none of that.
stop_node() {
  node_vars "$1"
  local sig=TERM name="node $1"
  [[ "${2:-}" == --kill ]] && sig=KILL
  ((NODES == 1)) && name="broker"
  if ! is_running; then
    rm -f "$PID_FILE"
    if ((NODES == 1)); then echo "kafka: down"; else echo "kafka: $name down"; fi
    return 0
  fi
  local pid; pid="$(cat "$PID_FILE")"
  if ((NODES == 1)); then echo "kafka: stopping (pid $pid)"; else echo "kafka: stopping $name (pid $pid, SIG$sig)"; fi
  kill -"$sig" "$pid" 2>/dev/null || true
  local i
  for ((i = 0; i < 60; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "kafka: still running after 30 s, sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
  fi
  rm -f "$PID_FILE"
  if ((NODES == 1)); then echo "kafka: down"; else echo "kafka: $name down"; fi
}

cmd_down() {
  if ((NODES == 1)); then stop_node 1; return; fi
  # All at once: a node stopped last would wait out its controlled shutdown
  # for a quorum the first ones took away.
  local n p rc=0 pids=()
  for ((n = 1; n <= NODES; n++)); do
    stop_node "$n" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

cmd_status() {
  local n rc=0
  for ((n = 1; n <= NODES; n++)); do
    node_vars "$n"
    if is_running && port_open "$NODE_PORT"; then
      where
    elif is_running && ((NODES == 1)); then
      echo "kafka: process $(cat "$PID_FILE") alive but $HOST:$PORT not answering (log $LOG_FILE)"
      rc=1
    elif is_running; then
      echo "kafka: node $NODE starting on $HOST:$NODE_PORT (controller $HOST:$NODE_CONTROLLER_PORT, pid $(cat "$PID_FILE"), not answering yet, log $LOG_FILE)"
      rc=1
    elif ((NODES == 1)); then
      echo "kafka: down"
      rc=1
    else
      echo "kafka: node $NODE down on $HOST:$NODE_PORT (controller $HOST:$NODE_CONTROLLER_PORT, no pid)"
      rc=1
    fi
  done
  return $rc
}

cmd_brokers() {
  local n out=""
  for ((n = 1; n <= NODES; n++)); do out+="${out:+,}$HOST:$((PORT + n - 1))"; done
  echo "$out"
}

# node_arg N: a node of this cluster, else a usage error.
node_arg() {
  ((NODES > 1)) || { echo "kafka: stop-node and start-node need MESH_KAFKA_NODES=3" >&2; exit 2; }
  [[ "${1:-}" =~ ^[0-9]+$ ]] && (($1 >= 1 && $1 <= NODES)) || { echo "kafka: node must be 1..$NODES, not '${1:-}'" >&2; exit 2; }
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  brokers) cmd_brokers ;;
  stop-node)
    node_arg "${2:-}"
    [[ -z "${3:-}" || "${3:-}" == --kill ]] || { echo "usage: $0 stop-node N [--kill]" >&2; exit 2; }
    stop_node "$2" "${3:-}" ;;
  start-node)
    # Returns once the node is unfenced: it has rejoined the cluster.
    node_arg "${2:-}"
    need_java
    resolve_jars
    t0=$SECONDS
    up_node "$2"
    if ((LAUNCHED)); then wait_ready "$t0"; fi ;;
  *) echo "usage: $0 up|down|status|brokers|stop-node N [--kill]|start-node N" >&2; exit 2 ;;
esac
