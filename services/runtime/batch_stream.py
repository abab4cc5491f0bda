"""The stream processors' consume loop: batches from a consumer group, state in changelogs, commit after flush.

Every stream processor (features, regime, anomaly, risk) runs on this loop. It replaced
faust-streaming agents, whose per-event machinery (a consumer thread, a conductor, a
stream buffer and per-event acks) cost ~100 µs CPU per event on this class of machine —
a do-nothing ``take_events`` agent drained ~5,000 events/s where a plain aiokafka
``getmany`` loop drains ~70,000 (docs/stream.md has the figures). What faust provided is
kept, with the same names:

* one consumer group per service, ``<prefix>borg-<service>`` (:func:`app_id`), partitions
  split between workers of a service;
* state in compacted changelog topics ``<prefix>borg-<service>-<table>-changelog`` with one
  partition per input partition (state of input partition ``p`` lives in changelog
  partition ``p``); a worker restores the partitions it is assigned before it consumes
  them, and hands state over (checkpoint, flush, commit) when they are revoked;
* at-least-once: every ``STREAM_COMMIT_INTERVAL_S`` the state hooks write what changed,
  the sink's outputs, dead letters and changelog records are flushed (acknowledged by the
  broker), and only then are the processed offsets committed. Input after the last commit
  is delivered again after a crash; processors are idempotent on their output keys.

Commits run beside the batch loop, not inside it: a commit round notes the processed
positions between two batches, then writes state and waits for the broker while batches
go on being handled (at 10,000 NodeState/s the features checkpoint alone took ~130 ms a
second, and every record that arrived meanwhile waited for it). State written during a
round may therefore be *newer* than the positions the round commits; every processor's
state tolerates that (records after the committed positions are delivered again and are
recognised: features drops samples it already holds and re-emits closed windows
identically, regime answers windows it labelled from its history, risk keeps the newest
vector). Revocations and the final commit at shutdown wait for a round in progress.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, ConsumerRecord, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError

from services.runtime.changelog import ensure_changelog, read_changelog
from services.runtime.health import HealthServer
from services.runtime.metrics import COMMIT_SECONDS, CONSUMER_LAG, MESSAGES_IN
from services.runtime.stream_io import Sink
from services.runtime.stream_settings import PARTITIONS, StreamSettings, app_id
from services.runtime.tuning import run_at_niceness, tune_process

log = logging.getLogger(__name__)

Record: TypeAlias = ConsumerRecord[bytes, bytes]
Batch: TypeAlias = dict[TopicPartition, list[Record]]


MODEL_BATCH_MAX = 2000
"""Default ``STREAM_BATCH_MAX`` of the model stages (regime, anomaly, risk). Live, their linger ends a batch long
before it fills (~20 FeatureVectors in regime's 20 ms at 10,000 NodeState/s); only a stage that is behind gets
full batches, and bigger ones drain faster (regime: ~7 % less CPU per record with 2,000 than with 500)."""
LINGER_BYTES_PER_RECORD = 2048
"""Bytes per record a lingering consumer asks the broker to gather (``batch_max`` of them):
about one FeatureVector, so a batch is full or the linger is over, whichever comes first."""


@dataclass(frozen=True, slots=True)
class RecordEvent:
    """A consumed record in the shape the processors' helpers read (``event.message.<field>``)."""

    message: Record


def events_of(records: Sequence[Record]) -> list[RecordEvent]:
    return [RecordEvent(r) for r in records]


class StateHooks(Protocol):
    """Processor state that lives in a changelog and follows the partitions it belongs to."""

    async def ensure(self) -> None:
        """Create the changelog topic when missing (start-up)."""

    async def restore(self, partitions: Sequence[int]) -> None:
        """Load the state of newly assigned input partitions from the changelog."""

    def forget(self, partitions: set[int]) -> None:
        """Drop the state of revoked partitions (already checkpointed)."""

    async def checkpoint(self, *, spread_s: float = 0.0) -> None:
        """Send what changed since the last checkpoint to the changelog (the stream flushes).

        Runs beside the batch loop: batches may be handled while it awaits, so it must write
        state at least as new as when it was called, each key's records in an order whose
        every prefix is a consistent state. A large state may spread its writes over
        ``spread_s`` seconds (0: as fast as it can, e.g. when partitions are handed over).
        """


class ChangelogState:
    """Key → bytes state of a processor, persisted record by record to a changelog topic.

    ``put`` updates the value at once and queues a changelog record for the partition of
    the input being handled (set ``partition`` first); ``drain``/``checkpoint`` send the
    queue, one producer batch per partition.
    """

    def __init__(self, *, bootstrap: str, topic: str, sink: Sink, replication: int = 1) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.sink = sink
        self.replication = replication
        self.data: dict[bytes, bytes] = {}
        self.owner: dict[bytes, int] = {}
        self.partition = 0
        self.pending: list[tuple[int, bytes, bytes]] = []

    def get(self, key: str) -> bytes | None:
        return self.data.get(key.encode())

    def put(self, key: str, value: bytes) -> None:
        k = key.encode()
        self.data[k] = value
        self.owner[k] = self.partition
        self.pending.append((self.partition, k, value))

    async def drain(self) -> None:
        if self.pending:
            pending, self.pending = self.pending, []
            await self.sink.changelog_many(self.topic, pending)

    # -- StateHooks ---------------------------------------------------------------------------
    async def ensure(self) -> None:
        await ensure_changelog(self.bootstrap, self.topic, PARTITIONS, self.replication)

    async def restore(self, partitions: Sequence[int]) -> None:
        for partition, live in (await read_changelog(self.bootstrap, self.topic, partitions)).items():
            self.data.update(live)
            self.owner.update(dict.fromkeys(live, partition))

    def forget(self, partitions: set[int]) -> None:
        for key in [k for k, p in self.owner.items() if p in partitions]:
            del self.owner[key]
            self.data.pop(key, None)

    async def checkpoint(self, *, spread_s: float = 0.0) -> None:
        await self.drain()


class BatchStream:
    """Consume ``topics`` in ``service``'s group in batches; ``handle`` each batch; commit after flush."""

    def __init__(
        self,
        *,
        service: str,
        settings: StreamSettings,
        sink: Sink,
        topics: Sequence[str],
        handle: Callable[[Batch], Awaitable[None]],
        state: Sequence[StateHooks] = (),
        fault_exit_after: int = 0,
        linger_s: float = 0.0,
        batch_max: int = 500,
        commit_interval_s: float = 1.0,
        nice: int = 0,
    ) -> None:
        self.service = service
        self.settings = settings
        self.sink = sink
        self.handle = handle
        self.state = list(state)
        self.fault_exit_after = fault_exit_after
        self.linger_s = linger_s if settings.batch_linger_s is None else settings.batch_linger_s
        self.batch_max = batch_max if settings.batch_max is None else settings.batch_max
        self.commit_interval_s = commit_interval_s if settings.commit_interval_s is None \
            else settings.commit_interval_s
        self.nice = nice if settings.nice is None else settings.nice
        self.group = app_id(service, settings.topic_prefix)
        self.topics = [settings.topic(t) for t in topics]
        self.positions: dict[TopicPartition, int] = {}
        self.events = 0
        self.ready = asyncio.Event()
        self._processing = asyncio.Lock()
        self._committing = asyncio.Lock()
        self._consumer: AIOKafkaConsumer | None = None
        self._generation = 0
        self._fatal: BaseException | None = None
        self._commit_error: BaseException | None = None

    def _make_consumer(self) -> AIOKafkaConsumer:
        settings = self.settings
        linger: dict[str, int] = {}
        if self.linger_s > 0:
            # The broker fills the batch: it answers a fetch once a batch's worth of bytes is
            # there or after the linger. (Polling getmany until the linger ran out cost regime
            # and anomaly ~40 % more CPU per record in live operation: each call returned the
            # few records that had arrived since the last one.)
            linger = {"fetch_min_bytes": self.batch_max * LINGER_BYTES_PER_RECORD,
                      "fetch_max_wait_ms": max(1, round(self.linger_s * 1000))}
        return AIOKafkaConsumer(
            bootstrap_servers=settings.kafka_bootstrap,
            group_id=self.group,
            client_id=f"{self.service}-{self.group}",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            max_poll_records=self.batch_max,
            max_partition_fetch_bytes=8 * 1024 * 1024,
            fetch_max_bytes=64 * 1024 * 1024,
            session_timeout_ms=int(settings.session_timeout_s * 1000),
            heartbeat_interval_ms=int(max(1.0, settings.session_timeout_s / 5) * 1000),
            rebalance_timeout_ms=int(max(30.0, 3 * settings.session_timeout_s) * 1000),
            **linger,
        )

    def is_ready(self) -> bool:
        """Partitions assigned and their state restored."""
        return self.ready.is_set() and self._consumer is not None and bool(self._consumer.assignment())

    async def run(self, stop: asyncio.Event) -> None:
        for hooks in self.state:
            await hooks.ensure()
        consumer = self._consumer = self._make_consumer()
        consumer.subscribe(self.topics, listener=_Rebalance(self))
        await consumer.start()
        committer = asyncio.create_task(self._commit_loop(stop), name=f"{self.service}-committer")
        try:
            while not stop.is_set():
                batch, generation = await self._fetch(consumer)
                self._raise_fatal()
                if batch:
                    async with self._processing:  # also waits for a restore in progress
                        self._raise_fatal()
                        if generation != self._generation:
                            # fetched before a revocation: the partitions may be another worker's now,
                            # and a new assignment re-fetches from the committed offsets
                            continue
                        await self.handle(batch)
                        await self.sink.push()
                        self._advance(batch)
                        if self.settings.flush_each_batch:
                            await self.sink.flush()
                    if self.fault_exit_after and self.events >= self.fault_exit_after:
                        await self._fault_exit()
            await committer  # a round in progress ends first; raises what failed it
            await self.commit()
        finally:
            stop.set()
            if not committer.done():
                # the loop failed: the worker stops without a last commit (its input is
                # delivered again), so a half-written round need not finish
                committer.cancel()
            await asyncio.gather(committer, return_exceptions=True)
            await consumer.stop()

    async def _commit_loop(self, stop: asyncio.Event) -> None:
        """Commit every ``commit_interval_s`` until ``stop``; a failed round stops the batch loop."""
        interval = self.commit_interval_s
        try:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), timeout=interval)
                except TimeoutError:
                    pass
                if stop.is_set():
                    return
                # state may be written over half the interval: an even load, not a burst
                await self.commit(spread_s=interval / 2)
        except Exception as exc:
            # the batch loop checks after every fetch: it stops within a fetch timeout
            self._commit_error = exc
            raise

    def _raise_fatal(self) -> None:
        # aiokafka only logs what a rebalance listener raises: without its state a worker must
        # not consume (it would publish windows without history and overwrite the changelog),
        # so it stops, and its partitions go to a worker that can restore them. A failed commit
        # round (the broker refused outputs or state) stops it too.
        if self._fatal is not None:
            raise RuntimeError(f"{self.service}: state restore failed") from self._fatal
        if self._commit_error is not None:
            raise RuntimeError(f"{self.service}: commit failed") from self._commit_error

    async def _fetch(self, consumer: AIOKafkaConsumer) -> tuple[Batch, int]:
        """Up to ``batch_max`` records (with ``linger_s``, the broker gathers them: see ``_make_consumer``).

        Returns the batch and the revocation generation it belongs to. aiokafka hands out only
        records of the current assignment, but rebalance callbacks run during ``getmany``: what
        was returned before a revocation is dropped by the caller (fetched again after it).
        """
        batch: Batch = await consumer.getmany(timeout_ms=100, max_records=self.batch_max)
        # a rebalance during this getmany: what it returned is of the new assignment already
        return batch, self._generation

    def _advance(self, batch: Batch) -> None:
        for tp, records in batch.items():
            last = records[-1].offset
            self.positions[tp] = last + 1
            self.events += len(records)
            MESSAGES_IN.labels(tp.topic).inc(len(records))
            high = self._consumer.highwater(tp) if self._consumer is not None else None
            if high is not None:
                CONSUMER_LAG.labels(tp.topic, str(tp.partition)).set(max(0, high - last - 1))

    async def commit(self, only: set[TopicPartition] | None = None, *, spread_s: float = 0.0) -> None:
        """Checkpoint state, flush the sink, then commit processed offsets (of ``only`` when given).

        The positions are noted between two batches; checkpoint and flush then run while the
        batch loop goes on (see the module docstring). State hooks may spread their writes over
        ``spread_s``.
        """
        async with self._committing:
            async with self._processing:
                offsets = dict(self.positions)
            await self._commit_noted(offsets, only, spread_s)

    async def _commit_noted(self, offsets: dict[TopicPartition, int], only: set[TopicPartition] | None,
                            spread_s: float = 0.0) -> None:
        """Checkpoint, flush, commit ``offsets`` (hold ``_committing``)."""
        started = time.perf_counter()
        for hooks in self.state:
            await hooks.checkpoint(spread_s=spread_s)
        await self.sink.flush()
        COMMIT_SECONDS.labels(self.service).observe(time.perf_counter() - started)
        if self._consumer is None:
            return
        assigned = self._consumer.assignment()
        offsets = {tp: off for tp, off in offsets.items() if tp in assigned and (only is None or tp in only)}
        if not offsets:
            return
        try:
            await self._consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError) as exc:
            # the group moved on: the partitions' next owner re-reads from the last commit
            log.warning("offset commit skipped (%s); uncommitted input will be delivered again", exc)

    async def _fault_exit(self) -> None:
        async with self._committing:
            for hooks in self.state:
                await hooks.checkpoint(spread_s=0.0)
            await self.sink.flush()
        log.warning("fault injection: exiting after %d events, outputs and state flushed, offsets not committed",
                    self.events)
        os._exit(70)

    async def on_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        mine = set(revoked)
        self._generation += 1
        if not mine:
            return
        # lock order (everywhere): _committing, then _processing. The hand-over commit runs
        # with the batch loop paused, so the state handed over matches the offsets exactly.
        async with self._committing, self._processing:
            await self._commit_noted(dict(self.positions), mine)
            partitions = {tp.partition for tp in mine}
            for hooks in self.state:
                hooks.forget(partitions)
            for tp in mine:
                self.positions.pop(tp, None)
        log.info("partitions %s revoked: state handed over", sorted(partitions))

    async def on_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        partitions = sorted({tp.partition for tp in assigned})
        # aiokafka already fetches for the new assignment while this runs: the lock keeps the
        # loop from handling those records before their partitions' state is back
        async with self._processing:
            try:
                for hooks in self.state:
                    await hooks.restore(partitions)
            except Exception as exc:
                log.exception("restoring the state of partitions %s failed", partitions)
                self._fatal = exc
                return
        log.info("partitions %s of %s assigned, state restored", partitions, ", ".join(self.topics))
        self.ready.set()


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, stream: BatchStream) -> None:
        self.stream = stream

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.stream.on_revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.stream.on_assigned(list(assigned))


async def run_stream(
    stream: BatchStream,
    stop: asyncio.Event,
    health: HealthServer,
    *,
    tasks: tuple[Callable[[asyncio.Event], Coroutine[Any, Any, None]], ...] = (),
) -> None:
    """Run ``stream`` and side tasks (model watchers, re-scoring) until ``stop``; a failing task stops all."""
    tune_process()
    run_at_niceness(stream.nice)
    health.add_check(stream.service, stream.is_ready)
    main = asyncio.create_task(stream.run(stop), name=f"{stream.service}-stream")
    side = [asyncio.create_task(t(stop), name=getattr(t, "__name__", "side")) for t in tasks]
    try:
        done, _ = await asyncio.wait({main, *side}, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            error = task.exception()
            if error is not None:
                raise error
        if main not in done:
            await main
    finally:
        stop.set()
        for task in side:
            task.cancel()
        await asyncio.gather(*side, return_exceptions=True)
        if not main.done():
            await asyncio.wait({main}, timeout=30)
            main.cancel()
