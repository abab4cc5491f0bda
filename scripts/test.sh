#!/usr/bin/env bash
# `make test`: start every real service the tests need (Kafka, Jaeger, Kubernetes API),
# then run the whole pytest suite. Fails when the suite fails or runs no test.
set -euo pipefail
cd "$(dirname "$0")/.."
export BORG_CACHE="${BORG_CACHE:-$HOME/.cache/borg-orchestrator}"
mkdir -p test-artifacts

bash scripts/ensure-system.sh

echo "== local stack for tests"
if ! bash infra/kafka/kafka.sh status >/dev/null; then
  # No broker running (CI, fresh machine): give the suite its own empty data directory, so
  # topics left by earlier runs never slow the broker down (a restart reloads every partition).
  export KAFKA_DATA_DIR="${BORG_STATE:-$BORG_CACHE/state}/kafka-test-data"
  rm -rf "$KAFKA_DATA_DIR"
  echo "kafka: fresh test data directory $KAFKA_DATA_DIR"
else
  # A broker already runs (a developer's): the tests that stop and restart it (the node
  # agent's outage test) must bring it back on the data it was started with.
  KAFKA_DATA_DIR="$(bash infra/kafka/kafka.sh data-dir)"
  export KAFKA_DATA_DIR
  echo "kafka: reusing the running broker (data $KAFKA_DATA_DIR)"
fi
bash infra/kafka/kafka.sh start
for component in jaeger kube; do
  script="infra/$component/$component.sh"
  if [[ -x "$script" || -f "$script" ]]; then
    bash "$script" start
  fi
done
.venv/bin/borgctl topics create >/dev/null

echo "== pytest"
set +e
.venv/bin/python -m pytest -p no:cacheprovider --junitxml=test-artifacts/junit.xml "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  echo "make test: no test was collected — that is a failure" >&2
  exit 1
fi
exit $rc
