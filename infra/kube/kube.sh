#!/usr/bin/env bash
# A real Kubernetes control plane for local runs and tests: etcd +
# kube-apiserver + kube-controller-manager + kube-scheduler, plus kwok
# (Kubernetes WithOut Kubelet) standing in for the kubelets of annotated nodes,
# built from the Go module proxy at the versions pinned in infra/kube/go.mod,
# infra/kube/etcd/go.mod and infra/kube/kwok/go.mod, running on 127.0.0.1 only.
#
#   kube.sh build                   build the binaries into the cache (skipped when present)
#   kube.sh start                   PKI + kubeconfigs (once), then etcd, apiserver,
#                                   controller-manager, scheduler; waits for each
#   kube.sh stop                    stop all, in reverse order
#   kube.sh status                  one line per component; exit 0 all healthy, 3 otherwise
#   kube.sh kubeconfig              print the admin kubeconfig path
#   kube.sh start-scheduler [CONFIG]  (re)start kube-scheduler with a KubeSchedulerConfiguration
#   kube.sh stop-scheduler          stop kube-scheduler only
#   kube.sh kubectl ARGS...         run the built kubectl against this cluster
#
# There are no kubelets: Nodes are API objects made by hand (give them
# status.allocatable so pods fit). A node annotated kwok.x-k8s.io/node=fake is
# run by kwok (infra/kube/kwok/stages.yaml): its pods become Running and Ready,
# a Job's pod completes after its pod-complete.stage.kwok.x-k8s.io/delay
# annotation, and a deleted pod is removed (graceful deletion finishes). Other
# nodes' pods stay bound but never run (BORG_KWOK=0 starts no kwok at all).
# Nodes stay schedulable: the
# TaintNodesByCondition admission plugin and the node-lifecycle controller are
# off, so nodes are neither tainted not-ready nor marked unreachable for lack
# of heartbeats. Everything else (Deployments -> ReplicaSets -> Pods, binding
# by the scheduler, ServiceAccount tokens, RBAC, garbage collection) is real.
#
# Ports: etcd 2379 (client) / 2380 (peer), kube-apiserver 6443,
# kube-controller-manager 10257, kube-scheduler 10259, kwok 10247 (healthz).
# Binaries: $BORG_CACHE/bin (default ~/.cache/borg-orchestrator/bin).
# State: $BORG_STATE/kube (default $BORG_CACHE/state/kube): pki/, etcd/ (data,
# survives restarts), logs/, run/ (pid files), *.kubeconfig, scheduler configs.
# Environment: BORG_GO_JOBS (go build -p, default 2), KUBE_START_TIMEOUT
# (seconds per component, default 120), KUBE_STOP_TIMEOUT (default 20).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${BORG_CACHE:-$HOME/.cache/borg-orchestrator}"
state="${BORG_STATE:-$cache/state}"
kstate="$state/kube"
pki="$kstate/pki"
logs="$kstate/logs"
rundir="$kstate/run"
bindir="$cache/bin"

admin_kubeconfig="$kstate/admin.kubeconfig"
cm_kubeconfig="$kstate/controller-manager.kubeconfig"
sched_kubeconfig="$kstate/scheduler.kubeconfig"
sched_default_config="$kstate/scheduler-default.yaml"
sched_config="$kstate/scheduler.yaml" # the effective config of the running scheduler

apiserver_url="https://127.0.0.1:6443"
etcd_url="http://127.0.0.1:2379"
etcd_peer_url="http://127.0.0.1:2380"
cm_url="https://127.0.0.1:10257"
sched_url="https://127.0.0.1:10259"
kwok_url="http://127.0.0.1:10247"
kwok_selector="kwok.x-k8s.io/node=fake"
service_cidr="10.96.0.0/12"
service_ip="10.96.0.1" # first address of service_cidr: the `kubernetes` Service
cluster_name="borg-local"

die() {
  echo "kube: error: $*" >&2
  exit 1
}

