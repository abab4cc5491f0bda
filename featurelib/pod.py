"""Per-pod features from per-cgroup counters (issue 21): what a pod's own counters say about how hard it presses
on the node's shared resources. Pure; the same function for training (``training.pod_pressure``) and the arena.

Inputs are counts over one interval for one cgroup, keyed by canonical counter names
(``featurelib.node.counters``). Two event sets:

* ``BASIC_EVENTS`` — the node agent's default per-cgroup events (``services/node_agent/live.py``:
  ``DEFAULT_CGROUP_EVENTS``): cycles, instructions, cache-misses, task-clock, context-switches;
* ``EXTENDED_EVENTS`` — plus cache-references, branch-instructions and branch-misses (core PMU events every
  x86 part counts per cgroup; set the node agent's ``CGROUP_EVENTS`` to collect them).

Every feature is a ratio or a rate (no node-specific scale), and a missing or zero denominator gives 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

import numpy as np

BASIC_EVENTS: Final = ("cycles", "instructions", "cache-misses", "task-clock", "context-switches")
EXTENDED_EVENTS: Final = (*BASIC_EVENTS, "cache-references", "branch-instructions", "branch-misses")
BASIC_FEATURES: Final = ("ipc", "miss_pki", "log_miss_per_s", "busy_cores", "ghz", "cs_per_core_s")
EXTENDED_FEATURES: Final = (*BASIC_FEATURES, "ref_pki", "miss_ratio", "branch_pki", "branch_miss_ratio")


def _div(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def pod_features(counts: Mapping[str, float], interval_s: float, extended: bool = True) -> np.ndarray:
    """One pod's feature vector (``EXTENDED_FEATURES`` or ``BASIC_FEATURES`` order) from its counts over
    ``interval_s`` seconds."""
    if interval_s <= 0:
        raise ValueError(f"interval_s must be > 0, got {interval_s}")
    c = {k: max(0.0, float(counts.get(k, 0.0))) for k in EXTENDED_EVENTS}
    instr, cycles = c["instructions"], c["cycles"]
    busy = c["task-clock"] / 1e9 / interval_s
    out = [
        _div(instr, cycles),
        _div(c["cache-misses"] * 1000.0, instr),
        math.log10(1.0 + c["cache-misses"] / interval_s),
        busy,
        _div(cycles / 1e9 / interval_s, busy),
        _div(c["context-switches"] / interval_s, busy),
    ]
    if extended:
        out += [
            _div(c["cache-references"] * 1000.0, instr),
            _div(c["cache-misses"], c["cache-references"]),
            _div(c["branch-instructions"] * 1000.0, instr),
            _div(c["branch-misses"], c["branch-instructions"]),
        ]
    return np.asarray(out, dtype=np.float64)
