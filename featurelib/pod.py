"""Per-pod features from per-cgroup counters (issue 21): what a pod's own counters say about how hard it presses
on the node's shared resources. Pure; the same function for training (``training.pod_pressure``) and the arena.

Inputs are counts over one interval for one cgroup, keyed by canonical counter names
(``featurelib.node.counters``). Two event sets:

* ``BASIC_EVENTS`` — cycles, instructions, cache-misses, task-clock, context-switches;
* ``EXTENDED_EVENTS`` — plus cache-references, branch-instructions and branch-misses (core PMU events every
  x86 part counts per cgroup): the node agent's default per-cgroup events (``services/node_agent/live.py``:
  ``DEFAULT_CGROUP_EVENTS``) and what the served model reads.

Every feature is a ratio or a rate (no node-specific scale), and a missing or zero denominator gives 0.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

BASIC_EVENTS: Final = ("cycles", "instructions", "cache-misses", "task-clock", "context-switches")
EXTENDED_EVENTS: Final = (*BASIC_EVENTS, "cache-references", "branch-instructions", "branch-misses")
BASIC_FEATURES: Final = ("ipc", "miss_pki", "log_miss_per_s", "busy_cores", "ghz", "cs_per_core_s")
EXTENDED_FEATURES: Final = (*BASIC_FEATURES, "ref_pki", "miss_ratio", "branch_pki", "branch_miss_ratio")


POD_FEATURE_SCHEMA_VERSION: Final = 1
WINDOW_S: Final = 10.0
"""The window a pod's counts are summed over before its features are computed (training and serving)."""

LLC_OCCUPANCY: Final = "llc_occupancy"
"""resctrl's per-group reading, in a cgroup's counters when the node agent monitors it: LLC bytes held now."""
MBM_TOTAL_BYTES: Final = "mbm_total_bytes"
"""resctrl's per-group reading, in a cgroup's counters when the node agent monitors it: bytes moved to and from
memory during the sample's interval."""
NODE_LLC_BYTES: Final = "llc_bytes"
"""NodeState.metrics: the node's last-level cache in bytes, the scale of its pods' ``llc_occupancy``."""
NODE_MEMBW_PEAK: Final = "membw_peak_bytes_per_s"
"""NodeState.metrics: the node's memory bandwidth as its operator stated it, the scale of ``mbm_total_bytes``."""
MONITORED_MIN_SHARE: Final = 0.5
"""A monitored reading counts for a pod's window when its samples with a number cover at least this share of it."""

_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


def pod_feature_schema_hash(extended: bool = True) -> str:
    """sha256 over the schema version, the window, the events read and the ordered feature names."""
    events, names = (EXTENDED_EVENTS, EXTENDED_FEATURES) if extended else (BASIC_EVENTS, BASIC_FEATURES)
    text = f"{POD_FEATURE_SCHEMA_VERSION}\nwindow_s={WINDOW_S}\n{','.join(events)}\n" + "\n".join(names)
    return hashlib.sha256(text.encode()).hexdigest()


def pod_uid_of(cgroup: str) -> str | None:
    """The pod UID in a kubelet cgroup path, dashed (None: not a pod's cgroup).

    Both kubelet layouts: cgroupfs (``kubepods/burstable/pod<uid>``) and systemd
    (``kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice``). Only the
    pod's own cgroup counts: a container's below it is None (its counts are already in the pod's).
    """
    match = _POD_UID.search(cgroup.rstrip("/").rsplit("/", 1)[-1])
    return match.group(1).replace("_", "-") if match else None


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


def add_counts(sums: dict[str, float], counters: Mapping[str, Any], events: tuple[str, ...]) -> list[str]:
    """Add one sample's count of each of ``events`` (``{event: {"value": …}}``, the contract's dict form) to ``sums``;
    the events it had no number for."""
    missing = []
    for event in events:
        counter = counters.get(event)
        value = counter.get("value") if isinstance(counter, Mapping) else None
        if value is None:
            missing.append(event)
        else:
            sums[event] += float(value)
    return missing