need() {
  command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH ($2)"
}

# Reads the version of MODULE pinned in the go.mod FILE.
pinned() {
  local v
  v="$(awk -v m="$2" '($1 == m && $2 ~ /^v/) {print $2; exit} ($1 == "require" && $2 == m) {print $3; exit}' "$1")"
  [[ -n "$v" ]] || die "cannot read the pinned version of $2 from $1"
  printf '%s\n' "$v"
}

k8s_version="$(pinned "$here/go.mod" k8s.io/kubernetes)"
etcd_version="$(pinned "$here/etcd/go.mod" go.etcd.io/etcd/server/v3)"
kwok_version="$(pinned "$here/kwok/go.mod" sigs.k8s.io/kwok)"
k8s_components=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

bin_path() {
  if [[ "$1" == etcd ]]; then
    printf '%s\n' "$bindir/etcd-$etcd_version"
  elif [[ "$1" == kwok ]]; then
    printf '%s\n' "$bindir/kwok-$kwok_version"
  else
    printf '%s\n' "$bindir/$1-$k8s_version"
  fi
}

# ---------------------------------------------------------------- build

go_build() { # NAME VERSION MODULE_DIR PACKAGE LDFLAGS ESTIMATE
  local name="$1" version="$2" dir="$3" pkg="$4" ldflags="$5" estimate="$6"
  local out="$bindir/$name-$version" tmp="$bindir/.$name-$version.tmp.$$" started=$SECONDS
  if [[ -x "$out" ]]; then
    echo "$name $version: built ($out)"
    return 0
  fi
  echo "$name $version: building from the Go module proxy (first time only, $estimate on 2 cores plus downloads)"
  if ! (cd "$dir" && CGO_ENABLED=0 go build -p "${BORG_GO_JOBS:-2}" -trimpath \
    -ldflags "$ldflags" -o "$tmp" "$pkg"); then
    rm -f "$tmp"
    die "go build of $pkg@$version failed (see the compiler output above)"
  fi
  mv -f "$tmp" "$out"
  echo "$name $version: built in $((SECONDS - started))s -> $out"
}

cmd_build() {
  local missing=0 c
  for c in etcd kwok "${k8s_components[@]}"; do
    [[ -x "$(bin_path "$c")" ]] || missing=1
  done
  if ((missing == 0)); then
    echo "kube: binaries for kubernetes $k8s_version, etcd $etcd_version and kwok $kwok_version are built ($bindir)"
    return 0
  fi
  need go "install Go >= 1.26 to build Kubernetes $k8s_version"
  mkdir -p "$bindir"
  exec 8>"$bindir/.build.lock"
  flock 8 # one build at a time on this machine (shared with jaeger.sh)

  go_build etcd "$etcd_version" "$here/etcd" go.etcd.io/etcd/server/v3 "-s -w" "~1 min"
  go_build kwok "$kwok_version" "$here/kwok" sigs.k8s.io/kwok/cmd/kwok "-s -w" "~2 min"

  local major minor v="$k8s_version" ld p
  major="${v#v}"
  major="${major%%.*}"
  minor="${v#v*.}"
  minor="${minor%%.*}"
  ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  local -A estimate=(
    [kube-apiserver]="~8-10 min"
    [kube-controller-manager]="~3 min"
    [kube-scheduler]="~1 min"
    [kubectl]="~1 min"
  )
  for c in "${k8s_components[@]}"; do
    go_build "$c" "$v" "$here" "k8s.io/kubernetes/cmd/$c" "$ld" "${estimate[$c]}"
  done
}

# ---------------------------------------------------------------- PKI and kubeconfigs

# The .crt is written last (after every step succeeded), so a NAME with both
# files is complete; openssl's messages go to $pki/openssl.log.
make_ca() { # NAME COMMON_NAME
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/$1.key" -out "$pki/$1.crt.tmp" \
    -days 3650 -sha256 -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,digitalSignature,keyCertSign,cRLSign" &&
    mv -f "$pki/$1.crt.tmp" "$pki/$1.crt"
}

