"""The forecast processor: FeatureVector stream → per-node 5-minute load history → LoadForecast on forecasts.v1.

Per node it keeps a ``featurelib.load_features.LoadHistory`` (the last 24 h + 5 min of 5-minute bucket
means of CPU and memory utilisation), fed one sample per feature vector (``featurelib.load_serving``).
A vector in a later bucket closes the node's open bucket: the stage then computes the model's 36 inputs
at that bucket, runs the 12 ONNX boosters for every bucket closed in the batch in one call per booster,
and publishes one record keyed by node (compacted). So a node gets one forecast per 5 minutes, made from
exactly what the trainer computed on the trace (``tests/unit/test_forecast_service.py`` checks parity).

A node whose history holds fewer than ``FORECAST_MIN_HISTORY_BUCKETS`` buckets with a sample, or whose
last bucket has no CPU or no memory sample, gets an ``unknown`` record saying why, without quantiles;
so does a row the model returns no finite number for. Nothing acts on an ``unknown`` record.

State: each node's closed buckets are written to the changelog ``<prefix>borg-forecast-history-changelog``
when a bucket closes (one record per node per 5 minutes, ~7 KB at full depth) and restored on assignment.
The open bucket is not persisted: after a restart it is rebuilt from the input re-read after the committed
offset (samples consumed before that offset are missing from that one bucket's mean).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from prometheus_client import Counter

from contracts import ContractError
from contracts import telemetry as names
from contracts.fast.featurevector import decode_feature_row
from contracts.models import ForecastUnknownReason, LoadForecast, LoadQuantiles
from contracts.topics import FORECASTS_TOPIC, Topic
from featurelib.load_features import HISTORY, LOAD_FEATURE_INDEX, STEP_S, LoadHistory, bucket_of
from featurelib.load_serving import load_sample
from featurelib.node.schema import node_feature_schema_hash, vector_problem
from services.forecast.model import ForecastModel
from services.forecast.settings import ForecastSettings
from services.runtime.batch_stream import Batch, BatchStream, ChangelogState, events_of
from services.runtime.model_watch import ModelWatcher, infer_rows
from services.runtime.stream_io import Sink, headers_of
from services.runtime.stream_settings import app_id, changelog_name
from services.runtime.stream_trace import stage_span

log = logging.getLogger(__name__)
SERVICE = "forecast"
IN_TOPIC = Topic.FEATURES
OUT_TOPIC = FORECASTS_TOPIC
FORECASTS = Counter("borg_forecast_records_total", "Forecast records published by status", ["status"])
VECTORS = Counter("borg_forecast_vectors_total", "Feature vectors taken into a node's load history")
_CPU_LAST = LOAD_FEATURE_INDEX["cpu_last"]
_MEM_LAST = LOAD_FEATURE_INDEX["mem_last"]


@dataclass(frozen=True, slots=True)
class Closed:
    """A bucket that closed for a node: the model's inputs at it and what the record needs."""

    event: Any
    node: str
    bucket: int
    ts_ms: int
    input_ts_ms: int
    features: list[float]
    history_buckets: int


class HistoryState(ChangelogState):
    """The changelog of the nodes' closed buckets, plus the decoded histories in use."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.histories: dict[str, LoadHistory] = {}

    def history(self, node: str) -> LoadHistory:
        history = self.histories.get(node)
        if history is None:
            raw = self.get(node)
            history = LoadHistory()
            if raw is not None:
                try:
                    history = LoadHistory.from_snapshot(raw)
                except ValueError as exc:  # another layout: start the node afresh rather than stop the stage
                    log.warning("forecast history of %s unreadable, starting afresh: %s", node, exc)
            self.histories[node] = history
        return history

    async def restore(self, partitions: Sequence[int]) -> None:
        await super().restore(partitions)
        wanted = set(partitions)
        restored = {k.decode() for k, p in self.owner.items() if p in wanted}
        for node in restored:
            self.histories.pop(node, None)  # decoded again from the restored bytes on first use

    def forget(self, partitions: set[int]) -> None:
        gone = {k.decode() for k, p in self.owner.items() if p in partitions}
        super().forget(partitions)
        for node in gone:
            self.histories.pop(node, None)


def unknown_reason(features: Sequence[float], history_buckets: int, min_history: int) -> ForecastUnknownReason | None:
    """Why no forecast is made from these inputs (None: the model may answer)."""
    if history_buckets < min_history:
        return "insufficient_history"
    if math.isnan(features[_CPU_LAST]) or math.isnan(features[_MEM_LAST]):
        return "inputs_missing"
    return None


def quantiles(model: ForecastModel, values: Sequence[float]) -> list[LoadQuantiles]:
    """The model's per-head percentages → fractions, with p90 raised to p50 where the boosters cross."""
    by_head = {(h.resource, h.horizon_s, h.quantile): min(max(float(v) / 100.0, 0.0), 1.0)
               for h, v in zip(model.heads, values, strict=True)}
    out: list[LoadQuantiles] = []
    for horizon in model.horizons_s:
        for resource in ("cpu", "memory"):
            p50 = by_head[(resource, horizon, 0.5)]
            out.append(LoadQuantiles(horizon_s=horizon, resource=resource, p50=p50,
                                     p90=max(p50, by_head[(resource, horizon, 0.9)])))
    return out


