"""What a load run measures while it runs: output latency, consumer lag, CPU and memory.

- :class:`OutputObserver` reads the output topics with a group-less consumer (it never
  joins or disturbs a service's group). Latency of one output = its record timestamp
  (when the stage produced it) − ``input_ts_ms`` (produce time of the newest NodeState
  behind it). A Decision's latency uses the newest ``input_ts_ms`` of the proposals it
  weighed. Dead letters are counted per source topic and kind; NodeState originals are
  decoded to (node, seq) for the soak's loss accounting.
- :class:`LagSampler` polls every consumer group of the run (named with its topic prefix)
  for committed offsets and the topics' end offsets: lag = end − committed, and the
  committed offsets' growth is each stage's consumption rate.
- :class:`ProcSampler` samples CPU % and RSS of every process of the run with psutil.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import psutil
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from contracts.topics import REGIMES_TOPIC, RISK_TOPIC, Topic
from services.runtime.kafka_security import kafka_client_options
from services.runtime.pause import pause

log = logging.getLogger(__name__)

STREAM_OUTPUTS = (Topic.FEATURES, REGIMES_TOPIC, Topic.ANOMALIES, RISK_TOPIC)
"""Outputs of the stream processors (latency = output produce time − input_ts_ms)."""
TERMINAL_OUTPUTS = (REGIMES_TOPIC, Topic.ANOMALIES, RISK_TOPIC)
DECISION_OUTPUTS = (Topic.PROPOSALS, Topic.DECISIONS)
PER_WINDOW_OUTPUTS = {REGIMES_TOPIC: "regime", Topic.ANOMALIES: "anomaly"}
"""Outputs with one message per FeatureVector, keyed (node, window end), and the service producing them.
(risk.v2 is not: risk scores tasks on task events and re-scores, joining the node's latest features.)"""
OBSERVED = (*STREAM_OUTPUTS, *DECISION_OUTPUTS, Topic.ACTIONS, Topic.DEADLETTER)


@dataclass
class TopicSeries:
    """Per output topic: output times (s) and latencies (ms), plus a per-second count."""

    t: array[float] = field(default_factory=lambda: array("d"))
    latency_ms: array[float] = field(default_factory=lambda: array("d"))
    per_second: Counter[int] = field(default_factory=Counter)
    count: int = 0

    def latencies_between(self, start_s: float, end_s: float) -> list[float]:
        return [lat for t, lat in zip(self.t, self.latency_ms, strict=True) if start_s <= t < end_s]

    def count_between(self, start_s: float, end_s: float) -> int:
        return sum(n for sec, n in self.per_second.items() if start_s <= sec < end_s)


@dataclass(frozen=True)
class FeatureWindow:
    node: str
    end_ms: int
    window_s: int
    samples: int


def output_latency_ms(base_topic: str, value: dict[str, Any], record_ts_ms: int) -> float | None:
    """The end-to-end latency one output record stands for, or None when it carries no input time."""
    if base_topic == Topic.DECISIONS:
        inputs = [p.get("input_ts_ms") for p in value.get("proposals", ())]
        known = [int(i) for i in inputs if isinstance(i, int | float)]
        return float(record_ts_ms - max(known)) if known else None
    ts = value.get("input_ts_ms")
    if not isinstance(ts, int | float):
        return None
    return float(record_ts_ms - ts)


def _original(letter: dict[str, Any], *fields: str) -> tuple[str, int] | None:
    copy = letter.get("value")
    raw = copy.get("b64") if isinstance(copy, dict) else None
    if not raw:
        return None
    try:
        value = orjson.loads(base64.b64decode(raw))
        return str(value[fields[0]]), int(value[fields[1]])
    except (ValueError, KeyError, TypeError):
        return None


def nodestate_id(letter: dict[str, Any]) -> tuple[str, int] | None:
    """(node, seq) of the NodeState a dead letter holds, when it still parses that far."""
    return _original(letter, "node", "seq")


def window_id(letter: dict[str, Any]) -> tuple[str, int] | None:
    """(node, window end) of the FeatureVector a dead letter holds, when it still parses that far."""
    return _original(letter, "node", "ts_ms")


async def watching_consumer(bootstrap: str, topics: list[str]) -> AIOKafkaConsumer:
    """A started group-less consumer of ``topics`` from the beginning (for observers that only read)."""
    consumer = AIOKafkaConsumer(
        *topics,
        bootstrap_servers=bootstrap, **kafka_client_options(),
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    await consumer.start()
    return consumer


class OutputObserver:
    def __init__(self, bootstrap: str, prefix: str, *, keep_windows: bool = False) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.keep_windows = keep_windows
        self.series: dict[str, TopicSeries] = defaultdict(TopicSeries)
        self.dead_letters: Counter[tuple[str, str]] = Counter()
        self.dead_letter_times: array[float] = array("d")
        self.dead_nodestates: set[tuple[str, int]] = set()
        self.dead_unattributed = 0
        self.windows: list[FeatureWindow] = []
        self.window_outputs: dict[str, set[tuple[str, int]]] = defaultdict(set)
        """keep_windows: (node, window end) of every per-window output of regime/anomaly/risk."""
        self.dead_windows: dict[str, set[tuple[str, int]]] = defaultdict(set)
        """keep_windows: (node, window end) of dead-lettered FeatureVectors, per service that rejected them."""
        self.decode_errors = 0
        self._consumer: AIOKafkaConsumer | None = None
        self.last_record_at = 0.0

    def base(self, topic: str) -> str:
        return topic[len(self.prefix) :] if topic.startswith(self.prefix) else topic

    async def start(self) -> None:
        self._consumer = await watching_consumer(self.bootstrap, [f"{self.prefix}{t}" for t in OBSERVED])

    async def run(self, stop: asyncio.Event) -> None:
        assert self._consumer is not None, "start() first"
        while not stop.is_set():
            batch = await self._consumer.getmany(timeout_ms=200, max_records=5000)
            for tp, records in batch.items():
                base = self.base(tp.topic)
                for record in records:
                    self.take(base, record.key, record.value, record.timestamp)
                if records:
                    self.last_record_at = time.time()

    def take(self, base: str, key: bytes | None, raw: bytes | None, record_ts_ms: int) -> None:
        if raw is None:
            return
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self.decode_errors += 1
            return
        t_s = record_ts_ms / 1000.0
        if base == Topic.DEADLETTER:
            src = self.base(str(value.get("source_topic", "?")))
            self.dead_letters[(src, str(value.get("error_kind", "?")))] += 1
            self.dead_letter_times.append(t_s)
            if src == Topic.NODESTATE:
                ident = nodestate_id(value)
                if ident is None:
                    self.dead_unattributed += 1
                else:
                    self.dead_nodestates.add(ident)
            elif src == Topic.FEATURES and self.keep_windows:
                window = window_id(value)
                if window is not None:
                    self.dead_windows[str(value.get("service", "?"))].add(window)
            return
        series = self.series[base]
        series.count += 1
        series.per_second[int(t_s)] += 1
        latency = output_latency_ms(base, value, record_ts_ms)
        if latency is not None:
            series.t.append(t_s)
            series.latency_ms.append(latency)
        if self.keep_windows:
            if base == Topic.FEATURES:
                node, end = str(value["node"]), int(value["ts_ms"])
                self.windows.append(FeatureWindow(node, end, int(value["window_s"]), int(value["samples"])))
            elif base in PER_WINDOW_OUTPUTS:
                self.window_outputs[base].add((str(value["node"]), int(value["ts_ms"])))

    def dead_letter_count(self, start_s: float = float("-inf"), end_s: float = float("inf")) -> int:
        return sum(1 for t in self.dead_letter_times if start_s <= t < end_s)

    async def stop(self) -> None:
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._consumer.stop(), timeout=10)
            self._consumer = None


@dataclass(frozen=True)
class LagSample:
    t: float
    group: str
    topic: str
    committed: int
    end: int

    @property
    def lag(self) -> int:
        return max(0, self.end - self.committed)


class LagSampler:
    """Committed offsets of the run's consumer groups against the end offsets of their topics."""

    def __init__(self, bootstrap: str, prefix: str, *, groups: tuple[str, ...] = (), interval_s: float = 1.0) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.interval_s = interval_s
        self.known_groups: set[str] = set(groups)
        self.samples: list[LagSample] = []
        self._admin: AIOKafkaAdminClient | None = None
        self._offsets: AIOKafkaConsumer | None = None
        self._next_discovery = 0.0
        self.errors = 0

    async def start(self) -> None:
        self._admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, **kafka_client_options(),
                                          request_timeout_ms=10_000)
        await self._admin.start()
        self._offsets = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, **kafka_client_options(),
                                         group_id=None, enable_auto_commit=False)
        await self._offsets.start()

    async def _discover(self) -> None:
        assert self._admin is not None
        groups = await self._admin.list_consumer_groups()
        for group in groups:
            name = group[0]
            if isinstance(name, str) and name.startswith(self.prefix):
                self.known_groups.add(name)

    async def sample_once(self) -> list[LagSample]:
        assert self._admin is not None
        assert self._offsets is not None
        now = time.time()
        if now >= self._next_discovery:
            await self._discover()
            self._next_discovery = now + 5.0
        committed: dict[str, dict[TopicPartition, int]] = {}
        for group in sorted(self.known_groups):
            offsets = await self._admin.list_consumer_group_offsets(group)
            committed[group] = {
                tp: meta.offset for tp, meta in offsets.items() if tp.topic.startswith(self.prefix) and meta.offset >= 0
            }
        tps = sorted({tp for offs in committed.values() for tp in offs})
        ends: dict[TopicPartition, int] = await self._offsets.end_offsets(tps) if tps else {}
        t = time.time()
        out: list[LagSample] = []
        for group, offs in committed.items():
            per_topic: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            for tp, off in offs.items():
                per_topic[tp.topic][0] += off
                per_topic[tp.topic][1] += ends.get(tp, off)
            for topic, (c, e) in per_topic.items():
                out.append(LagSample(t, group, topic[len(self.prefix) :], c, e))
        self.samples += out
        return out

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                await asyncio.wait_for(self.sample_once(), timeout=10)
            except Exception as exc:  # a slow or failed poll must not end the run
                self.errors += 1
                log.debug("lag sample failed: %s", exc)
            await pause(stop, max(0.05, self.interval_s - (time.monotonic() - started)))

    def latest(self) -> dict[tuple[str, str], LagSample]:
        out: dict[tuple[str, str], LagSample] = {}
        for s in self.samples:
            out[(s.group, s.topic)] = s
        return out

    def series(self, group: str, topic: str) -> list[LagSample]:
        return [s for s in self.samples if s.group == group and s.topic == topic]

    async def stop(self) -> None:
        for closer in (self._offsets.stop() if self._offsets else None, self._admin.close() if self._admin else None):
            if closer is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(closer, timeout=10)
        self._admin = None
        self._offsets = None


