#!/usr/bin/env bash
# Local single-node Apache Kafka (KRaft) for development, tests and `make run`.
#   kafka.sh fetch    jars from Maven Central into the cache (idempotent)
#   kafka.sh start    format storage once, start the broker, wait until ready (idempotent)
#   kafka.sh stop     stop cleanly (SIGTERM, bounded wait, then SIGKILL)
#   kafka.sh status   one line; exit 0 healthy, 3 down
#   kafka.sh classpath  print the broker classpath (used by benchmarks for Kafka's own perf tools)
#   kafka.sh data-dir   print the data directory the broker was last configured with
#   kafka.sh secure-start|secure-stop|secure-status|secure-env
#                     a SECOND, private broker from the same jars with one SASL_SSL listener
#                     (SCRAM-SHA-512/256, self-signed CA) for the Kafka security test; never
#                     touches the broker above. secure-env prints the client's KAFKA_* settings.
# Settings (env): BORG_CACHE, BORG_STATE, KAFKA_DATA_DIR, KAFKA_PORT (9092),
# KAFKA_CONTROLLER_PORT (9093), KAFKA_HEAP (1g); secure broker: KAFKA_SECURE_PORT (19092),
# KAFKA_SECURE_CONTROLLER_PORT (19093), KAFKA_SECURE_HEAP (512m).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${BORG_CACHE:-$HOME/.cache/borg-orchestrator}"
state="${BORG_STATE:-$cache/state}"
port="${KAFKA_PORT:-9092}"
cport="${KAFKA_CONTROLLER_PORT:-9093}"
heap="${KAFKA_HEAP:-1g}"
run_dir="$state/kafka"
data_dir="${KAFKA_DATA_DIR:-$run_dir/data}"
secure=0
if [[ "${1:-}" == secure-* ]]; then
  # Every path and port of the secure broker is its own, so nothing below can reach the shared one.
  secure=1
  port="${KAFKA_SECURE_PORT:-19092}"
  cport="${KAFKA_SECURE_CONTROLLER_PORT:-19093}"
  heap="${KAFKA_SECURE_HEAP:-512m}"
  run_dir="$state/kafka-secure"
  data_dir="$run_dir/data"
fi
tls_dir="$run_dir/tls"
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
# A deleted topic's files go 1 s after the deletion instead of Kafka's 60 s: benches and tests delete
# their namespaces, and a run started right after another paid for removing gigabytes of its logs in
# the middle of its own measurement (docs/performance.md, 2026-11-27 night). Kafka takes this delay
# from the broker's default, not from the topic's file.delete.delay.ms.
log.segment.delete.delay.ms=1000
PROPS
}

java_cmd() {
  java "-Xms256m" "-Xmx$heap" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -Djava.awt.headless=true -Dkafka.logs.dir="$log_dir" \
    -Dlog4j2.configurationFile="$here/log4j2.properties" \
    -cp "$libs/*" "$@"
}

