"""The anomaly processor: FeatureVector batches → isolation forest (ONNX) → AnomalyScore on anomalies.v1.

Stateless: the output for a window depends only on the window and the model version, so a
replay after a crash republishes the identical score under the same key (node, ts_ms).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from prometheus_client import Counter

from contracts import AnomalyScore, ContractError, FeatureVector
from contracts import telemetry as names
from featurelib.node_features import as_model_input, node_feature_schema_hash, vector_problem
from services.anomaly.model import AnomalyModel
from services.anomaly.settings import AnomalySettings
from services.runtime.batch_stream import Batch, BatchStream, events_of
from services.runtime.model_watch import ModelWatcher, infer_rows
from services.runtime.stream_io import Sink, decode_event, headers_of
from services.runtime.stream_settings import app_id
from services.runtime.stream_trace import stage_span

log = logging.getLogger(__name__)
LINGER_S = 0.25
"""Default ``STREAM_BATCH_LINGER_S``: the isolation forest costs ~840 µs for one row, ~30 µs per row in 200."""
SERVICE = "anomaly"
IN_TOPIC = "features.v1"
OUT_TOPIC = "anomalies.v1"
SCORED = Counter("borg_anomaly_windows_total", "Feature windows by outcome", ["outcome"])



class AnomalyProcessor:
    def __init__(self, settings: AnomalySettings, sink: Sink, models: ModelWatcher[AnomalyModel]) -> None:
        self.settings = settings
        self.sink = sink
        self.models = models
        self.schema_hash = node_feature_schema_hash()
        self.group = app_id(SERVICE, settings.topic_prefix)
        self.stream = BatchStream(service=SERVICE, settings=settings, sink=sink, topics=[IN_TOPIC],
                                  handle=self._handle, linger_s=LINGER_S)
        self.emitted = 0

    async def _handle(self, batch: Batch) -> None:
        # every partition's records in one model call
        await self.handle_batch([event for records in batch.values() for event in events_of(records)])

    async def handle_batch(self, events: list[Any]) -> None:
        accepted: list[tuple[Any, FeatureVector]] = []
        for event in events:
            try:
                vector = decode_event(FeatureVector, event)
            except ContractError as exc:
                await self.sink.dead_letter(event, exc.message, exc.kind)
                continue
            assert isinstance(vector, FeatureVector)
            problem = vector_problem(vector, self.schema_hash, "anomaly")
            if problem is not None:
                await self.sink.dead_letter(event, problem, "schema")
                continue
            accepted.append((event, vector))
        if not accepted:
            return
        model = self.models.current
        threshold = self.settings.threshold or model.threshold
        x = np.stack([as_model_input(v.values, v.valid) for _, v in accepted])
        results, errors = infer_rows(model, x)
        for i, (event, vector) in enumerate(accepted):
            result = results[i]
            if result is None:
                SCORED.labels("model_failed").inc()
                await self.sink.dead_letter(event, errors.get(i, "model failed"), "processing")
                continue
            score = float(result[0])
            out = AnomalyScore(node=vector.node, ts_ms=vector.ts_ms, score=score, is_anomaly=score >= threshold,
                               threshold=threshold, model_version=model.version, input_ts_ms=vector.input_ts_ms)
            SCORED.labels("anomaly" if out.is_anomaly else "normal").inc()
            attrs: dict[str, Any] = {names.NODE_NAME: out.node, names.ANOMALY_SCORE: score,
                                     names.MODEL_VERSION: model.version}
            with stage_span(names.SPAN_ANOMALY_INFER, headers_of(event), topic=event.message.topic,
                            group=self.group, attributes=attrs) as (_, ctx):
                await self.sink.send(OUT_TOPIC, out.node, out, ctx)
            self.emitted += 1
