"""The pod-pressure processor: NodeState per-cgroup counters → one PodPressure per pod and window on podpressure.v1.

Per node it sums each pod's cgroup counts over 10 s of samples (``featurelib.pod.PodWindows``: the window the
model was trained on); when a node's window closes, every pod in it gets a record keyed by the node. The model's
inputs are ``featurelib.pod.pod_features`` of the summed counts, the function training computes. Where the node
agent also sends resctrl readings (a pod's LLC occupancy and memory traffic) and the node's scales, llc and membw
come from them instead (``services/pod_pressure/monitored.py``).

A pod gets an ``unknown`` record saying why, instead of pressures, when its cgroup lacked an event the model reads
(``counters_missing``: a node agent with a narrower ``CGROUP_EVENTS`` than its default, or a PMU that cannot
count one of them), when it did no work in the window (``idle``), when a feature lies outside the training range
(``out_of_range``) or when the model returned no finite number (``model_failed``). Nothing acts on ``unknown``.

Cgroups that are not a pod's (no pod UID in the last path component) are ignored, as are NodeStates without
per-cgroup counters (replays, synthetic nodes). Nothing is persisted: after a restart an open window is rebuilt
from the input re-read after the committed offset. A malformed or schema-invalid NodeState goes to the
dead-letter topic (``Sink.dead_letter``: original bytes, bounded) and the stream goes on.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
from prometheus_client import Counter

from contracts import telemetry as names
from contracts.models import PodPressure, PodPressureUnknownReason
from contracts.topics import Topic
from featurelib.pod import EXTENDED_EVENTS, WINDOW_S, PodWindow, PodWindows, pod_features
from services.pod_pressure.model import PodPressureModel
from services.pod_pressure.monitored import MONITORED, combine
from services.pod_pressure.settings import PodPressureSettings
from services.runtime.batch_stream import Batch, BatchStream, decoded_nodestates
from services.runtime.model_watch import ModelWatcher, infer_rows
from services.runtime.stream_io import Sink, headers_of
from services.runtime.stream_settings import app_id
from services.runtime.stream_trace import stage_span

log = logging.getLogger(__name__)
SERVICE = "pod-pressure"
IN_TOPIC = Topic.NODESTATE
OUT_TOPIC = Topic.PODPRESSURE
RECORDS = Counter("borg_pod_pressure_records_total", "Pod pressure records published by status and reason",
                  ["status", "reason"])
DROPPED = Counter("borg_pod_pressure_dropped_pods_total", "Pods past POD_PRESSURE_MAX_PODS_PER_NODE in a window")
SOURCES = Counter("borg_pod_pressure_monitored_total",
                  "Answered pod windows by where their llc / membw came from (resctrl reading or the model)",
                  ["resource", "source"])
SCALE_METRICS = frozenset(metric for *_, metric in MONITORED)


def unknown_reason(window: PodWindow) -> PodPressureUnknownReason | None:
    """Why this pod's window gets no estimate before the model is asked (None: compute its features)."""
    if window.missing:
        return "counters_missing"
    counts = window.counts
    if counts["instructions"] <= 0 or counts["cycles"] <= 0 or counts["task-clock"] <= 0:
        return "idle"
    return None


def assess(windows: Sequence[PodWindow], model: PodPressureModel
           ) -> list[tuple[PodPressureUnknownReason | None, np.ndarray | None, tuple[float, ...] | None]]:
    """Per window: (reason, features, pressures in ``RESOURCES`` order) — pressures exactly when reason is None."""
    reasons: list[PodPressureUnknownReason | None] = [unknown_reason(w) for w in windows]
    features: list[np.ndarray | None] = [None] * len(windows)
    for i, w in enumerate(windows):
        if reasons[i] is None:
            features[i] = pod_features(w.counts, w.window_ms / 1000.0, extended=True)
    ready = [i for i, r in enumerate(reasons) if r is None]
    if ready:
        x = np.asarray([features[i] for i in ready], dtype=np.float64)
        inside = model.in_range(x)
        for i, ok in zip(ready, inside.tolist(), strict=True):
            if not ok:
                reasons[i] = "out_of_range"
    answers: dict[int, tuple[float, ...]] = {}
    ask = [i for i in ready if reasons[i] is None]
    if ask:
        results, _ = infer_rows(model, np.asarray([features[i] for i in ask], dtype=np.float32))
        for i, result in zip(ask, results, strict=True):
            if result is None:
                reasons[i] = "model_failed"
            else:
                answers[i] = tuple(float(v) for v in result)
    return [(reasons[i], features[i], answers.get(i)) for i in range(len(windows))]


