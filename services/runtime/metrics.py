"""Prometheus metrics every Kafka stage reports."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

MESSAGES_IN = Counter("borg_messages_in_total", "Messages consumed", ["topic"])
MESSAGES_OUT = Counter("borg_messages_out_total", "Messages produced", ["topic"])
DEADLETTERS = Counter("borg_deadletters_total", "Messages sent to the dead-letter topic", ["topic", "kind"])
PROCESSING_SECONDS = Histogram(
    "borg_processing_seconds",
    "Time to handle one consumed message",
    ["topic"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)
CONSUMER_LAG = Gauge("borg_consumer_lag", "High-water mark minus position", ["topic", "partition"])
SPOOL_DROPPED = Counter("borg_spool_dropped_total", "Samples dropped because the local spool was full")
COMMIT_SECONDS = Histogram(
    "borg_stream_commit_seconds",
    "One commit round of a stream processor: state checkpoint plus waiting for the broker's acks",
    ["service"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0),
)