sign_cert() { # CA NAME SUBJECT EXTENSIONS
  local ca="$1" name="$2" subject="$3" ext="$4"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/$name.key" -out "$pki/$name.csr" \
    -subj "$subject" &&
    openssl x509 -req -in "$pki/$name.csr" -CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" \
      -set_serial "0x$(openssl rand -hex 16)" -days 3650 -sha256 \
      -extfile <(printf '%b\n' "$ext") -out "$pki/$name.crt.tmp" &&
    mv -f "$pki/$name.crt.tmp" "$pki/$name.crt" &&
    rm -f "$pki/$name.csr"
}

have() { # NAME: both NAME.crt and NAME.key exist
  [[ -f "$pki/$1.crt" && -f "$pki/$1.key" ]]
}

pki_complete() {
  have ca && have front-proxy-ca && have apiserver && have admin && have controller-manager &&
    have scheduler && have front-proxy-client && [[ -f "$pki/sa.key" && -f "$pki/sa.pub" ]]
}

# Makes whatever is missing in $pki (all of it on the first start). Existing
# files are kept, so restarts reuse the cluster's identity and data.
ensure_pki() {
  pki_complete && return 0
  local server="basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth"
  local client="basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth"
  local sans="IP:127.0.0.1,DNS:localhost,IP:$service_ip,DNS:kubernetes,DNS:kubernetes.default"
  sans+=",DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  need openssl "used to make the cluster's certificates"
  echo "kube: generating the CA, certificates and service-account keys in $pki (once)"
  mkdir -p "$pki"
  chmod 700 "$pki"
  (
    umask 077
    if ! have ca; then # a new cluster identity: nothing signed by an old CA may stay
      find "$pki" -mindepth 1 ! -name openssl.log -delete
      make_ca ca borg-orchestrator-local-ca
    fi
    if ! have front-proxy-ca; then
      rm -f "$pki/front-proxy-client.crt"
      make_ca front-proxy-ca borg-orchestrator-front-proxy-ca
    fi
    have apiserver || sign_cert ca apiserver "/CN=kube-apiserver" "$server\nsubjectAltName=$sans"
    have admin || sign_cert ca admin "/O=system:masters/CN=kubernetes-admin" "$client"
    have controller-manager || sign_cert ca controller-manager "/CN=system:kube-controller-manager" "$client"
    have scheduler || sign_cert ca scheduler "/CN=system:kube-scheduler" "$client"
    have front-proxy-client || sign_cert front-proxy-ca front-proxy-client "/CN=front-proxy-client" "$client"
    if [[ ! -f "$pki/sa.key" || ! -f "$pki/sa.pub" ]]; then
      openssl genrsa -out "$pki/sa.key.tmp" 2048 &&
        openssl rsa -in "$pki/sa.key.tmp" -pubout -out "$pki/sa.pub" &&
        mv -f "$pki/sa.key.tmp" "$pki/sa.key"
    fi
  ) >"$pki/openssl.log" 2>&1 || true
  pki_complete || die "openssl could not generate the certificates in $pki (see $pki/openssl.log)"
  chmod 644 "$pki/ca.crt" "$pki/sa.pub"
}

# (Re)writes a kubeconfig with embedded credentials when its content changed.
write_kubeconfig() { # FILE USER CERT_NAME
  local file="$1" user="$2" name="$3"
  (
    umask 077
    cat >"$file.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $cluster_name
  cluster:
    server: $apiserver_url
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$pki/$name.crt")
    client-key-data: $(base64 -w0 "$pki/$name.key")
contexts:
- name: $cluster_name
  context:
    cluster: $cluster_name
    user: $user
current-context: $cluster_name
EOF
  )
  if cmp -s "$file.tmp" "$file"; then
    rm -f "$file.tmp"
  else
    mv -f "$file.tmp" "$file"
  fi
}

