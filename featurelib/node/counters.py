"""Canonical PMU counter names: the one list the node agent, the simulator and the features read.

``NodeState.counters`` is keyed by these names. The node agent maps every perf spelling onto
them (``services/node_agent/events.py`` holds the parsing rules), the simulator produces
``NODE_COUNTERS``, and the features read a subset of those (``featurelib.node.samples.COUNTERS_USED``).
"""

from __future__ import annotations

from typing import Final

HARDWARE_EVENTS: Final = (
    "cycles",
    "instructions",
    "cache-references",
    "cache-misses",
    "branch-instructions",
    "branch-misses",
    "bus-cycles",
    "stalled-cycles-frontend",
    "stalled-cycles-backend",
    "ref-cycles",
)
CACHE_EVENTS: Final = ("LLC-loads", "LLC-load-misses", "LLC-stores", "LLC-store-misses")
SOFTWARE_EVENTS: Final = (
    "task-clock",
    "cpu-clock",
    "context-switches",
    "cpu-migrations",
    "page-faults",
    "minor-faults",
    "major-faults",
)
MEM_BANDWIDTH_BYTES: Final = "mem-bandwidth-bytes"
"""DRAM traffic in bytes during the interval (uncore IMC CAS counts × 64 live; modelled by the simulator)."""
TIME_EVENTS_NS: Final = frozenset({"task-clock", "cpu-clock"})
"""Software events whose value is in nanoseconds (also when perf printed msec)."""
CANONICAL_EVENTS: Final = frozenset((*HARDWARE_EVENTS, *CACHE_EVENTS, *SOFTWARE_EVENTS, MEM_BANDWIDTH_BYTES))

NODE_COUNTERS: Final = (
    "cycles",
    "instructions",
    "cache-references",
    "cache-misses",
    "LLC-loads",
    "LLC-load-misses",
    "branch-instructions",
    "branch-misses",
    "stalled-cycles-frontend",
    "stalled-cycles-backend",
    "ref-cycles",
    MEM_BANDWIDTH_BYTES,
    "task-clock",
    "context-switches",
    "cpu-migrations",
    "page-faults",
)
"""The counters a node reports for the features (each one in ``CANONICAL_EVENTS``), in this order.

The order is load-bearing: it is the simulator's column order (``simulator.cluster.EVENTS``,
so its random draws depend on it) and, without ``ref-cycles`` and ``cpu-migrations``, the
order in which the features unpack counters (``featurelib.node.samples.COUNTERS_USED``).
"""
