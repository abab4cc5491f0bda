#!/usr/bin/env bash
# Local single-node Apache Kafka (KRaft) for development, tests and `make run`.
#   kafka.sh fetch    jars from Maven Central into the cache (idempotent)
#   kafka.sh start    format storage once, start the broker, wait until ready (idempotent)
#   kafka.sh stop     stop cleanly (SIGTERM, bounded wait, then SIGKILL)
#   kafka.sh status   one line; exit 0 healthy, 3 down
#   kafka.sh classpath  print the broker classpath (used by benchmarks for Kafka's own perf tools)
#   kafka.sh data-dir   print the data directory the broker was last configured with
# Settings (env): BORG_CACHE, BORG_STATE, KAFKA_DATA_DIR, KAFKA_PORT (9092),
# KAFKA_CONTROLLER_PORT (9093), KAFKA_HEAP (1g).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${BORG_CACHE:-$HOME/.cache/borg-orchestrator}"
state="${BORG_STATE:-$cache/state}"
port="${KAFKA_PORT:-9092}"
cport="${KAFKA_CONTROLLER_PORT:-9093}"
heap="${KAFKA_HEAP:-1g}"
run_dir="$state/kafka"
data_dir="${KAFKA_DATA_DIR:-$run_dir/data}"
pid_file="$run_dir/kafka.pid"
log_dir="$run_dir/logs"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")"
stamp="$(sha256sum "$here/pom.xml" | cut -c1-12)"
libs="$cache/kafka-$version-$stamp/libs"

die() { echo "kafka: $*" >&2; exit 1; }

running_pid() {
  [[ -f "$pid_file" ]] || return 1
  local pid; pid="$(cat "$pid_file")"
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }

cmd_fetch() { "$here/fetch.sh"; }

write_config() {
  mkdir -p "$run_dir" "$data_dir" "$log_dir"
  cat > "$run_dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$data_dir
num.partitions=3
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.retention.hours=24
log.segment.bytes=67108864
log.cleaner.backoff.ms=5000
PROPS
}

java_cmd() {
  java "-Xms256m" "-Xmx$heap" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -Djava.awt.headless=true -Dkafka.logs.dir="$log_dir" \
    -Dlog4j2.configurationFile="$here/log4j2.properties" \
    -cp "$libs/*" "$@"
}

cmd_start() {
  if pid="$(running_pid)"; then
    echo "kafka: already running (pid $pid) on 127.0.0.1:$port"
    return 0
  fi
  if port_open; then die "port $port is in use by another process; set KAFKA_PORT or stop it"; fi
  cmd_fetch
  write_config
  if [[ ! -f "$data_dir/meta.properties" ]]; then
    local cluster_id
    cluster_id="$(java_cmd kafka.tools.StorageTool random-uuid)"
    echo "kafka: formatting KRaft storage in $data_dir (cluster $cluster_id)"
    java_cmd kafka.tools.StorageTool format --standalone -t "$cluster_id" \
      -c "$run_dir/server.properties" > "$log_dir/format.log" 2>&1 \
      || { tail -20 "$log_dir/format.log" >&2; die "storage format failed"; }
  fi
  echo "kafka: starting $version on 127.0.0.1:$port (data $data_dir, logs $log_dir)"
  nohup setsid java "-Xms256m" "-Xmx$heap" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -Djava.awt.headless=true -Dkafka.logs.dir="$log_dir" \
    -Dlog4j2.configurationFile="$here/log4j2.properties" \
    -cp "$libs/*" kafka.Kafka "$run_dir/server.properties" \
    > "$log_dir/stdout.log" 2>&1 < /dev/null &
  echo $! > "$pid_file"
  local deadline=$((SECONDS + ${KAFKA_START_TIMEOUT:-90}))
  until port_open && grep -q "Kafka Server started" "$log_dir/server.log" 2>/dev/null; do
    if ! running_pid >/dev/null; then
      tail -30 "$log_dir/stdout.log" "$log_dir/server.log" 2>/dev/null >&2 || true
      die "broker exited during start-up (see $log_dir)"
    fi
    if (( SECONDS > deadline )); then
      tail -30 "$log_dir/server.log" >&2 || true
      die "broker not ready after ${KAFKA_START_TIMEOUT:-90}s (see $log_dir)"
    fi
    sleep 0.5
  done
  echo "kafka: ready on 127.0.0.1:$port (pid $(cat "$pid_file"))"
}

cmd_stop() {
  local pid
  if ! pid="$(running_pid)"; then echo "kafka: not running"; rm -f "$pid_file"; return 0; fi
  kill -TERM "$pid"
  local deadline=$((SECONDS + ${KAFKA_STOP_TIMEOUT:-30}))
  while kill -0 "$pid" 2>/dev/null; do
    if (( SECONDS > deadline )); then echo "kafka: SIGTERM timed out, killing"; kill -KILL "$pid" || true; break; fi
    sleep 0.3
  done
  rm -f "$pid_file"
  echo "kafka: stopped"
}

cmd_status() {
  if running_pid >/dev/null && port_open; then
    printf '%-22s %-28s %s\n' kafka "127.0.0.1:$port" healthy; return 0
  fi
  printf '%-22s %-28s %s\n' kafka "127.0.0.1:$port" down; return 3
}

case "${1:-}" in
  fetch) cmd_fetch ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  classpath) echo "$libs/*" ;;
  data-dir)
    [[ -f "$run_dir/server.properties" ]] || die "no broker configured yet ($run_dir/server.properties)"
    sed -n 's/^log\.dirs=//p' "$run_dir/server.properties" ;;
  *) echo "usage: $0 {fetch|start|stop|status|classpath|data-dir}" >&2; exit 2 ;;
esac
