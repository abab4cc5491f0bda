"""The features faust app: NodeState → ``featurelib`` windows → FeatureVector, state in a changelog table.

Window state is a faust table (memory store, changelog topic
``<prefix>borg-features-windows-changelog``) holding, per node, the open pane and a ring of
closed panes (see ``featurelib.node_features.NodeWindows``). faust restores the table
from the changelog before any event is processed; uncommitted input is then delivered
again and the state machine recognises it (dedup by (seq, ts); a re-delivered closing
sample re-emits its identical window), so a restart neither loses nor changes a window.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from prometheus_client import Counter

from contracts import ContractError, FeatureVector, NodeState
from contracts import telemetry as names
from featurelib.node_features import NodeWindows, Window, node_feature_schema_hash, sample_from_nodestate
from services.features.settings import FeaturesSettings
from services.runtime.faust_app import PARTITIONS, app_id, make_app, raw_topic, table_extra_config
from services.runtime.faust_io import ChangelogTable, Sink, decode_event, flush_before_commit, headers_of, timestamp_ms
from services.runtime.faust_trace import stage_span

log = logging.getLogger(__name__)
SERVICE = "features"
IN_TOPIC = "nodestate.v1"
OUT_TOPIC = "features.v1"
WINDOW_S = 10
"""FeatureVector.window_s: the hop and shortest window (60 s and 300 s stats are named features)."""
SAMPLES = Counter("borg_features_samples_total", "NodeState samples by outcome", ["outcome"])


class FeaturesProcessor:
    def __init__(self, settings: FeaturesSettings, sink: Sink) -> None:
        self.settings = settings
        self.sink = sink
        self.schema_hash = node_feature_schema_hash()
        self.app = make_app(SERVICE, settings)
        flush_before_commit(self.app, sink)
        self.group = app_id(SERVICE, settings.topic_prefix)
        self.source = raw_topic(self.app, settings.topic(IN_TOPIC))
        self.table = self.app.Table("windows", partitions=PARTITIONS, key_type=bytes, value_type=bytes,
                                    extra_topic_configs=table_extra_config())
        self.store: ChangelogTable | None = None
        self.windows: NodeWindows | None = None
        self.events = 0
        self.emitted = 0
        self.app.agent(self.source, name=f"{self.group}.nodestate")(self._agent)

    def _machine(self) -> tuple[ChangelogTable, NodeWindows]:
        if self.store is None or self.windows is None:
            self.store = ChangelogTable(self.table, self.sink)
            self.windows = NodeWindows(self.store, spread=self.settings.spread_panes)
        return self.store, self.windows

    async def _agent(self, stream: Any) -> None:
        async for events in stream.take_events(self.settings.batch_max, self.settings.batch_within_s):
            for event in events:
                await self.handle(event)
            if self.store is not None:
                await self.store.drain()
            if self.settings.flush_each_batch:
                await self.sink.flush()
            self.events += len(events)
            fault = self.settings.fault_exit_after
            if fault and self.events >= fault:
                await self.sink.flush()
                log.warning("fault injection: exiting after %d events, outputs flushed, offsets not acked",
                            self.events)
                os._exit(70)

    async def handle(self, event: Any) -> None:
        try:
            state = decode_event(NodeState, event)
        except ContractError as exc:
            await self.sink.dead_letter(event, exc.message, exc.kind)
            return
        assert isinstance(state, NodeState)
        store, machine = self._machine()
        store.partition = event.message.partition
        mark = store.mark()
        try:
            outcome = machine.observe(sample_from_nodestate(state, timestamp_ms(event)))
        except Exception as exc:  # a sample the feature math cannot handle: keep running
            store.discard_since(mark)
            await self.sink.dead_letter(event, f"{type(exc).__name__}: {exc}", "processing")
            return
        SAMPLES.labels(outcome.status).inc()
        for window in outcome.windows:
            try:
                await self._emit(event, window)
            except ValueError as exc:  # e.g. a non-finite feature the contract refuses: report, keep going
                log.error("window %s@%d not published: %s", window.node, window.ts_ms, exc)
                await self.sink.dead_letter(event, f"window {window.ts_ms} not published: {exc}", "processing")

    async def _emit(self, event: Any, window: Window) -> None:
        vector = FeatureVector(
            node=window.node,
            ts_ms=window.ts_ms,
            window_s=WINDOW_S,
            schema_hash=self.schema_hash,
            values=window.values,
            valid=window.valid,
            samples=window.samples,
            input_ts_ms=window.input_ts_ms,
        )
        with stage_span(names.SPAN_FEATURES_WINDOW, headers_of(event), topic=event.message.topic, group=self.group,
                        attributes={names.NODE_NAME: window.node}) as (_, ctx):
            await self.sink.send(OUT_TOPIC, window.node, vector, ctx)
        self.emitted += 1

