"""The anomaly faust app: FeatureVector batches → isolation forest (ONNX) → AnomalyScore on anomalies.v1.

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
from services.runtime.faust_app import app_id, make_app, raw_topic
from services.runtime.faust_io import Sink, decode_event, flush_before_commit, headers_of
from services.runtime.faust_models import ModelWatcher, infer_rows
from services.runtime.faust_trace import stage_span

log = logging.getLogger(__name__)
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
        self.app = make_app(SERVICE, settings)
        flush_before_commit(self.app, sink)
        self.group = app_id(SERVICE, settings.topic_prefix)
        self.source = raw_topic(self.app, settings.topic(IN_TOPIC))
        self.events = 0
        self.emitted = 0
        self.app.agent(self.source, name=f"{self.group}.features")(self._agent)

    async def _agent(self, stream: Any) -> None:
        async for events in stream.take_events(self.settings.batch_max, self.settings.batch_within_s):
            await self.handle_batch(events)
            if self.settings.flush_each_batch:
                await self.sink.flush()
            self.events += len(events)

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
