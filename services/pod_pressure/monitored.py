"""llc and membw from per-pod resctrl readings where a node sends them, the counter regressor's elsewhere. Pure.

A node agent with ``NODE_AGENT_RESCTRL_ROOT`` puts each pod cgroup's LLC occupancy and memory traffic in its
counters (``featurelib.pod.LLC_OCCUPANCY`` / ``MBM_TOTAL_BYTES``) and the node's scales in ``NodeState.metrics``
(``NODE_LLC_BYTES``; ``NODE_MEMBW_PEAK`` when its operator stated the bandwidth). A pod's **reading** is its mean
occupancy over the window ÷ the LLC, or its bytes per second ÷ the bandwidth, clipped to 0..1: the interference
model's pressure scale, on which 1 is the whole resource.

Occupancy and bandwidth are shared out: once a node's pods together demand more than the resource, each holds
less than it asks for, so a reading *understates* a pod's pressure (the arena's reading model,
``simulator.arena.orchestrator.monitored_readings``). Hence, per node window and resource, the readings are the
pressures while they sum below ``saturated_at``; on a node where they reach it, each pod gets the larger of its
reading (a lower bound) and the counter regressor's estimate. A pod without a reading keeps the estimate, and a
pod the regressor could not answer stays ``unknown`` (core and frontend have no per-cgroup meter). The offline
what-if behind this (docs/arena.md, "Per-cgroup LLC occupancy and memory bandwidth (RDT)").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from featurelib.pod import LLC_OCCUPANCY, MBM_TOTAL_BYTES, NODE_LLC_BYTES, NODE_MEMBW_PEAK, PodWindow
from services.pod_pressure.model import RESOURCES

MONITORED: Final = (("llc", RESOURCES.index("llc"), LLC_OCCUPANCY, NODE_LLC_BYTES),
                    ("membw", RESOURCES.index("membw"), MBM_TOTAL_BYTES, NODE_MEMBW_PEAK))
"""(resource, its index in the model's pressures, the pod's reading, the node metric that scales it)."""
Source = Literal["reading", "reading_or_model", "model"]


@dataclass(frozen=True, slots=True)
class Combined:
    pressures: tuple[float, ...] | None
    """The window's pressures in the model's order (None exactly when the model's were None)."""
    sources: dict[str, Source]
    """Per monitored resource of an answered pod: where its pressure came from."""


def reading(window: PodWindow, event: str, scale: float | None) -> float | None:
    """A pod's reading on the pressure scale (None: no reading in the window, or no scale for the node)."""
    value = window.monitored.get(event)
    if value is None or scale is None or scale <= 0:
        return None
    return min(1.0, max(0.0, value / scale))


def combine(windows: Sequence[PodWindow], estimates: Sequence[tuple[float, ...] | None],
            scales: Mapping[str, Mapping[str, float]], saturated_at: float) -> list[Combined]:
    """Per window (``estimates`` in the same order, the model's pressures or None), the pressures to publish.
    ``scales``: node → its latest ``NodeState.metrics``."""
    if len(windows) != len(estimates):
        raise ValueError(f"{len(windows)} windows but {len(estimates)} estimates")
    out = [list(e) if e is not None else None for e in estimates]
    sources: list[dict[str, Source]] = [{} for _ in windows]
    for resource, index, event, metric in MONITORED:
        read: dict[tuple[str, int], list[tuple[int, float]]] = {}  # per node window: one batch can close several
        for i, w in enumerate(windows):
            value = reading(w, event, (scales.get(w.node) or {}).get(metric))
            if value is not None:
                read.setdefault((w.node, w.ts_ms), []).append((i, value))
        for i, est in enumerate(out):
            if est is not None:
                sources[i][resource] = "model"
        for pods in read.values():
            saturated = sum(v for _, v in pods) >= saturated_at
            for i, value in pods:
                est = out[i]
                if est is None:
                    continue
                if saturated:
                    est[index] = max(value, est[index])
                    sources[i][resource] = "reading_or_model"
                else:
                    est[index] = value
                    sources[i][resource] = "reading"
    return [Combined(tuple(e) if e is not None else None, s) for e, s in zip(out, sources, strict=True)]