@dataclass(frozen=True, slots=True)
class PodWindow:
    """One pod's counts summed over one window of its node's samples."""

    node: str
    cgroup: str
    pod_uid: str
    ts_ms: int
    """End of the window: the newest sample summed into it."""
    window_ms: int
    """Time the pod's counts cover (the samples it appeared in)."""
    counts: dict[str, float]
    missing: tuple[str, ...]
    """Events asked for but absent or not counted in at least one sample of the window."""
    input_ts_ms: int
    monitored: dict[str, float] = field(default_factory=dict)
    """resctrl readings over the window, where the node agent sends them: ``llc_occupancy`` = mean bytes held,
    ``mbm_total_bytes`` = bytes moved per second (each over the samples that had a number, when those cover at
    least ``MONITORED_MIN_SHARE`` of the pod's window)."""


@dataclass(slots=True)
class _Open:
    covered_ms: int = 0
    pods: dict[str, tuple[str, dict[str, float], set[str], int]] = field(default_factory=dict)
    """cgroup → (pod uid, summed counts, missing events, covered ms)."""
    monitored: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """cgroup → {resctrl event: [value sum (occupancy weighted by ms), ms with a number]}."""


def _add_monitored(acc: dict[str, list[float]], counters: Mapping[str, Any], interval_ms: int) -> None:
    for event in (LLC_OCCUPANCY, MBM_TOTAL_BYTES):
        counter = counters.get(event)
        value = counter.get("value") if isinstance(counter, Mapping) else None
        if value is None:
            continue
        slot = acc.setdefault(event, [0.0, 0.0])
        slot[0] += float(value) * (interval_ms if event == LLC_OCCUPANCY else 1.0)
        slot[1] += interval_ms


def _monitored_of(acc: Mapping[str, list[float]], covered_ms: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for event, (total, ms) in acc.items():
        if ms > 0 and ms >= MONITORED_MIN_SHARE * covered_ms:
            out[event] = total / ms if event == LLC_OCCUPANCY else total / (ms / 1000.0)
    return out


class PodWindows:
    """Sums each pod's per-cgroup counts over ``window_s`` of its node's samples, then closes them all.

    Pure (no clock: time is the samples' own). A node's window closes when its samples cover
    ``window_s``; a pod counts only the samples it appears in (``window_ms``). Cgroups that are not a pod's
    (:func:`pod_uid_of` is None) are ignored; past ``max_pods`` pods in one node's window the rest of
    them are dropped (counted in ``dropped_pods``), past ``max_nodes`` open nodes the longest-idle is
    forgotten — bounded memory whatever the input.
    """

    def __init__(self, events: tuple[str, ...], window_s: float = WINDOW_S, *, max_pods: int = 256,
                 max_nodes: int = 10_000) -> None:
        self.events = events
        self.window_ms = int(window_s * 1000)
        self.max_pods = max_pods
        self.max_nodes = max_nodes
        self.dropped_pods = 0
        self._open: OrderedDict[str, _Open] = OrderedDict()

    def is_open(self, node: str) -> bool:
        return node in self._open

    def observe(self, node: str, ts_ms: int, interval_ms: int, cgroups: Mapping[str, Mapping[str, Any]],
                input_ts_ms: int = 0) -> list[PodWindow]:
        """Take one NodeState's per-cgroup counters (``{cgroup: {event: {"value": …}}}``, the contract's dict
        form); the pods' windows that closed with it (empty while the node's window is open)."""
        win = self._open.pop(node, None)
        if win is None:
            win = _Open()
        self._open[node] = win  # most recently seen last
        while len(self._open) > self.max_nodes:
            self._open.popitem(last=False)
        win.covered_ms += interval_ms
        for cgroup, counters in cgroups.items():
            uid = pod_uid_of(cgroup)
            if uid is None:
                continue
            entry = win.pods.get(cgroup)
            if entry is None:
                if len(win.pods) >= self.max_pods:
                    self.dropped_pods += 1
                    continue
                entry = win.pods[cgroup] = (uid, dict.fromkeys(self.events, 0.0), set(), 0)
            _, sums, missing, covered = entry
            missing.update(add_counts(sums, counters, self.events))
            win.pods[cgroup] = (uid, sums, missing, covered + interval_ms)
            if LLC_OCCUPANCY in counters or MBM_TOTAL_BYTES in counters:
                _add_monitored(win.monitored.setdefault(cgroup, {}), counters, interval_ms)
        if win.covered_ms < self.window_ms:
            return []
        del self._open[node]
        return [PodWindow(node, cgroup, uid, ts_ms, covered, sums, tuple(sorted(missing)), input_ts_ms,
                          _monitored_of(win.monitored.get(cgroup, {}), covered))
                for cgroup, (uid, sums, missing, covered) in win.pods.items()]
