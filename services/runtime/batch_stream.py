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
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, ConsumerRecord, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from contracts import ContractError
from contracts.fast.nodestate import decode_nodestate_dict
from contracts.headers import trace_id_of
from contracts.topics import DEADLETTER_TOPIC
from services.runtime.admin import PartitionCountError, check_partitions, connect_admin
from services.runtime.changelog import ensure_changelog, read_changelog
from services.runtime.health import HealthServer
from services.runtime.kafka_security import kafka_client_options
from services.runtime.lag import lag_reporter
from services.runtime.latency import STAGE_LATENCY
from services.runtime.metrics import COMMIT_SECONDS, CONSUMER_LAG, MESSAGES_IN
from services.runtime.pause import pause
from services.runtime.progress import Progress
from services.runtime.recovery import Mark, Plan, commit_mark, plan_partition, read_back_dead_letters
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


async def decoded_nodestates(batch: Batch, sink: Sink) -> AsyncIterator[tuple[RecordEvent, dict[str, Any]]]:
    """Each NodeState of the batch as the fast decoder's dict, in order; one that does not decode is dead-lettered
    (its original bytes, bounded) and skipped."""
    for records in batch.values():
        for event in events_of(records):
            try:
                state = decode_nodestate_dict(event.message.value)
            except ContractError as exc:
                await sink.dead_letter(event, exc.message, exc.kind)
                continue
            yield event, state


class StateHooks(Protocol):
    """Processor state that lives in a changelog and follows the partitions it belongs to."""

    async def ensure(self, partitions: int) -> None:
        """Create the changelog topic when missing (start-up), with the inputs' ``partitions``."""

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
            await self.sink.changelog_many(self.topic, superseded_dropped(pending))

    # -- StateHooks ---------------------------------------------------------------------------
    async def ensure(self, partitions: int) -> None:
        await ensure_changelog(self.bootstrap, self.topic, partitions, self.replication)

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


def superseded_dropped(records: list[tuple[int, bytes, bytes]]) -> list[tuple[int, bytes, bytes]]:
    """``records`` (partition, key, value) without those a later record of the same key and partition
    replaces, in order.

    Records queued together are sent together, before any input offset they cover is committed,
    so a restore can only ever read the last of a key's (a compacted topic keeps no other either).
    A drain (a backlog of several windows per node in one batch) writes each key once.
    """
    if len(records) < 2:
        return records
    last = {(partition, key): i for i, (partition, key, _) in enumerate(records)}
    if len(last) == len(records):
        return records
    return [r for i, r in enumerate(records) if last[r[0], r[1]] == i]


class StageStalledError(RuntimeError):
    """Input waited and nothing was committed for ``HEALTH_STALL_AFTER_S``: the stage stops to be restarted."""


