"""Node agent: PMU telemetry into ``nodestate.v1`` (live perf_event, replay, synthetic).

Layers (each module imports only the ones above it):

* ``events``     — the one mapping from perf spellings to canonical counter names.
* ``perfstat``   — parser for ``perf stat`` text (human and ``-x,`` CSV, with or without ``-I``).
* ``recorded``   — recorded data (perf stat files, Alibaba 2018 machine_usage) → NodeState dicts.
* ``perf_event`` / ``discovery`` / ``procfs`` / ``live`` — live sampling through ``perf_event_open``.
* ``nodestate``  — building NodeState dicts/bytes on the hot path (validated by tests, not per message).
* ``spool`` / ``publish`` / ``shipper`` — bounded on-disk spool and in-order delivery to Kafka.
* ``agent`` / ``settings`` / ``main`` — the ``borgctl serve node-agent`` process; ``bench`` its benchmark.
"""