ensure_config() {
  mkdir -p "$kstate" "$logs" "$rundir"
  ensure_pki
  write_kubeconfig "$admin_kubeconfig" kubernetes-admin admin
  write_kubeconfig "$cm_kubeconfig" system:kube-controller-manager controller-manager
  write_kubeconfig "$sched_kubeconfig" system:kube-scheduler scheduler
  if [[ ! -f "$sched_default_config" ]]; then
    cat >"$sched_default_config" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $sched_kubeconfig
leaderElection:
  leaderElect: false
EOF
  fi
}

# ---------------------------------------------------------------- processes

# Prints the pid of our running NAME (from its pid file), or fails.
running_pid() {
  local name="$1" pid exe
  [[ -f "$rundir/$name.pid" ]] || return 1
  pid="$(<"$rundir/$name.pid")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null || true)"
  [[ "$(basename "${exe% (deleted)}")" == "$name"-v* ]] || return 1
  printf '%s\n' "$pid"
}

healthy() {
  case "$1" in
    etcd)
      [[ "$(curl -fsS -m 2 "$etcd_url/health" 2>/dev/null)" == *'"health":"true"'* ]]
      ;;
    kube-apiserver)
      if [[ -f "$pki/admin.crt" ]]; then
        curl -fsS -m 3 -o /dev/null --cacert "$pki/ca.crt" --cert "$pki/admin.crt" \
          --key "$pki/admin.key" "$apiserver_url/readyz" 2>/dev/null
      else
        curl -fsS -m 3 -o /dev/null -k "$apiserver_url/readyz" 2>/dev/null
      fi
      ;;
    kube-controller-manager) curl -fsS -m 2 -o /dev/null -k "$cm_url/healthz" 2>/dev/null ;;
    kube-scheduler) curl -fsS -m 2 -o /dev/null -k "$sched_url/healthz" 2>/dev/null ;;
    kwok) curl -fsS -m 2 -o /dev/null "$kwok_url/healthz" 2>/dev/null ;;
    *) return 1 ;;
  esac
}

url_of() {
  case "$1" in
    etcd) echo "$etcd_url" ;;
    kube-apiserver) echo "$apiserver_url" ;;
    kube-controller-manager) echo "$cm_url" ;;
    kube-scheduler) echo "$sched_url" ;;
    kwok) echo "$kwok_url" ;;
  esac
}

log_tail() {
  local log="$logs/$1.log"
  if [[ -f "$log" ]]; then
    echo "---- last lines of $log ----" >&2
    tail -n 15 "$log" >&2
    echo "----" >&2
  fi
}

# Starts NAME with ARGS unless it is already running, then waits until healthy.
start_component() {
  local name="$1" pid
  shift
  local log="$logs/$name.log" bin
  bin="$(bin_path "$name")"
  if pid="$(running_pid "$name")"; then
    if healthy "$name"; then
      echo "$name: already running (pid $pid) at $(url_of "$name")"
      return 0
    fi
    echo "$name: pid $pid is running, waiting for it to become healthy"
  elif healthy "$name"; then
    echo "$name: something already answers at $(url_of "$name") (not started by this script); using it"
    return 0
  else
    echo "$name: starting (log $log)"
    printf '\n==== %s start %s\n' "$(date -Is)" "$(basename "$bin")" >>"$log"
    setsid "$bin" "$@" >>"$log" 2>&1 </dev/null 8>&- 9>&- &
    pid=$!
    echo "$pid" >"$rundir/$name.pid"
  fi
  local timeout="${KUBE_START_TIMEOUT:-120}"
  local deadline=$((SECONDS + timeout))
  until healthy "$name"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$rundir/$name.pid"
      log_tail "$name"
      die "$name (pid $pid) exited during startup (log: $log)"
    fi
    if ((SECONDS >= deadline)); then
      log_tail "$name"
      die "$name did not become healthy at $(url_of "$name") within ${timeout}s (pid $pid still running; log: $log)"
    fi
    sleep 0.5
  done
  echo "$name: healthy at $(url_of "$name")"
}

