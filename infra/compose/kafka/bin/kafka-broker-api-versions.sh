#!/usr/bin/env bash
# A healthcheck probe: a small heap whatever the broker's KAFKA_HEAP_OPTS is.
KAFKA_HEAP_OPTS="-Xmx64m -XX:TieredStopAtLevel=1" exec /opt/kafka/bin/kafka-run-class.sh \
  org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