# The secure broker's credentials: a CA and a broker certificate for 127.0.0.1/localhost, and
# random SCRAM passwords for the broker itself (admin) and for clients (borg). Made once, kept
# in the state dir; anything missing is made again (then the storage is formatted afresh,
# since SCRAM credentials are written into it at format time).
secure_credentials() {
  mkdir -p "$tls_dir"
  chmod 700 "$tls_dir"
  if [[ ! -s "$tls_dir/ca.pem" || ! -s "$tls_dir/broker.p12" || ! -s "$tls_dir/client.password" \
        || ! -s "$tls_dir/admin.password" || ! -s "$tls_dir/store.password" ]]; then
    echo "kafka: making a self-signed CA, broker certificate and SCRAM passwords in $tls_dir"
    rm -rf "$data_dir"
    openssl rand -hex 16 > "$tls_dir/store.password"
    openssl rand -hex 16 > "$tls_dir/admin.password"
    openssl rand -hex 16 > "$tls_dir/client.password"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=borg-orchestrator test CA" \
      -keyout "$tls_dir/ca.key" -out "$tls_dir/ca.pem" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
      -keyout "$tls_dir/broker.key" -out "$tls_dir/broker.csr" 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > "$tls_dir/san.ext"
    openssl x509 -req -in "$tls_dir/broker.csr" -CA "$tls_dir/ca.pem" -CAkey "$tls_dir/ca.key" \
      -CAcreateserial -days 3650 -extfile "$tls_dir/san.ext" -out "$tls_dir/broker.pem" 2>/dev/null
    openssl pkcs12 -export -name broker -in "$tls_dir/broker.pem" -inkey "$tls_dir/broker.key" \
      -certfile "$tls_dir/ca.pem" -passout "file:$tls_dir/store.password" -out "$tls_dir/broker.p12"
    chmod 600 "$tls_dir"/*
  fi
}

write_secure_config() {
  mkdir -p "$run_dir" "$data_dir" "$log_dir"
  local store admin
  store="$(cat "$tls_dir/store.password")"
  admin="$(cat "$tls_dir/admin.password")"
  # A plaintext controller listener only (127.0.0.1); clients and the broker itself speak SASL_SSL.
  cat > "$run_dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$cport
listeners=SASL_SSL://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=SASL_SSL://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL
inter.broker.listener.name=SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin";
ssl.keystore.type=PKCS12
ssl.keystore.location=$tls_dir/broker.p12
ssl.keystore.password=$store
ssl.key.password=$store
ssl.truststore.type=PEM
ssl.truststore.location=$tls_dir/ca.pem
ssl.endpoint.identification.algorithm=https
log.dirs=$data_dir
num.partitions=3
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.retention.hours=1
log.segment.bytes=16777216
PROPS
  chmod 600 "$run_dir/server.properties"
}

# SCRAM users exist from the first start: written into the metadata log at format time.
scram_args() {
  local admin client m
  admin="$(cat "$tls_dir/admin.password")"
  client="$(cat "$tls_dir/client.password")"
  for m in SCRAM-SHA-512 SCRAM-SHA-256; do
    printf '%s\n' --add-scram "$m=[name=admin,password=$admin]" --add-scram "$m=[name=borg,password=$client]"
  done
}

cmd_secure_env() {
  cat <<ENV
KAFKA_BOOTSTRAP=127.0.0.1:$port
KAFKA_SECURITY_PROTOCOL=SASL_SSL
KAFKA_SASL_MECHANISM=SCRAM-SHA-512
KAFKA_SASL_USERNAME=borg
KAFKA_SASL_PASSWORD_FILE=$tls_dir/client.password
KAFKA_SSL_CAFILE=$tls_dir/ca.pem
ENV
}

cmd_start() {
  if pid="$(running_pid)"; then
    echo "kafka: already running (pid $pid) on 127.0.0.1:$port"
    return 0
  fi
  if port_open; then die "port $port is in use by another process; set KAFKA_PORT or stop it"; fi
  cmd_fetch
  local extra=()
  if (( secure )); then
    secure_credentials
    write_secure_config
    mapfile -t extra < <(scram_args)
  else
    write_config
  fi
  if [[ ! -f "$data_dir/meta.properties" ]]; then
    local cluster_id
    cluster_id="$(java_cmd kafka.tools.StorageTool random-uuid)"
    echo "kafka: formatting KRaft storage in $data_dir (cluster $cluster_id)"
    java_cmd kafka.tools.StorageTool format --standalone -t "$cluster_id" \
      -c "$run_dir/server.properties" "${extra[@]}" > "$log_dir/format.log" 2>&1 \
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
  local name=kafka
  (( secure )) && name=kafka-secure
  if running_pid >/dev/null && port_open; then
    printf '%-22s %-28s %s\n' "$name" "127.0.0.1:$port" healthy; return 0
  fi
  printf '%-22s %-28s %s\n' "$name" "127.0.0.1:$port" down; return 3
}

case "${1:-}" in
  fetch) cmd_fetch ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  secure-start) cmd_start ;;
  secure-stop) cmd_stop ;;
  secure-status) cmd_status ;;
  secure-env) cmd_secure_env ;;
  classpath) echo "$libs/*" ;;
  data-dir)
    [[ -f "$run_dir/server.properties" ]] || die "no broker configured yet ($run_dir/server.properties)"
    sed -n 's/^log\.dirs=//p' "$run_dir/server.properties" ;;
  *) echo "usage: $0 {fetch|start|stop|status|classpath|data-dir|secure-start|secure-stop|secure-status|secure-env}" >&2
     exit 2 ;;
esac