@dataclass(frozen=True)
class LoopHooks:
    """What a consumer with its own timing adds to the loop (the referee: windows that close by time).

    ``tick`` runs after every fetch, batch or not (with the processing lock held); ``poll_ms`` is
    how long the next fetch may wait; ``hold`` caps each partition's committed offset (input still
    in flight: decisions not yet acknowledged); ``before_final_commit`` finishes in-flight work when
    the stream stops.
    """

    tick: Callable[[], Awaitable[None]] | None = None
    poll_ms: Callable[[], int] | None = None
    hold: Callable[[], Mapping[TopicPartition, int]] | None = None
    before_final_commit: Callable[[], Awaitable[None]] | None = None


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
        group: str | None = None,
        hooks: LoopHooks | None = None,
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
        self.group = group or app_id(service, settings.topic_prefix)
        self.hooks = hooks or LoopHooks()
        self.progress = Progress(settings.health_stall_after_s)
        """Lag and commits, for liveness (/healthz fails when input waits and nothing is committed)."""
        self.base_topics = list(topics)
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
        self._stalled: str | None = None
        self.error_policy = settings.error_policy
        # crash recovery (services/runtime/recovery.py): per assigned partition, what its start needs
        self._plans: dict[TopicPartition, Plan] = {}
        self._unmarked: set[TopicPartition] = set()  # start mark not written yet
        self._careful: dict[TopicPartition, int] = {}  # records left to handle one at a time
        self._poison: dict[TopicPartition, int] = {}  # offset to quarantine
        self._start_offsets: dict[TopicPartition, int] = {}

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
            bootstrap_servers=settings.kafka_bootstrap, **kafka_client_options(),
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
        partitions = PARTITIONS
        if self.state:
            # state of input partition p lives in changelog partition p, and co-partitioned inputs
            # (risk) must route a key to the same partition number: refuse another count
            expected = {self.settings.topic(t): self.settings.partitions_of(t) for t in self.base_topics}
            try:
                await check_partitions(self.settings.kafka_bootstrap, expected)
            except PartitionCountError as exc:
                raise PartitionCountError([*exc.problems, "expected counts are the registry's unless "
                                           "BORG_TOPIC_PARTITIONS says otherwise: set it as it was when the topics "
                                           "were created (`borgctl topics` lists them)"]) from None
            partitions = max(expected.values())  # one count: BORG_TOPIC_PARTITIONS keeps the inputs equal
        for hooks in self.state:
            await hooks.ensure(partitions)
        consumer = self._consumer = self._make_consumer()
        consumer.subscribe(self.topics, listener=_Rebalance(self))
        await consumer.start()
        committer = asyncio.create_task(self._commit_loop(stop), name=f"{self.service}-committer")
        # lag read on a timer, not per batch: it must keep moving while the loop is stuck
        lagger = asyncio.create_task(lag_reporter(consumer, stop, on_total=self.progress.note_lag),
                                     name=f"{self.service}-lag")
        main = asyncio.current_task()
        assert main is not None
        watchdog = asyncio.create_task(self._watch_progress(stop, main), name=f"{self.service}-watchdog")
        try:
            while not stop.is_set():
                batch, generation = await self._fetch(consumer)
                self._raise_fatal()
                careful = bool(batch) and self._needs_care(batch)
                if batch and not careful:
                    async with self._processing:  # also waits for a restore in progress
                        self._raise_fatal()
                        if generation != self._generation:
                            # fetched before a revocation: the partitions may be another worker's now,
                            # and a new assignment re-fetches from the committed offsets
                            continue
                        # the assignment's crash recovery plan is made under this lock, maybe while the
                        # batch was fetched: look again now that it is done
                        careful = self._needs_care(batch)
                        if not careful:
                            await self._handle_and_advance(batch)
                            if self.settings.flush_each_batch:
                                await self.sink.flush()
                    if self.fault_exit_after and self.events >= self.fault_exit_after:
                        await self._fault_exit()
                if careful:
                    # rare (after a crash): it commits between records, so it takes the committer's
                    # lock first (lock order: _committing, _processing)
                    async with self._committing, self._processing:
                        self._raise_fatal()
                        if generation != self._generation:
                            continue
                        await self._handle_with_care(batch)
                        await self.sink.push()
                        self._advance(batch)
                if self.hooks.tick is not None:
                    async with self._processing:
                        await self.hooks.tick()
            await committer  # a round in progress ends first; raises what failed it
            if self.hooks.before_final_commit is not None:
                await self.hooks.before_final_commit()
            await self.commit(clean=True)
        except asyncio.CancelledError:
            if self._stalled is None:
                raise
            main.uncancel()
            raise StageStalledError(f"{self.service}: {self._stalled}") from None
        finally:
            stop.set()
            if not committer.done():
                # the loop failed: the worker stops without a last commit (its input is
                # delivered again), so a half-written round need not finish
                committer.cancel()
            lagger.cancel()
            watchdog.cancel()
            await asyncio.gather(committer, lagger, watchdog, return_exceptions=True)
            await consumer.stop()

    async def _watch_progress(self, stop: asyncio.Event, main: asyncio.Task[Any]) -> None:
        """Stop the stage when input waits and nothing is committed for ``HEALTH_STALL_AFTER_S``.

        /healthz already fails then, but only Kubernetes probes it; a stage that stops itself is
        restarted wherever it runs (the local supervisor, compose's restart policy), and its
        uncommitted input is delivered again (e.g. a producer stuck on metadata after a broker restart).
        """
        interval = min(5.0, self.progress.stall_after_s / 4)
        while not stop.is_set():
            await pause(stop, interval)
            reason = self.progress.check()
            if reason is not None and not stop.is_set():
                log.error("%s stalled: %s; stopping so that it is restarted", self.service, reason)
                self._stalled = reason
                main.cancel()
                return

    async def _commit_loop(self, stop: asyncio.Event) -> None:
        """Commit every ``commit_interval_s`` until ``stop``; a failed round stops the batch loop."""
        interval = self.commit_interval_s
        try:
            while not stop.is_set():
                await pause(stop, interval)
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
        timeout_ms = 100 if self.hooks.poll_ms is None else self.hooks.poll_ms()
        try:
            batch: Batch = await consumer.getmany(timeout_ms=timeout_ms, max_records=self.batch_max)
        except UnicodeDecodeError as exc:
            await self._step_over_unreadable(consumer, exc)
            return {}, self._generation
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

    async def commit(self, only: set[TopicPartition] | None = None, *, spread_s: float = 0.0,
                     clean: bool = False) -> None:
        """Checkpoint state, flush the sink, then commit processed offsets (of ``only`` when given).

        The positions are noted between two batches; checkpoint and flush then run while the
        batch loop goes on (see the module docstring). State hooks may spread their writes over
        ``spread_s``.
        """
        async with self._committing:
            async with self._processing:
                offsets = dict(self.positions)
            await self._commit_noted(offsets, only, spread_s, clean=clean)

    async def _commit_noted(self, offsets: dict[TopicPartition, int], only: set[TopicPartition] | None,
                            spread_s: float = 0.0, *, clean: bool = False) -> None:
        """Checkpoint, flush, commit ``offsets`` (hold ``_committing``).

        Each commit carries a recovery mark (services/runtime/recovery.py); ``clean`` (an orderly
        stop or hand-over) also commits the partitions that saw no record since their start.
        """
        # input still in flight is held back, as it stands *before* the flush: whatever finished
        # by now has its outputs in the sink, which the flush makes durable
        held = self.hooks.hold() if self.hooks.hold is not None else None
        started = time.perf_counter()
        for hooks in self.state:
            await hooks.checkpoint(spread_s=spread_s)
        await self.sink.flush()
        COMMIT_SECONDS.labels(self.service).observe(time.perf_counter() - started)
        if self._consumer is None:
            return
        assigned = self._consumer.assignment()
        if clean:
            offsets = {**self._start_offsets, **offsets}
        if held:
            offsets = {tp: min(off, held.get(tp, off)) for tp, off in offsets.items()}
        offsets = {tp: off for tp, off in offsets.items() if tp in assigned and (only is None or tp in only)}
        if not offsets:
            return
        now_ms = int(time.time() * 1000)
        marks = {tp: commit_mark(now_ms, clean=clean, plan=self._plans.get(tp), careful_left=self._careful.get(tp, 0),
                                 poison=self._poison.get(tp)).encode() for tp in offsets}
        try:
            await self._consumer.commit({tp: (off, marks[tp]) for tp, off in offsets.items()})
            self.progress.note_commit(offsets)
        except (CommitFailedError, IllegalStateError) as exc:
            # the group moved on: the partitions' next owner re-reads from the last commit
            log.warning("offset commit skipped (%s); uncommitted input will be delivered again", exc)

    # -- input that fails, and what a crash left behind (services/runtime/recovery.py) ------------

    async def _handle_and_advance(self, batch: Batch) -> None:
        """The usual path of a batch (hold ``_processing``): start marks, handle, hand outputs over, note positions."""
        if self._unmarked:
            await self._write_start_marks(batch)
        await self._handle_isolating(batch)
        await self.sink.push()
        self._note_latency(batch)
        self._advance(batch)

    def _note_latency(self, batch: Batch) -> None:
        """Count the batch in ``borg_stage_latency_seconds`` once its outputs are acknowledged."""
        by_topic: dict[str, tuple[list[int], Record]] = {}
        for tp, records in batch.items():
            if not records:
                continue
            stamps, oldest = by_topic.get(tp.topic) or ([], records[0])
            stamps.extend([r.timestamp for r in records if r.timestamp > 0])
            # a partition's records come in offset order: its first is (about) its oldest
            if records[0].timestamp < oldest.timestamp:
                oldest = records[0]
            by_topic[tp.topic] = (stamps, oldest)
        if not by_topic:
            return

        def observe(done: asyncio.Future[Any] | None = None) -> None:
            if done is not None and (done.cancelled() or done.exception() is not None):
                return  # a failed send: the flush reports it, and the batch is delivered again
            now_ms = time.time() * 1000.0
            for topic, (stamps, oldest) in by_topic.items():
                STAGE_LATENCY.observe(self.service, topic, stamps, now_ms, trace_id_of(oldest.headers))

        acked = self.sink.acked()
        if acked is None:
            observe()
        else:
            acked.add_done_callback(observe)

    async def _handle_isolating(self, batch: Batch) -> None:
        """``handle`` the batch; when it raises, find the records that fail it and dead-letter them.

        Processors dead-letter what they recognise as bad themselves; this catches what they did
        not expect, so one strange record never stops the stage (``ERROR_POLICY=crash`` re-raises,
        and so does a Kafka error: that is the broker's fault, not the record's). Handling the rest
        again is safe: processors are idempotent on redelivered input (the module docstring).
        """
        try:
            await self.handle(batch)
        except Exception as exc:
            if self.error_policy == "crash" or isinstance(exc, KafkaError):
                raise
            log.warning("a batch of %d records failed (%s: %s); handling its records one at a time",
                        sum(map(len, batch.values())), type(exc).__name__, exc)
            for tp, records in batch.items():
                for record in records:
                    await self._handle_one(tp, record)

    async def _handle_one(self, tp: TopicPartition, record: Record) -> None:
        try:
            await self.handle({tp: [record]})
        except Exception as exc:
            if self.error_policy == "crash" or isinstance(exc, KafkaError):
                raise
            await self.sink.dead_letter_record(record, f"{type(exc).__name__}: {exc}", "processing")

    def _needs_care(self, batch: Batch) -> bool:
        if not (self._careful or self._poison):
            return False
        return any(tp in self._careful or tp in self._poison for tp in batch)

    async def _write_start_marks(self, batch: Batch) -> None:
        """Before a partition's first batch of an assignment is handled: its start mark, at its first offset.

        Needs no commit lock: the partitions are new, so no commit round holds positions of theirs.
        """
        starts = {tp: records[0].offset for tp, records in batch.items() if tp in self._unmarked}
        if starts:
            await self._commit_marks({tp: (off, Mark(ts_ms=_now_ms(), attempts=self._plans[tp].attempts))
                                      for tp, off in starts.items()})
            self._start_offsets.update(starts)
            self._unmarked.difference_update(starts)

    async def _handle_with_care(self, batch: Batch) -> None:
        """Quarantined and careful records first, one at a time; the rest as a batch (hold both locks)."""
        if self._unmarked:
            await self._write_start_marks(batch)
        rest: Batch = {}
        for tp, records in batch.items():
            for record in records:
                if self._poison.get(tp) == record.offset:
                    del self._poison[tp]
                    log.error("%s[%d]@%d crashed this service twice: quarantined as poison", tp.topic,
                              tp.partition, record.offset)
                    await self.sink.dead_letter_record(
                        record, "the service process died twice while handling this record; quarantined "
                                "instead of handled again", "poison")
                elif self._careful.get(tp, 0) > 0:
                    await self._handle_carefully(tp, record)
                else:
                    rest.setdefault(tp, []).append(record)
            poison = self._poison.get(tp)
            if poison is not None and records[-1].offset > poison:
                del self._poison[tp]  # passed without meeting it (e.g. removed by retention)
        if rest:
            await self._handle_isolating(rest)

    async def _handle_carefully(self, tp: TopicPartition, record: Record) -> None:
        # everything before this record is made durable, then a mark naming it is committed:
        # should handling it kill the process, the next start finds that mark at (or, with input
        # held in flight, after) the committed offset
        await self._make_durable()
        attempts = self._plans[tp].attempts
        await self._commit_marks({tp: (self._held_back(tp, record.offset),
                                       Mark(ts_ms=_now_ms(), careful_at=record.offset, attempts=attempts))})
        await self._handle_one(tp, record)
        await self.sink.push()
        left = self._careful[tp] - 1
        if left > 0:
            self._careful[tp] = left
            return
        del self._careful[tp]
        # past the pass's last record, with this run's attempts: a later crash is then not blamed on
        # that record, and a start that finds this mark still there widens its careful pass
        await self._make_durable()
        await self._commit_marks({tp: (self._held_back(tp, record.offset + 1),
                                       Mark(ts_ms=_now_ms(), attempts=attempts))})
        log.info("%s[%d]: careful pass over, handled in batches again", tp.topic, tp.partition)

    async def _make_durable(self) -> None:
        for hooks in self.state:
            await hooks.checkpoint(spread_s=0.0)
        await self.sink.flush()

    def _held_back(self, tp: TopicPartition, offset: int) -> int:
        """``offset``, or less when the stage still holds input of ``tp`` in flight (``StreamHooks.hold``)."""
        held = self.hooks.hold() if self.hooks.hold is not None else None
        return offset if not held or tp not in held else min(offset, held[tp])

    async def _step_over_unreadable(self, consumer: AIOKafkaConsumer, exc: UnicodeDecodeError) -> None:
        """A record the Kafka client cannot even unpack (a header name that is not UTF-8): dead-letter it, go on.

        aiokafka decodes header names while it unpacks a fetched batch, so such a record makes every
        ``getmany`` raise and never reaches ``handle``. Every partition goes back to what this stage
        has handled (the failed call may have moved some positions past records it never returned),
        then is read one record at a time, handled as usual, until it is caught up or a batch's worth
        is done; a read that fails there names the record: it is dead-lettered (its bytes cannot be
        had from the client) and skipped.
        """
        log.warning("the Kafka client could not unpack a fetched batch (%s): reading record by record", exc)
        async with self._processing:
            assigned = sorted(consumer.assignment())
            for tp in assigned:
                position = self.positions.get(tp, self._start_offsets.get(tp))
                if position is None:
                    position = await consumer.committed(tp)
                if position is not None:
                    consumer.seek(tp, position)
            for tp in assigned:
                for _ in range(self.batch_max):
                    try:
                        got: Batch = await consumer.getmany(tp, timeout_ms=200, max_records=1)
                    except UnicodeDecodeError as unreadable:
                        offset = await consumer.position(tp)
                        await self.sink.dead_letter_record(
                            UnreadableRecord(tp.topic, tp.partition, offset),
                            f"the Kafka client cannot unpack this record ({unreadable}); its bytes are not "
                            "available to the service", "malformed")
                        consumer.seek(tp, offset + 1)
                        self.positions[tp] = offset + 1
                        continue
                    if not got:
                        break
                    await self._handle_and_advance(got)

    async def _commit_marks(self, marks: dict[TopicPartition, tuple[int, Mark]]) -> None:
        if self._consumer is None:
            return
        try:
            await self._consumer.commit({tp: (off, mark.encode()) for tp, (off, mark) in marks.items()})
        except (CommitFailedError, IllegalStateError) as exc:
            log.warning("recovery mark not committed (%s)", exc)

    async def _recognise(self, assigned: list[TopicPartition]) -> None:
        """Plan each new partition from its committed offset and mark; read back dead letters after a crash."""
        committed: dict[TopicPartition, tuple[int, str]] = {}
        try:
            admin = await connect_admin(self.settings.kafka_bootstrap, timeout_s=10.0)
            try:
                listed = await admin.list_consumer_group_offsets(self.group, partitions=assigned)
            finally:
                await admin.close()
            committed = {tp: (om.offset, om.metadata) for tp, om in listed.items() if om.offset >= 0}
        except (KafkaError, OSError) as exc:
            log.warning("committed offsets of %s not read (%s): no crash recovery for this assignment", assigned, exc)
        base = self.batch_max
        for tp in assigned:
            offset, metadata = committed.get(tp, (None, None))
            plan = plan_partition(offset, Mark.decode(metadata), careful_base=base)
            self._plans[tp] = plan
            self._unmarked.add(tp)
            if plan.careful:
                self._careful[tp] = plan.careful
                log.warning("%s[%d]: the last run stopped at offset %s without getting past it (start %d): "
                            "handling the next %d records one at a time", tp.topic, tp.partition, offset,
                            plan.attempts, plan.careful)
            if plan.poison is not None:
                self._poison[tp] = plan.poison
        crashed = {tp: self._plans[tp] for tp in assigned if self._plans[tp].crashed}
        if crashed:
            since = min(p.since_ms for p in crashed.values() if p.since_ms is not None)
            from_offsets = {(tp.topic, tp.partition): committed[tp][0] for tp in crashed}
            found = await read_back_dead_letters(
                self.settings.kafka_bootstrap, self.settings.topic(DEADLETTER_TOPIC), service=self.service,
                since_ms=since, from_offsets=from_offsets)
            self.sink.already_dead.update(found)
            if found:
                log.info("%d records past the committed offsets were dead-lettered before the crash: not again",
                         len(found))

    def _forget_plan(self, tp: TopicPartition) -> None:
        self._plans.pop(tp, None)
        self._unmarked.discard(tp)
        self._careful.pop(tp, None)
        self._poison.pop(tp, None)
        self._start_offsets.pop(tp, None)

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
            await self._commit_noted(dict(self.positions), mine, clean=True)
            partitions = {tp.partition for tp in mine}
            for hooks in self.state:
                hooks.forget(partitions)
            for tp in mine:
                self.positions.pop(tp, None)
                self._forget_plan(tp)
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
            try:
                await self._recognise(list(assigned))
            except Exception:  # recovery is best effort: without it the stage still consumes correctly
                log.exception("crash recovery for partitions %s failed; consuming them without it", partitions)
        self.progress.note_commit()  # a long restore is progress, not a stall
        log.info("partitions %s of %s assigned, state restored", partitions, ", ".join(self.topics))
        self.ready.set()


@dataclass(frozen=True, slots=True)
class UnreadableRecord:
    """Where a record the client could not unpack sits (what a dead letter needs of a record)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


def _now_ms() -> int:
    return int(time.time() * 1000)


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
    health.add_liveness(stream.service, stream.progress.check)
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
