"""The regime processor: FeatureVector batches → ONNX → abstention → hysteresis → RegimeLabelV2 on regimes.v2.

Per batch of input (up to ``STREAM_BATCH_MAX`` records): decode and check
each vector (schema hash and length), run the model once on the batch (falling back to
row-by-row to dead-letter only the rows that make it fail; ``services.runtime.vector_batch``),
judge the batch once (``RegimeModel.judge``: a reason bitmask and an out-of-distribution score
per row), then advance each node's hysteresis state (changelog
``<prefix>borg-regime-hysteresis-changelog``) and publish to the compacted regimes.v2
(``contracts.topics.REGIMES_TOPIC``; regimes.v1 is read-only).

A window the model abstains on (non-zero mask) is answered ``regime="unknown"``,
``raw_regime="unknown"``, ``confidence=0``, ``interference={}``, ``abstain`` = the reasons
(``abstention.reasons_of``), ``ood_score`` = the score when finite; ``unknown`` is reported at
once and the next answered window starts hysteresis afresh (``hysteresis`` says why). An
answered window carries its ``ood_score`` too, when the model computes one. Outcomes are
counted in ``borg_regime_windows_total`` (``unknown`` for abstentions) and the span of an
``unknown`` window has ``regime.abstain`` (the reasons, comma-joined).

A window already handled (same node and ``ts_ms``) is answered with the
identical label, so replays after a crash are idempotent on the key (node, ts_ms) (the last
``REPLAY_HISTORY`` labels per node are kept for that, as sent; an unknown one as well).

The changelog state holds each node's record as bytes (``hysteresis`` describes it); the
processor keeps each record decoded beside it (``memory``), so a window costs one record
written and none parsed. A decoded record is used only while the state still holds the very
bytes object it was decoded from: a restore (new objects) or a forget (key gone) after a
partition moves makes it decode again or start afresh, exactly as reading the state would.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
from prometheus_client import Counter

from contracts import RegimeLabelV2, encode
from contracts import telemetry as names
from contracts.headers import Headers
from contracts.models import REGIMES, UNKNOWN_REGIME
from contracts.topics import REGIMES_TOPIC, Topic
from featurelib.node.schema import node_feature_schema_hash
from services.regime import hysteresis
from services.regime.abstention import reasons_of
from services.regime.model import RegimeModel
from services.regime.settings import RegimeSettings
from services.regime.shadow import RegimeShadow
from services.runtime.batch_stream import Batch, BatchStream, ChangelogState, events_of
from services.runtime.model_watch import ModelWatcher
from services.runtime.rollout_watch import RolloutWatcher
from services.runtime.stream_io import Sink, headers_of
from services.runtime.stream_settings import app_id, changelog_name
from services.runtime.stream_trace import quiet_stage, stage_span
from services.runtime.vector_batch import ScoredBatch, model_input, score_vectors

log = logging.getLogger(__name__)
SERVICE = "regime"
IN_TOPIC = Topic.FEATURES
OUT_TOPIC = REGIMES_TOPIC
REPLAY_HISTORY = 4
"""Labels kept per node so that re-delivered windows are answered identically. What is delivered again after a
crash is the input since the last commit (every second): one window per node in live operation (a window every
10 s), up to ~4 per node in a drain of 5,000 nodes at ~19,000 windows/s. Older windows are counted ``stale`` and
not answered again. (6 cost 1-3 µs more per window than 3, in writing each node's longer record.)"""
WINDOWS = Counter("borg_regime_windows_total", "Feature windows by outcome", ["outcome"])
MEMORY_SLACK = 1024
"""Decoded records of nodes no longer in the state (partitions moved) kept before a sweep."""
# RegimeLabelV2's bounds (tests/unit/test_regime_service.py pins them to the contract)
_NAME_MAX = 253
_SLOWDOWN_MIN, _SLOWDOWN_MAX = 1.0, 100.0
_REGIMES = frozenset(REGIMES)


class RegimeProcessor:
    def __init__(self, settings: RegimeSettings, sink: Sink, models: ModelWatcher[RegimeModel],
                 rollout: RolloutWatcher[RegimeModel] | None = None, shadow: RegimeShadow | None = None) -> None:
        self.settings = settings
        self.sink = sink
        self.models = models
        # a candidate (docs/rollout.md) is scored beside the current model only while rollout.live is set
        self.rollout = rollout if shadow is not None else None
        self.shadow = shadow
        self.schema_hash = node_feature_schema_hash()
        self.group = app_id(SERVICE, settings.topic_prefix)
        self.state = ChangelogState(bootstrap=settings.kafka_bootstrap,
                                    topic=changelog_name(SERVICE, "hysteresis", settings.topic_prefix),
                                    sink=sink, replication=settings.replication_factor)
        self.stream = BatchStream(service=SERVICE, settings=settings, sink=sink, topics=[IN_TOPIC],
                                  handle=self._handle, state=[self.state])
        self.emitted = 0
        # node → (record, the record decoded). An entry is current while the state holds
        # that very bytes object: a restore replaces it with another, a forget drops it.
        self.memory: dict[str, tuple[bytes, hysteresis.Memory]] = {}
        self._windows: dict[str, Counter] = {}
        self._trusted: tuple[RegimeModel | None, bool] = (None, False)

    async def _handle(self, batch: Batch) -> None:
        # every partition's records in one model call
        await self.handle_batch([event for records in batch.values() for event in events_of(records)])

    async def handle_batch(self, events: list[Any]) -> None:
        scored = await score_vectors(events, sink=self.sink, models=self.models, schema_hash=self.schema_hash,
                                     consumer=SERVICE)
        if scored.failed:
            self._count("model_failed", scored.failed)
        if scored.rows:
            live = None if self.rollout is None else self.rollout.live
            if live is None or self.shadow is None:
                await self._publish(scored)
            else:
                for part in self.shadow.split(scored, live):
                    await self._publish(part, live.headers)
            await self.state.drain()
            if len(self.memory) > len(self.state.data) + MEMORY_SLACK:
                self._sweep()

    def _count(self, outcome: str, n: int) -> None:
        child = self._windows.get(outcome)
        if child is None:
            child = self._windows[outcome] = WINDOWS.labels(outcome)
        child.inc(n)

    def _trusts(self, model: RegimeModel) -> bool:
        """Whether labels of this model are valid whatever the (finite) model outputs (so need no validation)."""
        if self._trusted[0] is not model:
            classes = model.card["outputs"]["workload_classes"]
            self._trusted = (model, type(model.version) is str and 0 < len(model.version) <= _NAME_MAX
                             and _REGIMES.issuperset(model.regimes) and all(type(c) is str for c in classes))
        return self._trusted[1]

    def recall(self, node: str) -> hysteresis.Memory | None:
        """The node's hysteresis record, decoded once per record the state holds."""
        raw = self.state.get(node)
        if raw is None:
            self.memory.pop(node, None)
            return None
        hit = self.memory.get(node)
        if hit is not None and hit[0] is raw:
            return hit[1]
        memory = hysteresis.decode(raw)
        self.memory[node] = (raw, memory)
        return memory

    def _sweep(self) -> None:
        data = self.state.data
        self.memory = {node: hit for node, hit in self.memory.items() if data.get(node.encode()) is hit[0]}

    async def _publish(self, scored: ScoredBatch[RegimeModel], headers: Headers | None = None) -> None:
        model = scored.model
        probs, slowdown = scored.outputs
        x = scored.inputs if scored.inputs is not None else model_input(scored.rows)  # score_vectors keeps them
        # one vectorised judgement per batch: reason bits and OOD score per row
        masks, oods = model.judge(x, probs)
        regimes = model.regimes
        index = {r: i for i, r in reversed(list(enumerate(regimes)))}  # the first index, as regimes.index
        classes = model.card["outputs"]["workload_classes"]
        version = model.version
        # RegimeLabelV2's bounds hold for every row (the model clips; confidence is clipped
        # here; reasons come from abstention; ood_score is passed only when finite and >= 0):
        # build labels without validation, else validate them as always
        trusts = self._trusts(model)
        trusted = trusts and bool(np.all((slowdown >= _SLOWDOWN_MIN) & (slowdown <= _SLOWDOWN_MAX)))
        windows = self.settings.hysteresis_windows
        # one conversion per batch instead of numpy scalars per row (same doubles)
        rows = zip(scored.events, scored.rows, probs.argmax(axis=1).tolist(), np.clip(probs, 0.0, 1.0).tolist(),
                   slowdown.tolist(), masks.tolist(), oods.tolist(), strict=True)
        labelled = changed = replayed = stale = unknown = 0
        try:
            for event, vector, raw_index, confidences, interference, mask, ood in rows:
                self.state.partition = event.message.partition
                node = vector.node
                ts_ms = vector.ts_ms
                memory = self.recall(node)
                if memory is not None and ts_ms <= memory.state["ts"]:
                    earlier = memory.earlier(ts_ms)
                    if earlier is not None:
                        # handled before (a replay after a crash): the identical label again (a v1
                        # label of the release before regimes.v2 is sent as the v2 label it reads as)
                        replayed += 1
                        sent = orjson.loads(earlier.encoded)
                        again = RegimeLabelV2.model_validate(sent)
                        await self._send(event, again.node, again.regime, again.confidence, encode(again),
                                         sent["model_version"], again.abstain, headers)
                    else:
                        stale += 1
                    continue
                state = None if memory is None else memory.state
                ood_score = ood if math.isfinite(ood) and ood >= 0.0 else None
                # only bits with a wire name count: "unknown" always comes with its reasons
                reasons: list[str] = reasons_of(mask) if mask else []
                if reasons:
                    step = hysteresis.abstain(state, ts_ms)
                    fields = {
                        "node": node,
                        "ts_ms": ts_ms,
                        "regime": UNKNOWN_REGIME,
                        "confidence": 0.0,
                        "raw_regime": UNKNOWN_REGIME,
                        "changed": step.changed,
                        "interference": {},
                        "abstain": reasons,
                        "ood_score": ood_score,
                        "model_version": version,
                        "input_ts_ms": vector.input_ts_ms,
                    }
                    ok = trusts
                    unknown += 1
                else:
                    raw = regimes[raw_index]
                    step = hysteresis.advance(state, raw, ts_ms, windows=windows)
                    regime = step.regime
                    at = index.get(regime)
                    fields = {
                        "node": node,
                        "ts_ms": ts_ms,
                        "regime": regime,
                        "confidence": confidences[regimes.index(regime) if at is None else at],
                        "raw_regime": raw,
                        "changed": step.changed,
                        "interference": dict(zip(classes, interference, strict=True)),
                        "abstain": reasons,
                        "ood_score": ood_score,
                        "model_version": version,
                        "input_ts_ms": vector.input_ts_ms,
                    }
                    ok = trusted and regime in _REGIMES
                    if step.changed:
                        changed += 1
                    else:
                        labelled += 1
                # trusted: valid by construction, and these are the bytes encode() writes (the
                # dict is model_dump's, in field order); else validated (and refused) as always
                encoded = orjson.dumps(fields) if ok else encode(RegimeLabelV2(**fields))
                latest = hysteresis.label(ts_ms, encoded)
                history = [latest] if memory is None else [*memory.history, latest][-REPLAY_HISTORY:]
                record = hysteresis.encode(step.state, history)
                self.state.put(node, record)
                self.memory[node] = (record, hysteresis.Memory(step.state, history))
                await self._send(event, node, step.regime, fields["confidence"], encoded, version, reasons, headers)
        finally:
            for outcome, n in (("labelled", labelled), ("changed", changed), ("replayed", replayed),
                               ("stale", stale), ("unknown", unknown)):
                if n:
                    self._count(outcome, n)

    async def _send(self, event: Any, node: str, regime: str, confidence: float, encoded: bytes,
                    version: str, abstain: Sequence[str], headers: Headers | None = None) -> None:
        stage = quiet_stage(headers_of(event))
        if stage is not None:  # no span processor (no OTLP endpoint): only the ids matter, no attributes
            await self.sink.send_quiet(OUT_TOPIC, node, encoded, stage, extra_headers=headers)
            self.emitted += 1
            return
        attrs: dict[str, Any] = {names.NODE_NAME: node, names.REGIME_LABEL: regime,
                                 names.REGIME_CONFIDENCE: confidence, names.MODEL_VERSION: version}
        if abstain:
            # a string, not a list: keeps the span on stream_trace's direct path
            attrs[names.REGIME_ABSTAIN] = ",".join(abstain)
        with stage_span(names.SPAN_REGIME_INFER, headers_of(event), topic=event.message.topic, group=self.group,
                        attributes=attrs) as ctx:
            if headers:  # during a rollout: which candidate, which step
                await self.sink.send_encoded(OUT_TOPIC, node, encoded, ctx, extra_headers=headers)
            else:
                await self.sink.send_encoded(OUT_TOPIC, node, encoded, ctx)
        self.emitted += 1
