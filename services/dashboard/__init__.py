"""Live dashboard: decisions with every proposal they weighed, per-node state, cluster state, pipeline health.

Layers: `series`, `decisions`, `nodes`, `clusters`, `pipeline` and `state` are pure aggregation (no I/O,
time passed in); `reader` and `monitor` feed them from Kafka; `server` serves the page, server-sent events
and JSON; `main` wires them into `borgctl serve dashboard`.
"""