stop_component() {
  local name="$1" pid
  if ! pid="$(running_pid "$name")"; then
    rm -f "$rundir/$name.pid"
    echo "$name: not running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  local timeout="${KUBE_STOP_TIMEOUT:-20}"
  local deadline=$((SECONDS + timeout))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "$name: pid $pid ignored SIGTERM for ${timeout}s, sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "$rundir/$name.pid"
  echo "$name: stopped (pid $pid)"
}

lock() {
  mkdir -p "$kstate"
  exec 9>"$kstate/.lock"
  flock 9 # concurrent starts/stops wait for each other
}

start_etcd() {
  mkdir -p "$kstate/etcd"
  chmod 700 "$kstate/etcd"
  start_component etcd \
    --name default \
    --data-dir "$kstate/etcd" \
    --listen-client-urls "$etcd_url" \
    --advertise-client-urls "$etcd_url" \
    --listen-peer-urls "$etcd_peer_url" \
    --initial-advertise-peer-urls "$etcd_peer_url" \
    --initial-cluster "default=$etcd_peer_url" \
    --initial-cluster-state new \
    --log-level warn
}

start_apiserver() {
  start_component kube-apiserver \
    --etcd-servers "$etcd_url" \
    --bind-address 127.0.0.1 \
    --advertise-address 127.0.0.1 \
    --secure-port 6443 \
    --tls-cert-file "$pki/apiserver.crt" \
    --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction \
    --disable-admission-plugins TaintNodesByCondition \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" \
    --service-account-signing-key-file "$pki/sa.key" \
    --service-cluster-ip-range "$service_cidr" \
    --requestheader-client-ca-file "$pki/front-proxy-ca.crt" \
    --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User \
    --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$pki/front-proxy-client.crt" \
    --proxy-client-key-file "$pki/front-proxy-client.key" \
    --endpoint-reconciler-type none \
    --allow-privileged=true \
    --profiling=false
}

start_controller_manager() {
  start_component kube-controller-manager \
    --kubeconfig "$cm_kubeconfig" \
    --authentication-kubeconfig "$cm_kubeconfig" \
    --authorization-kubeconfig "$cm_kubeconfig" \
    --bind-address 127.0.0.1 \
    --secure-port 10257 \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file "$pki/sa.key" \
    --root-ca-file "$pki/ca.crt" \
    --cluster-signing-cert-file "$pki/ca.crt" \
    --cluster-signing-key-file "$pki/ca.key" \
    --cluster-name "$cluster_name" \
    --flex-volume-plugin-dir "$kstate/flexvolume" \
    --controllers '*,-node-lifecycle-controller,-cloud-node-lifecycle-controller,-node-route-controller,-service-lb-controller' \
    --profiling=false
}

# Starts kube-scheduler with the effective config in $sched_config.
start_scheduler_process() {
  start_component kube-scheduler \
    --config "$sched_config" \
    --authentication-kubeconfig "$sched_kubeconfig" \
    --authorization-kubeconfig "$sched_kubeconfig" \
    --bind-address 127.0.0.1 \
    --secure-port 10259 \
    --leader-elect=false
}

# kwok runs the nodes annotated $kwok_selector (their pods run, finish, go away).
start_kwok() {
  start_component kwok \
    --kubeconfig "$admin_kubeconfig" \
    --config "$here/kwok/stages.yaml" \
    --manage-nodes-with-annotation-selector "$kwok_selector" \
    --server-address 127.0.0.1:10247 \
    --node-ip 127.0.0.1 \
    --cidr 10.244.0.0/16
}

kwok_enabled() {
  [[ "${BORG_KWOK:-1}" != 0 ]]
}

