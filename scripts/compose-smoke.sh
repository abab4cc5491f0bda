#!/usr/bin/env bash
# `make compose-smoke`: start docker-compose.yml for real on this machine (podman as the engine,
# Docker Compose v2 as the client), drive it with docker-compose.loadgen.yml, check the result
# end to end, then `down -v` and check that nothing is left. docs/deploy.md ("The compose smoke").
#
#   scripts/compose-smoke.sh            install what is missing, build, run every check, clean up
#   scripts/compose-smoke.sh --check    exit 0 when podman can run containers here, else print why
#   scripts/compose-smoke.sh --keep     leave the stack running after the checks (debugging)
#
# Nothing the project ships is changed: the same compose files, .env, healthchecks and security
# options; infra/compose/docker-compose.smoke.yml only swaps the two third-party images no
# registry here can serve (Kafka, Jaeger) for local stand-ins built from the same jars and binary
# the local stack uses. Host ports are free ones picked at start, so the shared local stack
# (Kafka 9092, Jaeger 16686/4317, kube-apiserver) is never touched.
# Caches (outside git, reused when present): $BORG_CACHE/compose-smoke (Debian root filesystem
# tarball, the compose binary, containers.conf) and podman's image store (built images).
# Settings (env): SMOKE_TIMEOUT (seconds for each wait, default 300), SMOKE_LOADGEN_S (replay
# length, default 40), SMOKE_LOG_LINES (log lines shown on a failure, default 40).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
export BORG_CACHE="${BORG_CACHE:-$HOME/.cache/borg-orchestrator}"
cache="$BORG_CACHE/compose-smoke"
timeout_s="${SMOKE_TIMEOUT:-300}"
log_lines="${SMOKE_LOG_LINES:-40}"
keep=0
mode=run
for arg in "$@"; do
  case "$arg" in
    --keep) keep=1 ;;
    --check) mode=check ;;
    *) echo "usage: $0 [--check|--keep]" >&2; exit 2 ;;
  esac
done

compose_version=v2.40.3
compose_bin="$cache/bin/docker-compose-$compose_version"
base_image=localhost/borg-smoke/python:3.11-bookworm
kafka_version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' infra/kafka/pom.xml)"
kafka_image="localhost/borg-smoke/kafka:$kafka_version"
jaeger_image=localhost/borg-smoke/jaeger:2.13.0
kube_image=localhost/borg-smoke/kube:1.36
project=borg-smoke
files=(-f docker-compose.yml -f infra/compose/docker-compose.smoke.yml)
loadgen_files=("${files[@]}" -f docker-compose.loadgen.yml)
# podman reads only this file: runc (crun cannot run here: cgroups in hybrid mode), no default
# ulimits (setrlimit is refused in this sandbox), cgroupfs and file events (no systemd).
export CONTAINERS_CONF="$cache/containers.conf"
socket_dir="$cache/run"
export DOCKER_HOST="unix://$socket_dir/podman.sock"

t0=$(date +%s.%N)
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
say() { printf '%s\n' "$*"; }
step_start=0
begin() { step_start=$(now); printf '%-40s' "$1"; }
done_step() { printf ' ok %6s s  %s\n' "$(elapsed "$step_start")" "${1:-}"; }
fail() { printf '\nFAIL: %s\n' "$*" >&2; exit 1; }