@dataclass(frozen=True)
class ProcSample:
    t: float
    name: str
    cpu_pct: float
    rss_mb: float


class ProcSampler:
    """CPU % (100 = one core) and RSS of named processes (each on its own: the runner's children are
    the services and the driver, watched separately)."""

    def __init__(self, interval_s: float = 1.0, *, system: bool = True) -> None:
        self.interval_s = interval_s
        self.system = system
        self.samples: list[ProcSample] = []
        self._procs: dict[str, psutil.Process] = {}
        self._resolvers: dict[str, Callable[[], int | None]] = {}
        self.restarts: dict[str, list[float]] = defaultdict(list)
        """When a re-resolvable process (the broker) was found replaced by a new pid."""
        psutil.cpu_percent(None)  # prime the machine-wide counter

    def watch(self, name: str, pid: int, resolve: Callable[[], int | None] | None = None) -> None:
        """Sample ``pid`` as ``name``; with ``resolve``, follow it when it is replaced (a restarted broker)."""
        if resolve is not None:
            self._resolvers[name] = resolve
        try:
            proc = psutil.Process(pid)
            proc.cpu_percent(None)  # prime: the first call has no interval to measure
            self._procs[name] = proc
        except psutil.Error:
            log.warning("cannot watch %s (pid %d)", name, pid)

    def _follow(self, name: str, t: float) -> None:
        resolve = self._resolvers.get(name)
        old = self._procs.get(name)
        pid = resolve() if resolve is not None else None
        if pid is not None and (old is None or pid != old.pid):
            self.restarts[name].append(t)
            log.warning("%s restarted (pid %s → %d)", name, old.pid if old else "?", pid)
            self.watch(name, pid)
        elif pid is None:
            self._procs.pop(name, None)

    def sample_once(self) -> list[ProcSample]:
        t = time.time()
        out: list[ProcSample] = []
        if self.system:
            # the whole machine: CPU in the same unit (100 = one core busy), memory in use
            busy = psutil.cpu_percent(None) * (psutil.cpu_count() or 1)
            out.append(ProcSample(t, "system", busy, psutil.virtual_memory().used / 2**20))
        for name in self._resolvers:
            if name not in self._procs or not self._procs[name].is_running():
                self._follow(name, t)
        for name, proc in list(self._procs.items()):
            try:
                with proc.oneshot():
                    cpu = proc.cpu_percent(None)
                    rss = proc.memory_info().rss
                out.append(ProcSample(t, name, cpu, rss / 2**20))
            except psutil.Error:
                self._procs.pop(name, None)
        self.samples += out
        return out

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.sample_once()
            await pause(stop, self.interval_s)

    def names(self) -> list[str]:
        return sorted({s.name for s in self.samples})

    def series(self, name: str) -> list[ProcSample]:
        return [s for s in self.samples if s.name == name]