class ForecastProcessor:
    def __init__(self, settings: ForecastSettings, sink: Sink, models: ModelWatcher[ForecastModel]) -> None:
        self.settings = settings
        self.sink = sink
        self.models = models
        self.schema_hash = node_feature_schema_hash()
        self.group = app_id(SERVICE, settings.topic_prefix)
        self.state = HistoryState(bootstrap=settings.kafka_bootstrap,
                                  topic=changelog_name(SERVICE, "history", settings.topic_prefix),
                                  sink=sink, replication=settings.replication_factor)
        self.stream = BatchStream(service=SERVICE, settings=settings, sink=sink, topics=[IN_TOPIC],
                                  handle=self._handle, state=[self.state])
        self.emitted = 0
        self.vectors = 0

    async def _handle(self, batch: Batch) -> None:
        closed: list[Closed] = []
        for records in batch.values():
            for event in events_of(records):
                item = await self.observe(event)
                if item is not None:
                    closed.append(item)
        # forecasts before the histories that closed them: a crash in between re-closes those buckets from the
        # re-read input and forecasts them again (same key), instead of losing their records
        if closed:
            await self.publish(closed)
        await self.state.drain()

    async def observe(self, event: Any) -> Closed | None:
        """Take one vector into its node's history; the bucket it closed, if any."""
        try:
            row = decode_feature_row(event.message.value)
        except ContractError as exc:
            await self.sink.dead_letter(event, exc.message, exc.kind)
            return None
        problem = vector_problem(row, self.schema_hash, SERVICE)
        if problem is not None:
            await self.sink.dead_letter(event, problem, "schema")
            return None
        history = self.state.history(row.node)
        t_s, cpu, mem = load_sample(row.ts_ms, row.window_s, row.values, row.valid)
        if history.last_closed is not None and bucket_of(t_s) < history.last_closed - HISTORY:
            # more than a day before what the node has seen: a new replay or a reset clock, not a late
            # sample; start the node afresh instead of dropping its every sample as late
            history = self.state.histories[row.node] = LoadHistory()
        bucket = history.observe(t_s, cpu, mem)
        self.vectors += 1
        VECTORS.inc()
        if bucket is None:
            return None
        features = history.features()
        assert features is not None  # a bucket just closed
        self.state.partition = event.message.partition
        self.state.put(row.node, history.snapshot())
        return Closed(event, row.node, bucket, row.ts_ms, row.input_ts_ms, features,
                      history.valid_buckets())

    async def publish(self, closed: Sequence[Closed]) -> None:
        model = self.models.current
        reasons = [unknown_reason(c.features, c.history_buckets, self.settings.min_history_buckets) for c in closed]
        ready = [i for i, r in enumerate(reasons) if r is None]
        answers: dict[int, list[LoadQuantiles]] = {}
        if ready:
            x = np.asarray([closed[i].features for i in ready], dtype=np.float32)
            results, _ = infer_rows(model, x)
            for i, result in zip(ready, results, strict=True):
                if result is None:
                    reasons[i] = "model_failed"
                else:
                    answers[i] = quantiles(model, [float(v) for v in result])
        for i, c in enumerate(closed):
            got = answers.get(i)
            reason = reasons[i]
            record = LoadForecast(node=c.node, ts_ms=c.ts_ms, window_end_ms=(c.bucket + 1) * STEP_S * 1000,
                                  status="ok" if got else "unknown", reason=None if got else reason,
                                  history_buckets=c.history_buckets, quantiles=got or [],
                                  model_version=model.version, input_ts_ms=c.input_ts_ms)
            attrs: dict[str, Any] = {names.NODE_NAME: c.node, names.MODEL_VERSION: model.version}
            with stage_span(names.SPAN_FORECAST_INFER, headers_of(c.event), topic=c.event.message.topic,
                            group=self.group, attributes=attrs) as ctx:
                await self.sink.send(OUT_TOPIC, c.node, record, ctx)
            FORECASTS.labels(record.status).inc()
            self.emitted += 1