# Copies the scheduler config SOURCE to DEST; a config without a top-level
# clientConnection gets one with this cluster's scheduler kubeconfig.
effective_scheduler_config() { # SOURCE DEST
  local src="$1" dest="$2"
  [[ -f "$src" ]] || die "scheduler config $src not found"
  {
    cat "$src"
    [[ -z "$(tail -c1 "$src")" ]] || echo
    if ! grep -qE '^clientConnection:' "$src"; then
      printf '# added by kube.sh: no clientConnection in %s\nclientConnection:\n  kubeconfig: %s\n' \
        "$src" "$sched_kubeconfig"
    fi
  } >"$dest"
}

# ---------------------------------------------------------------- commands

cmd_start() {
  cmd_build
  exec 8>&- # release the build lock
  need curl "used for the health checks"
  lock
  ensure_config
  start_etcd
  start_apiserver
  start_controller_manager
  if ! running_pid kube-scheduler >/dev/null; then
    effective_scheduler_config "$sched_default_config" "$sched_config"
  fi
  start_scheduler_process
  if kwok_enabled; then
    start_kwok
  fi
  echo "kube: control plane $k8s_version ready at $apiserver_url (KUBECONFIG=$admin_kubeconfig)"
}

cmd_stop() {
  lock
  stop_component kwok
  stop_component kube-scheduler
  stop_component kube-controller-manager
  stop_component kube-apiserver
  stop_component etcd
}

cmd_status() {
  local name rc=0
  local names=(kube-apiserver etcd kube-controller-manager kube-scheduler)
  if kwok_enabled; then
    names+=(kwok)
  fi
  for name in "${names[@]}"; do
    if healthy "$name"; then
      echo "$name  $(url_of "$name")  healthy"
    else
      echo "$name  $(url_of "$name")  down"
      rc=3
    fi
  done
  return "$rc"
}

cmd_kubeconfig() {
  echo "$admin_kubeconfig"
  [[ -f "$admin_kubeconfig" ]] || die "$admin_kubeconfig does not exist yet (run: $0 start)"
}

cmd_start_scheduler() { # [CONFIG]
  local src="${1:-}"
  cmd_build
  exec 8>&- # release the build lock
  need curl "used for the health checks"
  lock
  ensure_config
  healthy kube-apiserver || die "kube-apiserver is not healthy at $apiserver_url (run: $0 start)"
  [[ -n "$src" ]] || src="$sched_default_config"
  [[ "$src" == /* ]] || src="$PWD/$src"
  local candidate="$kstate/.scheduler.candidate.yaml"
  effective_scheduler_config "$src" "$candidate"
  if running_pid kube-scheduler >/dev/null; then
    if cmp -s "$candidate" "$sched_config"; then
      rm -f "$candidate"
      start_scheduler_process # already running with this config: reports it
      return 0
    fi
    echo "kube-scheduler: restarting with $src"
    stop_component kube-scheduler
  fi
  mv -f "$candidate" "$sched_config"
  start_scheduler_process
}

cmd_stop_scheduler() {
  lock
  stop_component kube-scheduler
}

cmd_kubectl() {
  local kubectl
  kubectl="$(bin_path kubectl)"
  [[ -x "$kubectl" ]] || die "kubectl $k8s_version is not built (run: $0 build)"
  [[ -f "$admin_kubeconfig" ]] || die "$admin_kubeconfig does not exist yet (run: $0 start)"
  exec "$kubectl" --kubeconfig "$admin_kubeconfig" "$@"
}

usage() {
  echo "usage: $(basename "$0") {build|start|stop|status|kubeconfig|start-scheduler [CONFIG]|stop-scheduler|kubectl ARGS...}" >&2
  exit 2
}

[[ $# -ge 1 ]] || usage
command="$1"
shift
case "$command" in
  build | start | stop | status | kubeconfig | stop-scheduler)
    [[ $# -eq 0 ]] || usage
    "cmd_${command//-/_}"
    ;;
  start-scheduler)
    [[ $# -le 1 ]] || usage
    cmd_start_scheduler "$@"
    ;;
  kubectl) cmd_kubectl "$@" ;;
  *) usage ;;
esac
