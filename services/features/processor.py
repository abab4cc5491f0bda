"""The features processor: NodeState → ``featurelib`` windows → FeatureVector, state in a changelog.

Runs on the runtime's ``BatchStream`` (consumer group ``<prefix>borg-features``). Window
state (``featurelib.node.windows.NodeWindows``) is kept decoded in memory and persisted to
the compacted changelog ``<prefix>borg-features-windows-changelog`` (key ``node`` = the open
pane, ``node|i`` = closed pane ``i`` of a ring), partition = the node's input partition;
only what changed since the last commit is written, at each commit. Uncommitted input is
delivered again after a crash and the state machine recognises it (dedup by (seq, ts); a
re-delivered closing sample re-emits its identical window), so a restart neither loses nor
changes a window. NodeState is validated by ``contracts.fast.nodestate`` (the contract's
exact accept/reject decisions at half pydantic's cost), the windows a batch closes are
computed in one numpy pass, and a window is encoded without building the pydantic model when its
fields are plainly valid (``contracts.fast.featurevector.encode_feature_vector``; docs/performance.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from prometheus_client import Counter, Gauge

from contracts import ContractError, FeatureVector, encode
from contracts import telemetry as names
from contracts.fast.featurevector import encode_feature_vector
from contracts.fast.nodestate import decode_nodestate_dict
from contracts.topics import Topic
from featurelib.node.samples import Sample, sample_from_dict
from featurelib.node.schema import node_feature_schema_hash
from featurelib.node.windows import NodeWindows, Window
from services.features.settings import FeaturesSettings
from services.runtime.batch_stream import Batch, BatchStream, Record
from services.runtime.changelog import ensure_changelog, read_changelog
from services.runtime.stream_io import Sink
from services.runtime.stream_settings import changelog_name
from services.runtime.stream_trace import quiet_stage, stage_span

log = logging.getLogger(__name__)
SERVICE = "features"
IN_TOPIC = Topic.NODESTATE
OUT_TOPIC = Topic.FEATURES
WINDOW_S = 10
"""FeatureVector.window_s: the hop and shortest window (60 s and 300 s stats are named features)."""
SAMPLES = Counter("borg_features_samples_total", "NodeState samples by outcome", ["outcome"])
STATE_NODES = Gauge("borg_features_state_nodes", "Nodes whose window state this worker holds")
CHECKPOINT_SLICE = 500
"""Nodes written per slice of a checkpoint (~7 ms of CPU) before the batch loop gets a turn."""
CHECKPOINT_RECORDS = Counter("borg_features_checkpoint_records_total", "State records written to the changelog")


def changelog_topic(prefix: str) -> str:
    return changelog_name(SERVICE, "windows", prefix)


def _node_of(key: bytes) -> str:
    """The node a changelog key belongs to: ``node`` or ``node|<ring slot>``."""
    head, sep, tail = key.rpartition(b"|")
    return (head if sep and tail.isdigit() else key).decode()


class _ChangelogRestore:
    """The PaneStore ``NodeWindows`` loads unseen nodes from: what the changelog restored.

    Entries are handed out once (``pop``): from then on the node's state lives in memory.
    """

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.data.pop(key.encode(), None)

    def put(self, key: str, value: bytes) -> None:
        raise AssertionError("the features service persists state through checkpoints only")


class WindowState:
    """``StateHooks`` for the window state machine: restore, hand over and checkpoint nodes."""

    def __init__(self, settings: FeaturesSettings, sink: Sink) -> None:
        self.settings = settings
        self.sink = sink
        self.topic = changelog_topic(settings.topic_prefix)
        self.restored = _ChangelogRestore()
        self.windows = NodeWindows(self.restored, spread=settings.spread_panes, write_through=False)
        self.node_partition: dict[str, int] = {}

    async def ensure(self, partitions: int) -> None:
        await ensure_changelog(self.settings.kafka_bootstrap, self.topic, partitions,
                               self.settings.replication_factor)

    async def restore(self, partitions: Sequence[int]) -> None:
        for partition, live in (await read_changelog(self.settings.kafka_bootstrap, self.topic, partitions)).items():
            self.restored.data.update(live)
            for key in live:
                self.node_partition.setdefault(_node_of(key), partition)
        STATE_NODES.set(len(self.windows))

    def forget(self, partitions: set[int]) -> None:
        nodes = {n for n, p in self.node_partition.items() if p in partitions}
        self.windows.forget(nodes)
        for node in nodes:
            del self.node_partition[node]
        self.restored.data = {k: v for k, v in self.restored.data.items() if _node_of(k) not in nodes}
        STATE_NODES.set(len(self.windows))

    async def checkpoint(self, *, spread_s: float = 0.0) -> None:
        """Write every node changed so far, ``CHECKPOINT_SLICE`` nodes at a time, over ``spread_s``.

        Between slices the batch loop runs (a checkpoint of 10,000 nodes costs ~130 ms of
        CPU; in one piece it held up every record behind it, and even sliced, a burst of it
        each round queued the records that arrived meanwhile). Nodes written later in the
        round are written with newer state, which a restore tolerates (``NodeWindows``
        drops samples it already holds).
        """
        node_partition = self.node_partition
        records: list[tuple[int, bytes, bytes]] = []

        def write(node: str, key: str, value: bytes) -> None:
            records.append((node_partition[node], key.encode(), value))

        nodes = self.windows.dirty_nodes()
        slices = range(0, len(nodes), CHECKPOINT_SLICE)
        pause = spread_s / len(slices) if len(slices) > 1 else 0.0
        for start in slices:
            self.windows.write_nodes(nodes[start:start + CHECKPOINT_SLICE], write)
            if records:
                await self.sink.changelog_many(self.topic, records[:])
                CHECKPOINT_RECORDS.inc(len(records))
                records.clear()
            await asyncio.sleep(pause)
        STATE_NODES.set(len(self.windows))


class FeaturesProcessor:
    def __init__(self, settings: FeaturesSettings, sink: Sink) -> None:
        self.settings = settings
        self.sink = sink
        self.schema_hash = node_feature_schema_hash()
        self.state = WindowState(settings, sink)
        self.stream = BatchStream(service=SERVICE, settings=settings, sink=sink, topics=[IN_TOPIC],
                                  handle=self.handle, state=[self.state],
                                  fault_exit_after=settings.fault_exit_after)
        self.group = self.stream.group
        self.emitted = 0
        self._outcomes = {s: SAMPLES.labels(s) for s in ("accepted", "duplicate", "late", "replayed")}

    async def handle(self, batch: Batch) -> None:
        node_partition = self.state.node_partition
        accepted: list[Record] = []
        samples: list[Sample] = []
        for tp, records in batch.items():
            partition = tp.partition
            for record in records:
                try:
                    state = decode_nodestate_dict(record.value)
                except ContractError as exc:
                    await self.sink.dead_letter_record(record, exc.message, exc.kind)
                    continue
                try:
                    sample = sample_from_dict(state, record.timestamp)
                except Exception as exc:  # a sample the feature math cannot handle: keep running
                    await self.sink.dead_letter_record(record, f"{type(exc).__name__}: {exc}", "processing")
                    continue
                node_partition[sample.node] = partition
                accepted.append(record)
                samples.append(sample)
        counts = dict.fromkeys(self._outcomes, 0)
        for record, outcome in zip(accepted, self.state.windows.observe_many(samples), strict=True):
            if outcome.error is not None:
                await self.sink.dead_letter_record(record, outcome.error, "processing")
                continue
            counts[outcome.status] += 1
            for window in outcome.windows:
                await self._emit(record, window)
        for status, n in counts.items():
            if n:
                self._outcomes[status].inc(n)

    async def _emit(self, record: Record, window: Window) -> None:
        # the bytes encode(FeatureVector(...)) gives, without pydantic when the fields are plainly valid
        encoded = encode_feature_vector(window.node, window.ts_ms, WINDOW_S, self.schema_hash, window.values,
                                        window.valid, window.samples, window.input_ts_ms)
        if encoded is None:
            try:
                encoded = encode(FeatureVector(
                    node=window.node,
                    ts_ms=window.ts_ms,
                    window_s=WINDOW_S,
                    schema_hash=self.schema_hash,
                    values=window.values,
                    valid=window.valid,
                    samples=window.samples,
                    input_ts_ms=window.input_ts_ms,
                ))
            except ValueError as exc:  # e.g. a non-finite feature the contract refuses: report, keep going
                log.error("window %s@%d not published: %s", window.node, window.ts_ms, exc)
                await self.sink.dead_letter_record(record, f"window {window.ts_ms} not published: {exc}",
                                                   "processing")
                return
        stage = quiet_stage(record.headers)
        if stage is not None:  # no span processor (no OTLP endpoint): the ids only
            await self.sink.send_quiet(OUT_TOPIC, window.node, encoded, stage)
        else:
            with stage_span(names.SPAN_FEATURES_WINDOW, record.headers, topic=record.topic, group=self.group,
                            attributes={names.NODE_NAME: window.node}) as ctx:
                await self.sink.send_encoded(OUT_TOPIC, window.node, encoded, ctx)
        self.emitted += 1
