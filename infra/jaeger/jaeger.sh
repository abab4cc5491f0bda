#!/usr/bin/env bash
# Jaeger v2 for local runs and tests, built from the Go module proxy and run in
# the background with infra/jaeger/config.yaml (memory storage, loopback only).
#
#   jaeger.sh build    build the pinned version into the cache (skipped when present)
#   jaeger.sh start    build if needed, start, wait until the query API answers
#   jaeger.sh stop     SIGTERM, bounded wait, then SIGKILL
#   jaeger.sh status   one line "jaeger  URL  healthy|down"; exit 0 healthy, 3 down
#
# The version is the one pinned in infra/jaeger/go.mod. Binaries go to
# $BORG_CACHE/bin (default ~/.cache/borg-orchestrator/bin), logs and the pid
# file to $BORG_STATE/jaeger (default $BORG_CACHE/state/jaeger).
# Environment: BORG_GO_JOBS (go build -p, default 2), JAEGER_START_TIMEOUT
# (seconds, default 60), JAEGER_STOP_TIMEOUT (seconds, default 15).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${BORG_CACHE:-$HOME/.cache/borg-orchestrator}"
state="${BORG_STATE:-$cache/state}"
run_dir="$state/jaeger"
log="$run_dir/jaeger.log"
pid_file="$run_dir/jaeger.pid"
config="$here/config.yaml"
query_url="http://127.0.0.1:16686"
ready_url="$query_url/api/services"

die() {
  echo "jaeger: error: $*" >&2
  exit 1
}

need() {
  command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH ($2)"
}

module_version() {
  local v
  v="$(awk '$1 == "github.com/jaegertracing/jaeger" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")"
  [[ -n "$v" ]] || die "cannot read the pinned version from $here/go.mod"
  printf '%s\n' "$v"
}

version="$(module_version)"
binary="$cache/bin/jaeger-$version"

# Prints the pid of our running Jaeger (from the pid file), or fails.
running_pid() {
  local pid exe
  [[ -f "$pid_file" ]] || return 1
  pid="$(<"$pid_file")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null || true)"
  [[ "$(basename "${exe% (deleted)}")" == jaeger-* ]] || return 1
  printf '%s\n' "$pid"
}

healthy() {
  curl -fsS -m 2 -o /dev/null "$ready_url" 2>/dev/null
}

log_tail() {
  if [[ -f "$log" ]]; then
    echo "---- last lines of $log ----" >&2
    tail -n 15 "$log" >&2
    echo "----" >&2
  fi
}

cmd_build() {
  if [[ -x "$binary" ]]; then
    echo "jaeger $version: built ($binary)"
    return 0
  fi
  need go "install Go >= 1.24 to build Jaeger"
  mkdir -p "$cache/bin"
  exec 8>"$cache/bin/.build.lock"
  flock 8 # one build at a time on this machine (shared with kube.sh)
  if [[ -x "$binary" ]]; then
    echo "jaeger $version: built ($binary)"
    return 0
  fi
  echo "jaeger $version: building from the Go module proxy (first time only, ~5-15 min on 2 cores plus downloads)"
  local started=$SECONDS tmp="$cache/bin/.jaeger-$version.tmp.$$"
  local pkg="github.com/jaegertracing/jaeger"
  if ! (cd "$here" && CGO_ENABLED=0 go build -p "${BORG_GO_JOBS:-2}" -trimpath \
    -ldflags "-s -w -X $pkg/internal/version.latestVersion=$version" \
    -o "$tmp" "$pkg/cmd/jaeger"); then
    rm -f "$tmp"
    die "go build of $pkg/cmd/jaeger@$version failed (see the compiler output above)"
  fi
  mv -f "$tmp" "$binary"
  echo "jaeger $version: built in $((SECONDS - started))s -> $binary"
}

cmd_start() {
  cmd_build
  exec 8>&- # release the build lock
  need curl "used for the readiness check"
  mkdir -p "$run_dir"
  exec 9>"$run_dir/.lock"
  flock 9 # concurrent starts/stops wait for each other
  local pid
  if pid="$(running_pid)"; then
    if healthy; then
      echo "jaeger: already running (pid $pid) at $query_url"
      return 0
    fi
    echo "jaeger: pid $pid is running, waiting for it to answer"
  elif healthy; then
    echo "jaeger: something already answers at $ready_url (not started by this script); using it"
    return 0
  else
    echo "jaeger $version: starting (log $log)"
    printf '\n==== %s start %s\n' "$(date -Is)" "$version" >>"$log"
    setsid "$binary" --config "file:$config" >>"$log" 2>&1 </dev/null 8>&- 9>&- &
    pid=$!
    echo "$pid" >"$pid_file"
  fi
  local timeout="${JAEGER_START_TIMEOUT:-60}" deadline=$((SECONDS + ${JAEGER_START_TIMEOUT:-60}))
  until healthy; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$pid_file"
      log_tail
      die "process $pid exited during startup (log: $log)"
    fi
    if ((SECONDS >= deadline)); then
      log_tail
      die "$ready_url did not answer within ${timeout}s (pid $pid still running; log: $log)"
    fi
    sleep 0.5
  done
  echo "jaeger: healthy at $query_url (OTLP gRPC 127.0.0.1:4317, OTLP HTTP 127.0.0.1:4318)"
}

cmd_stop() {
  mkdir -p "$run_dir"
  exec 9>"$run_dir/.lock"
  flock 9
  local pid
  if ! pid="$(running_pid)"; then
    rm -f "$pid_file"
    echo "jaeger: not running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + ${JAEGER_STOP_TIMEOUT:-15}))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "jaeger: pid $pid ignored SIGTERM for ${JAEGER_STOP_TIMEOUT:-15}s, sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "$pid_file"
  echo "jaeger: stopped (pid $pid)"
}

cmd_status() {
  if healthy; then
    echo "jaeger  $query_url  healthy"
    return 0
  fi
  echo "jaeger  $query_url  down"
  return 3
}

usage() {
  echo "usage: $(basename "$0") {build|start|stop|status}" >&2
  exit 2
}

[[ $# -eq 1 ]] || usage
case "$1" in
  build) cmd_build ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) usage ;;
esac
