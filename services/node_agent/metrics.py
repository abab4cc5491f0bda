"""Prometheus metrics of the node agent (the spool's drop counter is the runtime's SPOOL_DROPPED)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

SAMPLES = Counter("borg_node_agent_samples_total", "NodeState samples taken", ["source"])
SKIPPED = Counter("borg_node_agent_skipped_intervals_total", "Intervals skipped because sampling overran")
INVALID = Counter("borg_node_agent_invalid_samples_total", "Samples that failed NodeState validation (not sent)")
SAMPLE_SECONDS = Histogram(
    "borg_node_agent_sample_seconds",
    "Wall time of one sampling cycle (read counters, build, validate, spool)",
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1),
)
DELIVERED = Counter("borg_node_agent_delivered_total", "NodeState records acknowledged by Kafka")
SPOOL_RECORDS = Gauge("borg_node_agent_spool_records", "Records waiting in the local spool")
SPOOL_BYTES = Gauge("borg_node_agent_spool_bytes", "Bytes of records waiting in the local spool")
BROKER_UP = Gauge("borg_node_agent_broker_up", "1 while the last delivery attempt succeeded")