# ----------------------------------------------------------------- can podman run here?
install_packages() {
  local need=()
  command -v podman >/dev/null || need+=(podman)
  command -v runc >/dev/null || need+=(runc)
  command -v debootstrap >/dev/null || need+=(debootstrap)
  ((${#need[@]})) || return 0
  [[ $(id -u) -eq 0 ]] || { say "missing packages ${need[*]} and not root"; return 1; }
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
}

write_containers_conf() {
  mkdir -p "$cache"
  cat > "$cache/containers.conf.tmp" <<'EOF'
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
  mv "$cache/containers.conf.tmp" "$cache/containers.conf"
}

# Prints why not and fails when containers cannot run here (no root, no apt, no kernel support).
can_run() {
  [[ "$(uname -s)" == Linux ]] || { say "not Linux"; return 1; }
  [[ $(id -u) -eq 0 ]] || { say "needs root (rootful podman)"; return 1; }
  command -v apt-get >/dev/null || command -v podman >/dev/null || { say "no podman and no apt-get"; return 1; }
  install_packages || { say "cannot install podman, runc, debootstrap"; return 1; }
  write_containers_conf
  local out
  out="$(podman info --format '{{.Host.OCIRuntime.Name}}' 2>&1)" \
    || { say "podman cannot start here: ${out##*$'\n'}"; return 1; }
}

# ----------------------------------------------------------------- tools
build_compose() {
  [[ -x "$compose_bin" ]] && return 0
  command -v go >/dev/null || fail "go is needed to build Docker Compose $compose_version (Go module proxy)"
  # `go install …@version` refuses a module whose go.mod has exclude directives, so the module
  # is built as the main module from its downloaded source.
  local src; src="$(go mod download -json "github.com/docker/compose/v2@$compose_version" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$src" ]] || fail "go mod download github.com/docker/compose/v2@$compose_version"
  rm -rf "$cache/compose-src" && cp -r "$src" "$cache/compose-src" && chmod -R u+w "$cache/compose-src"
  mkdir -p "$cache/bin"
  (cd "$cache/compose-src" && nice -n 10 go build -p "${BORG_GO_JOBS:-2}" -trimpath \
    -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$compose_version" \
    -o "$compose_bin.tmp" ./cmd)
  mv "$compose_bin.tmp" "$compose_bin"
  rm -rf "$cache/compose-src"
}

service_pid=""
start_service() {
  mkdir -p "$socket_dir"
  if [[ -S "$socket_dir/podman.sock" ]] && curl -fsS -m 2 --unix-socket "$socket_dir/podman.sock" \
      http://d/_ping >/dev/null 2>&1; then
    return 0
  fi
  rm -f "$socket_dir/podman.sock"
  podman system service --time=0 "$DOCKER_HOST" > "$socket_dir/service.log" 2>&1 &
  service_pid=$!
  for _ in $(seq 50); do
    curl -fsS -m 2 --unix-socket "$socket_dir/podman.sock" http://d/_ping >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  fail "podman system service did not answer on $DOCKER_HOST ($(tail -3 "$socket_dir/service.log"))"
}

# ----------------------------------------------------------------- images
# The local stand-in for python:3.11-slim-bookworm: Debian bookworm's Python 3.11 from debootstrap,
# at /usr/local/bin/python like the official image, with this host's extra CA certificates (an
# intercepting egress proxy here; pip inside the image build must trust it as the host does).
base_stamp() {
  { echo "bookworm minbase python3 python3-venv python3-pip python3-dev ca-certificates v1"
    cat /usr/local/share/ca-certificates/*.crt 2>/dev/null || true; } | sha256sum | cut -c1-12
}

build_base() {
  local stamp tar rootfs
  stamp="$(base_stamp)"
  tar="$cache/bookworm-python-$stamp.tar"
  if podman image exists "$base_image" \
      && [[ "$(podman image inspect --format '{{index .Labels "borg.smoke.stamp"}}' "$base_image" 2>/dev/null)" == "$stamp" ]]; then
    return 0
  fi
  if [[ ! -f "$tar" ]]; then
    rootfs="$cache/rootfs-$stamp"
    rm -rf "$rootfs"
    nice -n 10 debootstrap --variant=minbase \
      --include=python3,python3-venv,python3-pip,python3-dev,ca-certificates \
      bookworm "$rootfs" http://deb.debian.org/debian > "$cache/debootstrap.log" 2>&1 \
      || fail "debootstrap (log: $cache/debootstrap.log)"
    ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python"
    ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python3"
    # the official image's Python is not the distribution's: pip may install into it
    rm -f "$rootfs"/usr/lib/python3.*/EXTERNALLY-MANAGED
    if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
      cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
      chroot "$rootfs" update-ca-certificates >/dev/null 2>&1
    fi
    chroot "$rootfs" apt-get clean
    rm -rf "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" --numeric-owner -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
    rm -rf "$rootfs"
    find "$cache" -maxdepth 1 -name 'bookworm-python-*.tar' ! -name "$(basename "$tar")" -delete
  fi
  podman import -q --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change "LABEL borg.smoke.stamp=$stamp" --change 'CMD ["python3"]' \
    "$tar" "$base_image" >/dev/null
}

# podman's layer cache makes each build a no-op when nothing it copies changed.
build_kafka() {
  local ctx="$cache/ctx-kafka"
  bash infra/kafka/fetch.sh >/dev/null
  local libs; libs="$BORG_CACHE/kafka-$kafka_version-$(sha256sum infra/kafka/pom.xml | cut -c1-12)/libs"
  rm -rf "$ctx" && mkdir -p "$ctx/libs"
  cp -r infra/compose/kafka/. "$ctx/"
  cp -l "$libs"/*.jar "$ctx/libs/" 2>/dev/null || cp "$libs"/*.jar "$ctx/libs/"
  nice -n 10 podman build --build-arg "BASE_IMAGE=$base_image" -t "$kafka_image" "$ctx" > "$cache/build-kafka.log" 2>&1 \
    || { tail -20 "$cache/build-kafka.log" >&2; fail "kafka stand-in image (log: $cache/build-kafka.log)"; }
}

build_jaeger() {
  local ctx="$cache/ctx-jaeger" version
  version="$(awk '$1 == "github.com/jaegertracing/jaeger" && $2 ~ /^v/ {print $2; exit}' infra/jaeger/go.mod)"
  bash infra/jaeger/jaeger.sh build >/dev/null
  rm -rf "$ctx" && mkdir -p "$ctx"
  cp infra/compose/jaeger/Containerfile "$ctx/"
  cp -l "$BORG_CACHE/bin/jaeger-$version" "$ctx/jaeger" 2>/dev/null || cp "$BORG_CACHE/bin/jaeger-$version" "$ctx/jaeger"
  nice -n 10 podman build --build-arg "BASE_IMAGE=$base_image" -t "$jaeger_image" "$ctx" > "$cache/build-jaeger.log" 2>&1 \
    || { tail -20 "$cache/build-jaeger.log" >&2; fail "jaeger stand-in image (log: $cache/build-jaeger.log)"; }
}

# The referee's cluster (dry-run needs an API server): etcd + kube-apiserver from infra/kube.
build_kube() {
  local ctx="$cache/ctx-kube" etcd apiserver
  bash infra/kube/kube.sh build >/dev/null
  etcd="$(ls "$BORG_CACHE"/bin/etcd-v* | sort -V | tail -1)"
  apiserver="$(ls "$BORG_CACHE"/bin/kube-apiserver-v* | sort -V | tail -1)"
  rm -rf "$ctx" && mkdir -p "$ctx"
  cp infra/compose/kube/Containerfile infra/compose/kube/run "$ctx/"
  cp -l "$etcd" "$ctx/etcd" 2>/dev/null || cp "$etcd" "$ctx/etcd"
  cp -l "$apiserver" "$ctx/kube-apiserver" 2>/dev/null || cp "$apiserver" "$ctx/kube-apiserver"
  nice -n 10 podman build --build-arg "BASE_IMAGE=$base_image" -t "$kube_image" "$ctx" > "$cache/build-kube.log" 2>&1 \
    || { tail -20 "$cache/build-kube.log" >&2; fail "kube stand-in image (log: $cache/build-kube.log)"; }
}

# What an operator writes for an existing cluster (docs/deploy.md): embedded credentials, an
# address the containers reach (the stand-in's service name on the compose network).
write_kubeconfig() {
  local token; token="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  export SMOKE_KUBE_TOKEN="$token"
  export KUBECONFIG_FILE="$cache/kubeconfig"
  cat > "$KUBECONFIG_FILE" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: smoke
  cluster:
    server: https://kube:6443
    insecure-skip-tls-verify: true
users:
- name: smoke
  user:
    token: $token
contexts:
- name: smoke
  context: {cluster: smoke, user: smoke}
current-context: smoke
KCFG
  # read by the referee's UID 10001 through a read-only bind mount
  chmod 0644 "$KUBECONFIG_FILE"
}

build_project() {
  # The Dockerfile as shipped, in two passes: podman 4.3 (buildah 1.28) cannot bind-mount a build
  # stage that its layer cache satisfied ("RUN --mount=type=bind,from=build" finds no files;
  # containers/podman#16281, fixed in later podman), which is every build after the first. So the
  # `build` stage is built first as an image (pass 1, the unchanged file), then the file is built
  # with that one mount naming the image instead of the stage (pass 2; the only difference, checked).
  local derived="$cache/Dockerfile.podman43" wheels=localhost/borg-smoke/wheels:smoke
  nice -n 10 podman build --target build --build-arg "PYTHON_IMAGE=$base_image" -t "$wheels" \
    -f Dockerfile . > "$cache/build.log" 2>&1 \
    || { tail -30 "$cache/build.log" >&2; fail "project image build, stage build (log: $cache/build.log)"; }
  sed "s|--mount=type=bind,from=build,|--mount=type=bind,from=$wheels,|" Dockerfile > "$derived"
  [[ "$(diff Dockerfile "$derived" | grep -c '^>')" == 1 ]] \
    || fail "Dockerfile: expected exactly one 'RUN --mount=type=bind,from=build,' (see $derived)"
  nice -n 10 podman build --build-arg "PYTHON_IMAGE=$base_image" \
    -t "localhost/${BORG_IMAGE}:${BORG_VERSION}" -f "$derived" . >> "$cache/build.log" 2>&1 \
    || { tail -30 "$cache/build.log" >&2; fail "project image build (log: $cache/build.log)"; }
}

# ----------------------------------------------------------------- health
# podman schedules healthchecks with systemd timers; without systemd nothing runs them, so this
# loop does, every 10 s: the compose file's interval, so `retries` and `start_period` (which podman
# applies itself) mean what they mean under Docker.
health_pid=""
health_loop() {
  local id
  while true; do
    while read -r id; do
      podman healthcheck run "$id" >/dev/null 2>&1 &
    done < <(states | awk '$2 == "running" && $3 != "none" { print $1 }')
    sleep 10
  done
}

# name state health (state: running, exited, …; health: healthy, unhealthy, starting or none)
states() {
  local ids
  ids="$(podman ps -aq --filter "label=com.docker.compose.project=$project")"
  [[ -n "$ids" ]] || return 0
  # shellcheck disable=SC2086
  podman inspect --format '{{.Name}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}' $ids \
    | awk '{ print $1, $2, ($3 == "" ? "none" : $3) }'
}

cleanup() {
  local rc=$?
  [[ -n "$health_pid" ]] && kill "$health_pid" 2>/dev/null
  if (( ! keep )); then
    compose "${loadgen_files[@]}" down -v --remove-orphans --timeout 20 >/dev/null 2>&1 || true
    [[ -n "$service_pid" ]] && kill "$service_pid" 2>/dev/null
  fi
  wait 2>/dev/null || true
  return $rc
}

compose() { "$compose_bin" --project-name "$project" "$@"; }

# Names the failing container(s) and shows their last log lines.
show_failures() {
  local name state health
  while read -r name state health; do
    if [[ "${1:-}" == all || ( "$state" != running && "$state" != exited ) || "$health" == unhealthy \
        || "$health" == starting \
        || ( "$state" == exited && "$(podman inspect --format '{{.State.ExitCode}}' "$name")" != 0 ) ]]; then
      say "---- $name: state=$state health=$health; last $log_lines log lines"
      podman logs --tail "$log_lines" "$name" 2>&1 | sed 's/^/    /'
    fi
  done < <(states)
}

# outside the ephemeral range: between this probe and podman's bind an outgoing connection could take a port from it
free_port() { .venv/bin/python -c 'from loadtests.procs import free_port; print(free_port())'; }

leftovers() {
  local label="label=com.docker.compose.project=$project"
  { podman ps -a -q --filter "$label"; podman network ls -q --filter "$label"
    podman volume ls -q --filter "$label"; } | wc -l
}

# ----------------------------------------------------------------- main
if [[ "$mode" == check ]]; then
  can_run
  exit $?
fi

export BORG_IMAGE=borg-orchestrator BORG_VERSION=smoke PYTHON_IMAGE="$base_image"
export COMPOSE_PROJECT_NAME=$project
KAFKA_HOST_PORT="$(free_port)"; JAEGER_UI_PORT="$(free_port)"
EXTENDER_HOST_PORT="$(free_port)"; DASHBOARD_HOST_PORT="$(free_port)"
export KAFKA_HOST_PORT JAEGER_UI_PORT EXTENDER_HOST_PORT DASHBOARD_HOST_PORT
export LOADGEN_DURATION_S="${SMOKE_LOADGEN_S:-40}"
export SMOKE_KAFKA_IMAGE="$kafka_image" SMOKE_JAEGER_IMAGE="$jaeger_image" SMOKE_KUBE_IMAGE="$kube_image"
write_kubeconfig

say "== compose smoke: project $project, ports kafka $KAFKA_HOST_PORT jaeger $JAEGER_UI_PORT dashboard $DASHBOARD_HOST_PORT extender $EXTENDER_HOST_PORT"
begin "podman, runc, debootstrap";        why="$(can_run)" || fail "$why"; done_step "$(podman --version)"
begin "docker compose $compose_version";  build_compose; done_step "$compose_bin"
begin "podman API socket";                start_service; done_step "$DOCKER_HOST"
trap cleanup EXIT
begin "base image (debootstrap bookworm)"; build_base; done_step "$base_image"
begin "kafka stand-in image";             build_kafka; done_step "$kafka_image"
begin "jaeger stand-in image";            build_jaeger; done_step "$jaeger_image"
begin "kube-apiserver stand-in image";     build_kube; done_step "$kube_image"
begin "project image (Dockerfile)";       build_project; done_step "localhost/$BORG_IMAGE:$BORG_VERSION"
if [[ "$(leftovers)" != 0 ]]; then
  compose "${loadgen_files[@]}" down -v --remove-orphans --timeout 10 >/dev/null 2>&1 || true
fi

health_loop & health_pid=$!
begin "up --wait (every container healthy)"
if ! compose "${files[@]}" up -d --wait --wait-timeout "$timeout_s" > "$cache/up.log" 2>&1; then
  printf '\n'; tail -20 "$cache/up.log" >&2; show_failures; fail "docker compose up"
fi
done_step "$(states | awk '$3 == "healthy"' | wc -l) healthy"
podman ps -a --filter "label=com.docker.compose.project=$project" --format '    {{.Names}}\t{{.Status}}'

begin "loadgen (${LOADGEN_DURATION_S} s replay) started"
# --no-deps: its dependencies are up and healthy (checked just above). Without it, adding the overlay
# file made compose recreate kafka, jaeger and four stages (75–100 s), and the services it did not
# recreate kept exporting to the old Jaeger container's address: the decision's trace never arrived.
if ! compose "${loadgen_files[@]}" up -d --no-deps loadgen > "$cache/loadgen.log" 2>&1; then
  printf '\n'; tail -20 "$cache/loadgen.log" >&2; show_failures; fail "loadgen"
fi
done_step

say "end-to-end checks (each up to ${timeout_s} s):"
checks_start=$(now)
if ! .venv/bin/python infra/compose/smoke_checks.py --bootstrap "127.0.0.1:$KAFKA_HOST_PORT" \
    --jaeger "http://127.0.0.1:$JAEGER_UI_PORT" --dashboard "http://127.0.0.1:$DASHBOARD_HOST_PORT" \
    --timeout "$timeout_s" | tee "$cache/checks.log"; then
  show_failures all; fail "end-to-end checks"
fi
grep -q '^DECISION_ID=' "$cache/checks.log" || { show_failures all; fail "end-to-end checks"; }
say "checks done in $(elapsed "$checks_start") s"
begin "every container still healthy"
bad="$(states | awk '$1 !~ /topic-init|loadgen/ && ($2 != "running" || $3 != "healthy")')"
[[ -z "$bad" ]] || { printf '\n%s\n' "$bad"; show_failures; fail "containers not healthy after the run"; }
done_step

if (( keep )); then
  say "stack left running (--keep): DOCKER_HOST=$DOCKER_HOST $compose_bin -p $project ${loadgen_files[*]} down -v"
  health_pid=""
  exit 0
fi
kill "$health_pid" 2>/dev/null; wait "$health_pid" 2>/dev/null || true; health_pid=""
begin "down -v"
compose "${loadgen_files[@]}" down -v --remove-orphans --timeout 20 > "$cache/down.log" 2>&1 \
  || { tail -20 "$cache/down.log" >&2; fail "docker compose down -v"; }
done_step
begin "nothing left (containers, networks, volumes)"
left="$(leftovers)"
[[ "$left" == 0 ]] || fail "$left containers/networks/volumes of $project left after down -v"
done_step
say "$(sed -n 's/^DECISION_ID=/decision id seen: /p' "$cache/checks.log")"
say "compose smoke passed in $(elapsed "$t0") s"
