#!/usr/bin/env bash
# `make run`: the main job on the embedded local stack.
#  1. Kafka, Jaeger and the Kubernetes control plane (project scripts; built/fetched once, cached)
#  2. seeds the cluster with simulated nodes (run by kwok: their pods run) and a few Deployments
#  3. starts every service (tracing to Jaeger, referee applying to the local cluster)
#  4. replays bundled sample traffic (the seeded synthetic cluster) for RUN_SECONDS
#  5. shows live decisions and actions, then says where to look. The stack stays up:
#     `borgctl down` (or `make stack-down`) stops it.
# Settings: RUN_SECONDS (120), RUN_NODES (20), RUN_RATE (NodeState/s, default RUN_NODES),
#           REFEREE_MODE (apply|dry-run|shadow; default apply against the LOCAL cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
export BORG_CACHE="${BORG_CACHE:-$HOME/.cache/borg-orchestrator}"
seconds="${RUN_SECONDS:-120}"
nodes="${RUN_NODES:-20}"
rate="${RUN_RATE:-$nodes}"
borgctl=".venv/bin/borgctl"

bash scripts/ensure-system.sh
echo "== local stack (first run builds Jaeger and Kubernetes: ~25–30 min on 2 cores; cached after)"
"$borgctl" up --no-services

KUBECONFIG="$(bash infra/kube/kube.sh kubeconfig)"
export KUBECONFIG
export OTEL_EXPORTER_OTLP_ENDPOINT="${OTEL_EXPORTER_OTLP_ENDPOINT:-http://127.0.0.1:4317}"
export REFEREE_MODE="${REFEREE_MODE:-apply}"
export NODE_AGENT_SOURCE="${NODE_AGENT_SOURCE:-live}"
# the failure model's unit mapping divides pod requests by the largest node's allocatable
# (featurelib/borg_units.py); loadtests/seed_cluster.py gives every node 16 CPUs and 64 GiB
export RISK_LARGEST_NODE_CPU="${RISK_LARGEST_NODE_CPU:-16}"
export RISK_LARGEST_NODE_MEMORY_GIB="${RISK_LARGEST_NODE_MEMORY_GIB:-64}"

echo "== seeding the local cluster with $nodes simulated nodes"
.venv/bin/python -m loadtests.seed_cluster --nodes "$nodes" --ready

echo "== services"
"$borgctl" up --only services

echo "== replaying $seconds s of synthetic traffic ($nodes nodes, $rate NodeState/s)"
"$borgctl" replay --source synthetic --nodes "$nodes" --rate "$rate" --duration "$seconds" \
  > "$BORG_CACHE/state/replay.log" 2>&1 &
replay=$!
trap 'kill $replay 2>/dev/null || true' EXIT

cat <<INFO

  Jaeger (every decision's trace):  http://127.0.0.1:16686   (service: referee)
  Dashboard:                        http://127.0.0.1:8080
  Topics:                           borgctl tail decisions.v1 actions.v1 --summary
  Follow one decision:              borgctl trace <decision-id>
  Status / stop:                    borgctl status / borgctl down

== live decisions and actions (for $seconds s)
INFO
"$borgctl" tail decisions.v1 actions.v1 deadletter.v2 --summary --seconds "$seconds" || true
wait $replay || true
trap - EXIT

echo
"$borgctl" status || true
echo
echo "The stack is still running: open the URLs above; \`borgctl down\` stops everything."
