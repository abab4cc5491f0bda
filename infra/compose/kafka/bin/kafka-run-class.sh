#!/usr/bin/env bash
# kafka-run-class.sh of the stand-in: one JVM on the jars in /opt/kafka/libs, logging to stdout.
# KAFKA_HEAP_OPTS as in the official image (word-split on purpose).
# shellcheck disable=SC2086
exec java ${KAFKA_HEAP_OPTS:--Xmx256m} -XX:+UseG1GC -Djava.awt.headless=true \
  -Dlog4j2.configurationFile=/opt/kafka/log4j2.properties -cp '/opt/kafka/libs/*' "$@"
