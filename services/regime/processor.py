"""The regime processor: FeatureVector batches → ONNX → hysteresis → RegimeLabel on compacted regimes.v1.

Per batch of input (up to ``STREAM_BATCH_MAX`` records): decode and check
each vector (schema hash and length), run the model once on the batch (falling back to
row-by-row to dead-letter only the rows that make it fail), then advance each node's
hysteresis state (changelog ``<prefix>borg-regime-hysteresis-changelog``) and publish. A
window already handled (same node and ``ts_ms``) is answered with the identical label, so
replays after a crash are idempotent on the key (node, ts_ms) (the last ``REPLAY_HISTORY``
labels per node are kept for that).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import orjson
from prometheus_client import Counter

from contracts import ContractError, FeatureVector, RegimeLabel
from contracts import telemetry as names
from featurelib.node_features import as_model_input, node_feature_schema_hash, vector_problem
from services.regime import hysteresis
from services.regime.model import RegimeModel
from services.regime.settings import RegimeSettings
from services.runtime.batch_stream import Batch, BatchStream, ChangelogState, events_of
from services.runtime.model_watch import ModelWatcher, infer_rows
from services.runtime.stream_io import Sink, decode_event, headers_of
from services.runtime.stream_settings import app_id
from services.runtime.stream_trace import stage_span

log = logging.getLogger(__name__)
LINGER_S = 0.02
"""Default ``STREAM_BATCH_LINGER_S``: one model call per batch."""
SERVICE = "regime"
IN_TOPIC = "features.v1"
OUT_TOPIC = "regimes.v1"
REPLAY_HISTORY = 6
"""Labels kept per node so that re-delivered windows are answered identically."""
WINDOWS = Counter("borg_regime_windows_total", "Feature windows by outcome", ["outcome"])



class RegimeProcessor:
    def __init__(self, settings: RegimeSettings, sink: Sink, models: ModelWatcher[RegimeModel]) -> None:
        self.settings = settings
        self.sink = sink
        self.models = models
        self.schema_hash = node_feature_schema_hash()
        self.group = app_id(SERVICE, settings.topic_prefix)
        self.state = ChangelogState(bootstrap=settings.kafka_bootstrap, topic=f"{self.group}-hysteresis-changelog",
                                    sink=sink, replication=settings.replication_factor)
        self.stream = BatchStream(service=SERVICE, settings=settings, sink=sink, topics=[IN_TOPIC],
                                  handle=self._handle, state=[self.state], linger_s=LINGER_S)
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
            problem = vector_problem(vector, self.schema_hash, "regime")
            if problem is not None:
                await self.sink.dead_letter(event, problem, "schema")
                continue
            accepted.append((event, vector))
        if not accepted:
            return
        model = self.models.current
        x = np.stack([as_model_input(v.values, v.valid) for _, v in accepted])
        results, errors = infer_rows(model, x)
        for i, (event, vector) in enumerate(accepted):
            result = results[i]
            if result is None:
                WINDOWS.labels("model_failed").inc()
                await self.sink.dead_letter(event, errors.get(i, "model failed"), "processing")
                continue
            await self._publish(event, vector, model, result[0], result[1])
        await self.state.drain()

    async def _publish(self, event: Any, vector: FeatureVector, model: RegimeModel, probs: np.ndarray,
                       slowdown: np.ndarray) -> None:
        self.state.partition = event.message.partition
        state = hysteresis.load(self.state.get(vector.node))
        if state is not None and vector.ts_ms <= state["ts"]:
            earlier = next((h for h in state.get("history", []) if h["ts_ms"] == vector.ts_ms), None)
            if earlier is not None:
                # handled before (a replay after a crash): the identical label again
                WINDOWS.labels("replayed").inc()
                await self._send(event, RegimeLabel.model_validate(earlier), earlier["model_version"])
            else:
                WINDOWS.labels("stale").inc()
            return
        raw_idx = int(np.argmax(probs))
        raw = model.regimes[raw_idx]
        step = hysteresis.advance(state, raw, vector.ts_ms, windows=self.settings.hysteresis_windows)
        label = RegimeLabel(
            node=vector.node,
            ts_ms=vector.ts_ms,
            regime=step.regime,  # type: ignore[arg-type]
            confidence=float(np.clip(probs[model.regimes.index(step.regime)], 0.0, 1.0)),
            raw_regime=raw,  # type: ignore[arg-type]
            changed=step.changed,
            interference={c: float(s) for c, s in zip(model.card["outputs"]["workload_classes"], slowdown,
                                                       strict=True)},
            model_version=model.version,
            input_ts_ms=vector.input_ts_ms,
        )
        history = [*(state or {}).get("history", []), label.model_dump(mode="json")][-REPLAY_HISTORY:]
        self.state.put(vector.node, orjson.dumps({**step.state, "history": history}))
        WINDOWS.labels("changed" if step.changed else "labelled").inc()
        await self._send(event, label, model.version)

    async def _send(self, event: Any, label: RegimeLabel, version: str) -> None:
        attrs: dict[str, Any] = {names.NODE_NAME: label.node, names.REGIME_LABEL: label.regime,
                                 names.REGIME_CONFIDENCE: label.confidence, names.MODEL_VERSION: version}
        with stage_span(names.SPAN_REGIME_INFER, headers_of(event), topic=event.message.topic, group=self.group,
                        attributes=attrs) as (_, ctx):
            await self.sink.send(OUT_TOPIC, label.node, label, ctx)
        self.emitted += 1
