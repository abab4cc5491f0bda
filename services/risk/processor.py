"""The risk processor: task events joined with the node's latest features → FailureRiskV2 on risk.v2.

Two inputs in one consumer group (one replica; see ``state.py``):

* ``features.v1`` → the ``node_features`` state (changelog
  ``<prefix>borg-risk-node_features-changelog``): each node's newest vector and the trace
  context it arrived with;
* ``taskevents.v1`` → task history → the running task's probabilities per horizon (ONNX,
  one row each) → a ``task`` FailureRisk, and a ``node`` FailureRisk aggregating the
  node's running tasks (``aggregate.py``). A task that stops gets a final record with
  probability 0 (its run can no longer fail) and leaves its node's aggregate.

A periodic re-score (``RISK_RESCORE_S``) scores every running task in one batch (native
XGBoost when the batch is large and boosters ship with the model), so risk follows node
features and elapsed time between events. Keys on risk.v2 are ``task:<id>`` and
``node:<name>`` (one compacted topic, no collisions). Outputs continue the task event's
trace and link to the trace of the node features joined (a fan-in).

Each task record says which of its inputs were outside the model's training range
(``out_of_range``: the card's ``input_ranges``, ``ranges.py``) or could not be put on the
Borg scale (``<field>:unmapped``, ``featurelib.borg_units``); a node record counts its
tasks with any (``tasks_out_of_range``). Agents do not act on such a probability alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from opentelemetry.trace import Link
from prometheus_client import Counter

from contracts import ContractError, TaskEvent, encode
from contracts import telemetry as names
from contracts.fast.featurevector import decode_feature_row
from contracts.models import FailureRiskV2, HorizonRisk
from contracts.topics import RISK_TOPIC, Topic
from featurelib.node.schema import node_feature_schema_hash, vector_problem
from services.risk import node_record
from services.risk.aggregate import node_probability
from services.risk.model import FailureModel
from services.risk.ranges import merge
from services.risk.settings import RiskSettings
from services.risk.shadow import RiskShadowStats, compare
from services.risk.state import RiskState
from services.runtime.batch_stream import Batch, BatchStream, ChangelogState, events_of
from services.runtime.model_watch import ModelWatcher, infer_rows
from services.runtime.pause import pause
from services.runtime.rollout import node_bucket
from services.runtime.rollout_watch import Live, RolloutWatcher
from services.runtime.stream_io import Sink, decode_event, headers_of, timestamp_ms
from services.runtime.stream_settings import app_id, changelog_name
from services.runtime.stream_trace import link_to, stage_span

log = logging.getLogger(__name__)
SERVICE = "risk"
TASK_TOPIC = Topic.TASKEVENTS
FEATURE_TOPIC = Topic.FEATURES
OUT_TOPIC = RISK_TOPIC
SCORED = Counter("borg_risk_scored_total", "Task scorings by trigger and backend", ["trigger", "backend"])


def task_key(task_id: str) -> str:
    return f"task:{task_id}"


def node_key(node: str) -> str:
    return f"node:{node}"


class RiskProcessor:
    def __init__(self, settings: RiskSettings, sink: Sink, models: ModelWatcher[FailureModel],
                 state: RiskState | None = None, rollout: RolloutWatcher[FailureModel] | None = None,
                 shadow: RiskShadowStats | None = None) -> None:
        self.settings = settings
        self.sink = sink
        self.models = models
        # a candidate (docs/rollout.md) is scored beside the current model only while rollout.live is set
        self.rollout = rollout if shadow is not None else None
        self.shadow = shadow
        self.state = state or RiskState(largest=settings.largest_node())
        self.node_schema = node_feature_schema_hash()
        self.group = app_id(SERVICE, settings.topic_prefix)
        self.nodes = ChangelogState(bootstrap=settings.kafka_bootstrap,
                                    topic=changelog_name(SERVICE, "node_features", settings.topic_prefix),
                                    sink=sink, replication=settings.replication_factor)
        self.stream = BatchStream(service=SERVICE, settings=settings, sink=sink, topics=[TASK_TOPIC, FEATURE_TOPIC],
                                  handle=self._handle, state=[self.nodes])
        self.task_topic = settings.topic(TASK_TOPIC)
        self.task_events = 0
        self.feature_events = 0
        self.emitted = 0

    def _nodes(self) -> ChangelogState:
        return self.nodes

    async def _handle(self, batch: Batch) -> None:
        # node features first: a task event in the same batch joins the newest vector
        for tp, records in sorted(batch.items(), key=lambda item: item[0].topic == self.task_topic):
            events = events_of(records)
            if tp.topic == self.task_topic:
                await self.handle_tasks(events)
                self.task_events += len(events)
            else:
                for event in events:
                    await self.handle_features(event)
                await self.nodes.drain()
                self.feature_events += len(events)

    # -- node features ------------------------------------------------------------------------
    async def handle_features(self, event: Any) -> None:
        try:
            vector = decode_feature_row(event.message.value)
        except ContractError as exc:
            await self.sink.dead_letter(event, exc.message, exc.kind)
            return
        problem = vector_problem(vector, self.node_schema, SERVICE)
        if problem is not None:
            await self.sink.dead_letter(event, problem, "schema")
            return
        table = self._nodes()
        current = table.get(vector.node)
        if current is not None and node_record.ts_of(current) > vector.ts_ms:
            return  # an older window delivered late: keep the newest
        tp = dict(headers_of(event)).get("traceparent", b"").decode("ascii", "replace")
        table.partition = event.message.partition
        table.put(vector.node, node_record.encode(vector.ts_ms, vector.input_ts_ms, vector.values, vector.valid, tp))

    def node_features(self, node: str) -> tuple[np.ndarray | None, Link | None]:
        """The node's newest feature row (NaN = invalid) if fresh enough, and a link to its trace."""
        raw = self._nodes().get(node)
        if raw is None:
            return None, None
        record = node_record.decode(raw)
        link = link_to([("traceparent", record.traceparent.encode())]) if record.traceparent else None
        age_s = (self.state.last_ts_ms - record.ts_ms) / 1000
        if age_s > self.settings.node_features_max_age_s and self.state.last_ts_ms > 0:
            return None, link
        return record.row, link

    # -- task events ----------------------------------------------------------------------------
    async def handle_tasks(self, events: Sequence[Any]) -> None:
        for event in events:
            try:
                task = decode_event(TaskEvent, event)
            except ContractError as exc:
                await self.sink.dead_letter(event, exc.message, exc.kind)
                continue
            assert isinstance(task, TaskEvent)
            try:
                change = self.state.observe(task)
            except Exception as exc:
                await self.sink.dead_letter(event, f"{type(exc).__name__}: {exc}", "processing")
                continue
            headers = headers_of(event)
            input_ts = timestamp_ms(event)
            if change.running:
                await self._score_and_publish([task.task_id], "event", headers, input_ts, task.ts_ms, event)
            elif change.node_before is not None:
                await self._publish_final(task, change.node_before, headers, input_ts)

    def _rows(self, model: FailureModel, task_ids: Sequence[str]) -> tuple[np.ndarray, list[Link]]:
        x = self.state.task_rows(task_ids)
        links: list[Link] = []
        node_part = np.full((len(task_ids), len(model.node_columns)), np.nan, dtype=np.float32)
        for i, t in enumerate(task_ids):
            row, link = self.node_features(self.state.running[t].node)
            if link is not None:
                links.append(link)
            if row is not None and model.uses_node_features:
                node_part[i] = row[model.node_columns]
        return (np.concatenate([x, node_part], axis=1) if model.uses_node_features else x), links

    def _live(self) -> Live[FailureModel] | None:
        return None if self.rollout is None else self.rollout.live

    def _serving(self, live: Live[FailureModel] | None, node: str) -> FailureModel | None:
        """The candidate when it answers for ``node`` at this step, else None (the current model)."""
        if live is None or node_bucket(node) >= live.state.fraction:
            return None
        return live.model

    async def _score_and_publish(self, task_ids: Sequence[str], trigger: str, headers: Sequence[tuple[str, bytes]],
                                 input_ts: int, ts_ms: int, event: Any | None) -> None:
        model = self.models.current
        x, links = self._rows(model, task_ids)
        results, errors = infer_rows(model, x)
        live = self._live()
        shadow: list[np.ndarray | None] | None = None
        if live is not None and self.shadow is not None:
            shadow = compare(self.shadow, model, live.model, lambda m: self._rows(m, task_ids)[0], results)
        SCORED.labels(trigger, model.backend_for(len(x))).inc(len(task_ids))
        outside = model.ranges.outside(x) if model.ranges is not None else [()] * len(task_ids)
        flags = self.state.flags(task_ids)
        touched: set[str] = set()
        for i, t in enumerate(task_ids):
            result = results[i]
            if result is None:
                if event is not None:
                    await self.sink.dead_letter(event, errors.get(i, "model failed"), "processing")
                continue
            running = self.state.running[t]
            answering, answer = model, result[0]
            candidate = self._serving(live, running.node)
            if candidate is not None and shadow is not None:
                served = shadow[i]
                if served is not None:  # else the candidate failed on it: the current model answers
                    answering, answer = candidate, served
            probs = tuple(float(p) for p in answer)
            out_of_range = tuple(merge(outside[i], tuple(flags[i])))
            if trigger == "rescore" and running.probabilities is not None and out_of_range == running.out_of_range \
                    and max(abs(a - b) for a, b in zip(probs, running.probabilities, strict=True)
                            ) < self.settings.rescore_min_change:
                continue
            running.probabilities = probs
            running.out_of_range = out_of_range
            risk = FailureRiskV2(target_kind="task", target=t, node=running.node, ts_ms=ts_ms,
                                 horizons=self._horizons(answering, probs), tasks=1, out_of_range=list(out_of_range),
                                 model_version=answering.version, input_ts_ms=input_ts)
            task_links = [lk for lk in links if lk is not None][:8] if len(task_ids) == 1 else []
            await self._send(task_key(t), risk, headers, task_links, None if live is None else live.headers)
            touched.add(running.node)
        for node in sorted(touched):
            await self._publish_node(node, headers, input_ts, ts_ms)

    async def _publish_final(self, task: TaskEvent, node: str, headers: Sequence[tuple[str, bytes]],
                             input_ts: int) -> None:
        live = self._live()
        model = self._serving(live, node) or self.models.current
        # a stopped run cannot fail: 0 is a fact, not a model output, so no input is out of range
        risk = FailureRiskV2(target_kind="task", target=task.task_id, node=node, ts_ms=task.ts_ms,
                             horizons=self._horizons(model, [0.0] * len(model.horizons_s)), tasks=1,
                             model_version=model.version, input_ts_ms=input_ts)
        await self._send(task_key(task.task_id), risk, headers, [], None if live is None else live.headers)
        await self._publish_node(node, headers, input_ts, task.ts_ms)

    async def _publish_node(self, node: str, headers: Sequence[tuple[str, bytes]], input_ts: int,
                            ts_ms: int) -> None:
        live = self._live()
        model = self._serving(live, node) or self.models.current
        tasks = self.state.node_tasks(node)
        scored = [t for t in tasks if t.probabilities is not None]
        probs = node_probability([t.probabilities for t in scored if t.probabilities is not None],
                                 len(model.horizons_s))
        _, link = self.node_features(node)
        risk = FailureRiskV2(target_kind="node", target=node, node=node, ts_ms=ts_ms,
                             horizons=self._horizons(model, probs), tasks=len(scored),
                             tasks_out_of_range=sum(1 for t in scored if t.out_of_range),
                             model_version=model.version, input_ts_ms=input_ts)
        await self._send(node_key(node), risk, headers, [link] if link is not None else [],
                         None if live is None else live.headers)

    @staticmethod
    def _horizons(model: FailureModel, probs: Iterable[float]) -> list[HorizonRisk]:
        return [HorizonRisk(horizon_s=h, probability=min(max(float(p), 0.0), 1.0))
                for h, p in zip(model.horizons_s, probs, strict=True)]

    async def _send(self, key: str, risk: FailureRiskV2, headers: Sequence[tuple[str, bytes]],
                    links: Sequence[Link], rollout: list[tuple[str, bytes]] | None = None) -> None:
        attrs: dict[str, Any] = {names.RISK_HORIZON_S: risk.horizons[0].horizon_s,
                                 names.RISK_PROBABILITY: risk.horizons[0].probability,
                                 names.MODEL_VERSION: risk.model_version}
        if risk.target_kind == "task":
            attrs[names.TASK_ID] = risk.target
        if risk.node:
            attrs[names.NODE_NAME] = risk.node
        with stage_span(names.SPAN_RISK_INFER, headers, topic=self.settings.topic(TASK_TOPIC), group=self.group,
                        attributes=attrs, links=links) as ctx:
            if rollout:  # during a rollout: which candidate, which step
                await self.sink.send_encoded(OUT_TOPIC, key, encode(risk), ctx, extra_headers=rollout)
            else:
                await self.sink.send(OUT_TOPIC, key, risk, ctx)
        self.emitted += 1

    # -- periodic re-scoring ----------------------------------------------------------------------
    async def rescore_loop(self, stop: asyncio.Event) -> None:
        if self.settings.rescore_s <= 0:
            await stop.wait()
            return
        while not stop.is_set():
            if not await pause(stop, self.settings.rescore_s):
                await self.rescore()

    async def rescore(self) -> int:
        """Score every running task in one batch; publish those that moved. Returns tasks scored."""
        task_ids = sorted(self.state.running)
        if not task_ids:
            return 0
        now_ms = self.state.last_ts_ms or int(time.time() * 1000)
        await self._score_and_publish(task_ids, "rescore", [], int(time.time() * 1000), now_ms, None)
        await self.sink.flush()
        return len(task_ids)

