"""The load term's inputs (issue 21): the newest per-pod pressure estimate by pod UID, from podpressure.v1 (pure).

The pod-pressure stage publishes one record per running pod and 10 s window. The extender keeps only the
newest per UID; an estimate counts for a pod while it is ``ok``, names the node the pod is bound to now and is
younger than ``max_age_ms`` (a moved pod's old node's figure, or one from a stage that stopped, does not). A
pod without such an estimate is placed at its class's guess (``simulator.workloads.CLASS_PRESSURE_GUESS``, the
mean over the training kinds × 0.75), as the offline arena's load term does: the term then says what the class
table says, never more. ``unknown`` records drop the pod's estimate (nothing acts on what the model did not
answer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from contracts.models import PodPressure
from services.scheduler_extender.corunner import Resident
from services.scheduler_extender.podindex import PodEntry
from simulator.workloads import CLASS_PRESSURE_GUESS

Pressure = tuple[float, float, float, float]
QUANTUM = 0.01
"""Estimates are rounded to this before they enter a node's key, so window-to-window jitter below it does not
re-score the node (the scores are integers 0–10; a 0.01 change in one pod's pressure rarely moves one)."""


class Estimate(NamedTuple):
    ts_ms: int
    node: str
    pressure: Pressure | None  # None: the newest record was ``unknown``


class PressureBook:
    """Newest estimate per pod UID, bounded (the oldest half goes when ``keep`` is passed)."""

    def __init__(self, max_age_ms: int, keep: int = 200_000) -> None:
        if max_age_ms <= 0 or keep < 2:
            raise ValueError("max_age_ms must be positive and keep at least 2")
        self.max_age_ms = max_age_ms
        self.keep = keep
        self._by_uid: dict[str, Estimate] = {}

    def __len__(self) -> int:
        return len(self._by_uid)

    def apply(self, record: PodPressure) -> bool:
        """Take one record; True when it replaced what was held for its pod (False: older than that)."""
        held = self._by_uid.get(record.pod_uid)
        if held is not None and held.ts_ms > record.ts_ms:
            return False
        pressure: Pressure | None = None
        if record.status == "ok":
            pressure = (_q(record.llc), _q(record.membw), _q(record.core), _q(record.frontend))
        if held is None and len(self._by_uid) >= self.keep:
            for uid in list(self._by_uid)[: self.keep // 2]:
                del self._by_uid[uid]
        self._by_uid.pop(record.pod_uid, None)  # re-inserted last: the dict's order is the update order
        self._by_uid[record.pod_uid] = Estimate(record.ts_ms, record.node, pressure)
        return True

    def estimate(self, uid: str, node: str, now_ms: int) -> Pressure | None:
        """The pod's usable estimate on ``node`` now (None: none, unknown, another node's, or too old)."""
        held = self._by_uid.get(uid)
        if held is None or held.pressure is None or held.node != node or now_ms - held.ts_ms > self.max_age_ms:
            return None
        return held.pressure


def _q(value: float | None) -> float:
    return round(round((value or 0.0) / QUANTUM) * QUANTUM, 4)


def node_residents(entries: Sequence[PodEntry], node: str, book: PressureBook, now_ms: int,
                   sensitive: frozenset[int]) -> tuple[Resident, ...]:
    """The pods bound to ``node`` as the load term reads them: (class, estimate or the class's guess,
    latency-sensitive), sorted so the same pods give the same key. Latency-sensitive = its class is one of
    ``sensitive`` (``EXTENDER_LATENCY_SENSITIVE_CLASSES``, as for the class table)."""
    out: list[Resident] = []
    for e in entries:
        pressure = book.estimate(e.uid, node, now_ms) if e.uid else None
        out.append((e.class_index, pressure if pressure is not None else CLASS_PRESSURE_GUESS[e.class_index],
                    e.class_index in sensitive))
    return tuple(sorted(out, key=lambda r: (r[0], tuple(r[1]), r[2])))
