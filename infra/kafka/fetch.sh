#!/usr/bin/env bash
# Fetch Apache Kafka jars (broker + tools + log4j2 binding) from Maven Central
# into the cache outside git. Idempotent: a complete cache is reused.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${BORG_CACHE:-$HOME/.cache/borg-orchestrator}"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")"
stamp="$(sha256sum "$here/pom.xml" | cut -c1-12)"
dest="$cache/kafka-$version-$stamp/libs"
if [[ -f "$dest/.complete" ]]; then
  echo "kafka $version jars: cached in $dest"
  exit 0
fi
mkdir -p "$dest"
echo "kafka $version jars: fetching with Maven into $dest (first time only)"
mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies \
  -DoutputDirectory="$dest" -DincludeScope=runtime
ls "$dest"/kafka_2.13-"$version".jar >/dev/null
touch "$dest/.complete"
echo "kafka $version jars: $(ls "$dest" | wc -l) jars ready"