def _finite(value: float) -> float | None:
    v = float(value)
    return max(0.0, v) if math.isfinite(v) else None


def record_of(window: PodWindow, reason: PodPressureUnknownReason | None, features: np.ndarray | None,
              pressures: tuple[float, ...] | None, version: str) -> PodPressure:
    ipc = busy = None
    if features is not None:  # a ratio of absurd counts can be inf or NaN: said as absent, not published
        ipc, busy = _finite(features[0]), _finite(features[3])
    ok = pressures is not None
    llc, membw, core, frontend = pressures if pressures is not None else (None, None, None, None)
    return PodPressure(node=window.node, pod_uid=window.pod_uid, cgroup=window.cgroup, ts_ms=window.ts_ms,
                       window_ms=max(1, window.window_ms), status="ok" if ok else "unknown",
                       reason=None if ok else (reason or "model_failed"), llc=llc, membw=membw, core=core,
                       frontend=frontend, ipc=ipc, busy_cores=busy, model_version=version,
                       input_ts_ms=window.input_ts_ms)


class PodPressureProcessor:
    def __init__(self, settings: PodPressureSettings, sink: Sink, models: ModelWatcher[PodPressureModel]) -> None:
        self.settings = settings
        self.sink = sink
        self.models = models
        self.group = app_id(SERVICE, settings.topic_prefix)
        self.windows = PodWindows(tuple(EXTENDED_EVENTS), WINDOW_S, max_pods=settings.max_pods_per_node,
                                  max_nodes=settings.max_nodes)
        self.stream = BatchStream(service=SERVICE, settings=settings, sink=sink, topics=[IN_TOPIC],
                                  handle=self._handle)
        self.emitted = 0
        self.scales: OrderedDict[str, dict[str, float]] = OrderedDict()
        """node → the metrics that scale its pods' resctrl readings (its latest NodeState's)."""

    def _remember_scales(self, node: str, metrics: Any) -> None:
        if not isinstance(metrics, dict):
            return
        scale = {k: float(v) for k, v in metrics.items() if k in SCALE_METRICS}
        if not scale:
            return
        self.scales.pop(node, None)
        self.scales[node] = scale
        while len(self.scales) > self.settings.max_nodes:
            self.scales.popitem(last=False)

    async def _handle(self, batch: Batch) -> None:
        closed: list[tuple[Any, list[PodWindow]]] = []
        async for event, state in decoded_nodestates(batch, self.sink):
            cgroups = state.get("cgroups") or {}
            if not cgroups and not self.windows.is_open(state["node"]):
                continue
            self._remember_scales(state["node"], state.get("metrics"))
            dropped = self.windows.dropped_pods
            done = self.windows.observe(state["node"], state["ts_ms"], state["interval_ms"], cgroups,
                                        input_ts_ms=int(event.message.timestamp))
            if self.windows.dropped_pods > dropped:
                DROPPED.inc(self.windows.dropped_pods - dropped)
            if done:
                closed.append((event, done))
        if closed:
            await self.publish(closed)

    async def publish(self, closed: Sequence[tuple[Any, list[PodWindow]]]) -> None:
        model = self.models.current
        flat = [w for _, windows in closed for w in windows]
        assessed = assess(flat, model)
        combined = combine(flat, [pressures for *_, pressures in assessed], self.scales,
                           self.settings.monitored_saturated_at)
        results = [(reason, features, c.pressures) for (reason, features, _), c in zip(assessed, combined, strict=True)]
        for c in combined:
            for resource, source in c.sources.items():
                SOURCES.labels(resource, source).inc()
        start = 0
        for event, windows in closed:
            mine, start = results[start:start + len(windows)], start + len(windows)
            try:
                records = [record_of(w, *r, model.version) for w, r in zip(windows, mine, strict=True)]
            except ValueError as exc:  # pydantic's ValidationError: the contract accepted what no record can say
                await self.sink.dead_letter(event, f"pod pressure record: {exc}"[:2000], "processing")
                continue
            attrs: dict[str, Any] = {names.NODE_NAME: windows[0].node, names.MODEL_VERSION: model.version}
            with stage_span(names.SPAN_POD_PRESSURE_INFER, headers_of(event), topic=event.message.topic,
                            group=self.group, attributes=attrs) as ctx:
                for record in records:
                    await self.sink.send(OUT_TOPIC, record.node, record, ctx)
                    RECORDS.labels(record.status, record.reason or "").inc()
                    self.emitted += 1
