#!/usr/bin/env bash
# System packages the tests and the local stack use, from Debian's archive (idempotent).
# kcat: an independent Kafka client for acceptance-style tests.
# chromium: headless browser for the dashboard's end-to-end test (driven over the DevTools protocol).
set -euo pipefail
need=()
command -v kcat >/dev/null || need+=(kcat)
command -v openssl >/dev/null || need+=(openssl)
command -v chromium >/dev/null || need+=(chromium)
if ((${#need[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "missing system packages: ${need[*]} (install them with apt-get as root)" >&2
    exit 1
  fi
  echo "installing system packages: ${need[*]}"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
