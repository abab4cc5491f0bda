"""End-to-end latency per stage: input record timestamp → the batch's outputs acknowledged.

``borg_stage_latency_seconds{service, topic}`` is a Prometheus histogram of, for every consumed
record, the time from its Kafka timestamp (the producer's CreateTime: when the node agent or the
stage before published it) to the moment the broker acknowledged every output the batch holding it
produced (for a batch without outputs: when it was handled). Kafka wait, processing and the output
write are all in it: the figure the pipeline's p99 target is about, watchable in production.

A batch is counted in one vectorised step (numpy ``searchsorted`` into the bucket bounds) instead of
one ``Histogram.observe`` per record (~1 µs each, a few per cent of a stage's budget at 15,000
records/s). Each bucket keeps an exemplar: the trace id of the slowest record of the latest batch
that landed there, so a slow bucket links to a trace (exposed in the OpenMetrics format, which
``/metrics`` answers when asked for it, as Prometheus does with exemplar storage on).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence

import numpy as np
from prometheus_client.core import REGISTRY, HistogramMetricFamily, Metric
from prometheus_client.samples import Exemplar

BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds in seconds (the pipeline's p99 target is 0.25 s; restarts and catch-up reach minutes)."""
_BOUNDS_MS = np.array([b * 1000.0 for b in BUCKETS])
NAME = "borg_stage_latency_seconds"
TRACE_ID_LEN = 32


class _Series:
    __slots__ = ("counts", "exemplars", "total_s")

    def __init__(self) -> None:
        self.counts = np.zeros(len(BUCKETS) + 1, dtype=np.int64)  # last: above every bound (+Inf only)
        self.total_s = 0.0
        self.exemplars: list[Exemplar | None] = [None] * (len(BUCKETS) + 1)


class StageLatency:
    """The collector (one per process, ``STAGE_LATENCY``); ``observe`` is cheap enough for every batch."""

    def __init__(self) -> None:
        self._series: dict[tuple[str, str], _Series] = {}
        self._lock = threading.Lock()  # collect() runs in the scrape thread

    def observe(self, service: str, topic: str, timestamps_ms: Sequence[int], now_ms: float | None = None,
                slowest_trace_id: str | None = None) -> None:
        """Count one batch of ``topic``'s records (their Kafka timestamps), done at ``now_ms``."""
        if not timestamps_ms:
            return
        now = time.time() * 1000.0 if now_ms is None else now_ms
        latency_ms = np.maximum(now - np.asarray(timestamps_ms, dtype=np.float64), 0.0)
        slots = np.searchsorted(_BOUNDS_MS, latency_ms, side="left")  # le semantics: x <= bound
        per_slot = np.bincount(slots, minlength=len(BUCKETS) + 1)
        worst_ms = float(latency_ms.max())
        with self._lock:
            series = self._series.get((service, topic))
            if series is None:
                series = self._series[(service, topic)] = _Series()
            series.counts += per_slot
            series.total_s += float(latency_ms.sum()) / 1000.0
            if slowest_trace_id and len(slowest_trace_id) == TRACE_ID_LEN:
                slot = int(np.searchsorted(_BOUNDS_MS, worst_ms, side="left"))
                series.exemplars[slot] = Exemplar({"trace_id": slowest_trace_id}, worst_ms / 1000.0, now / 1000.0)

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(
            NAME,
            "Input record timestamp to the broker's ack of the batch's outputs, per stage and input topic",
            labels=["service", "topic"],
        )
        with self._lock:
            for (service, topic), series in sorted(self._series.items()):
                cumulative = np.cumsum(series.counts).tolist()
                buckets: list[tuple[str, float] | tuple[str, float, Exemplar]] = []
                for i, bound in enumerate((*BUCKETS, float("inf"))):
                    le = "+Inf" if bound == float("inf") else repr(bound)
                    exemplar = series.exemplars[i]
                    buckets.append((le, float(cumulative[i])) if exemplar is None
                                   else (le, float(cumulative[i]), exemplar))
                family.add_metric([service, topic], buckets, series.total_s)
        yield family


STAGE_LATENCY = StageLatency()
REGISTRY.register(STAGE_LATENCY)  # type: ignore[arg-type]
