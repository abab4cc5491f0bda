"""The anomaly processor: FeatureVector batches → isolation forest (ONNX) → AnomalyScore on anomalies.v1.

Stateless: the output for a window depends only on the window and the model version, so a
replay after a crash republishes the identical score under the same key (node, ts_ms).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import orjson
from prometheus_client import Counter

from contracts import AnomalyScore, encode
from contracts import telemetry as names
from contracts.topics import Topic
from featurelib.node.schema import node_feature_schema_hash
from services.anomaly.model import AnomalyModel
from services.anomaly.settings import AnomalySettings
from services.runtime.batch_stream import Batch, BatchStream, events_of
from services.runtime.model_watch import ModelWatcher
from services.runtime.stream_io import Sink, headers_of
from services.runtime.stream_settings import app_id
from services.runtime.stream_trace import stage_span
from services.runtime.vector_batch import score_vectors

log = logging.getLogger(__name__)
SERVICE = "anomaly"
IN_TOPIC = Topic.FEATURES
OUT_TOPIC = Topic.ANOMALIES
SCORED = Counter("borg_anomaly_windows_total", "Feature windows by outcome", ["outcome"])
_NAME_MAX = 253  # AnomalyScore.model_version's bound (tests/unit/test_regime_service.py pins it)


class AnomalyProcessor:
    def __init__(self, settings: AnomalySettings, sink: Sink, models: ModelWatcher[AnomalyModel]) -> None:
        self.settings = settings
        self.sink = sink
        self.models = models
        self.schema_hash = node_feature_schema_hash()
        self.group = app_id(SERVICE, settings.topic_prefix)
        self.stream = BatchStream(service=SERVICE, settings=settings, sink=sink, topics=[IN_TOPIC],
                                  handle=self._handle)
        self.emitted = 0
        self._outcomes: dict[str, Counter] = {}

    async def _handle(self, batch: Batch) -> None:
        # every partition's records in one model call
        await self.handle_batch([event for records in batch.values() for event in events_of(records)])

    def _count(self, outcome: str, n: int) -> None:
        child = self._outcomes.get(outcome)
        if child is None:
            child = self._outcomes[outcome] = SCORED.labels(outcome)
        child.inc(n)

    async def handle_batch(self, events: list[Any]) -> None:
        scored = await score_vectors(events, sink=self.sink, models=self.models, schema_hash=self.schema_hash,
                                     consumer=SERVICE)
        if scored.failed:
            self._count("model_failed", scored.failed)
        if not scored.rows:
            return
        model = scored.model
        threshold = self.settings.threshold or model.threshold
        version = model.version
        (scores,) = scored.outputs
        # AnomalyScore's bounds hold for every row (the model clips the score to [0, 1]):
        # build scores without validation, else validate them as always
        trusted = (type(threshold) is float and 0.0 <= threshold <= 1.0 and type(version) is str
                   and 0 < len(version) <= _NAME_MAX and bool(np.all((scores >= 0.0) & (scores <= 1.0))))
        anomalies = normal = 0
        try:
            # one conversion per batch instead of a numpy scalar per row (same doubles)
            for event, vector, score in zip(scored.events, scored.rows, scores.tolist(), strict=True):
                node = vector.node
                is_anomaly = score >= threshold
                fields = {"node": node, "ts_ms": vector.ts_ms, "score": score, "is_anomaly": is_anomaly,
                          "threshold": threshold, "model_version": version, "input_ts_ms": vector.input_ts_ms}
                # trusted: valid by construction, and these are the bytes encode() writes (the dict is
                # model_dump's, in field order); else validated (and refused) as always
                encoded = orjson.dumps(fields) if trusted else encode(AnomalyScore(**fields))
                if is_anomaly:
                    anomalies += 1
                else:
                    normal += 1
                attrs: dict[str, Any] = {names.NODE_NAME: node, names.ANOMALY_SCORE: score,
                                         names.MODEL_VERSION: version}
                with stage_span(names.SPAN_ANOMALY_INFER, headers_of(event), topic=event.message.topic,
                                group=self.group, attributes=attrs) as ctx:
                    await self.sink.send_encoded(OUT_TOPIC, node, encoded, ctx)
                self.emitted += 1
        finally:
            if anomalies:
                self._count("anomaly", anomalies)
            if normal:
                self._count("normal", normal)
