"""Recognising what a crash left behind: records that crash the process, dead letters already written.

Every offset commit of a consumer carries a small mark in the commit's metadata (Kafka stores it
with the offset, atomically). Because the mark is written with the commit, it says what the last
run was doing when it stopped:

* ``clean``: an orderly shutdown or partition hand-over wrote it; nothing to recognise.
* ``attempts``: starts at this offset that never committed past it. A run writes its start mark
  (``attempts`` + 1) before it handles anything; its first regular commit resets it.
  A start after a run that did not end cleanly handles the partition **carefully** from the
  committed offset (one record at a time, each preceded by a commit whose mark names it,
  ``careful_at``): ``CAREFUL_FIRST`` records (at most a batch) when the previous run had made
  progress, a batch's worth doubling with every further start that finds none since.
  The end of a careful pass is committed past its last record with the run's ``attempts``, so a
  later crash is neither blamed on that record nor taken for progress.
* ``careful_at``: the record being handled carefully when the mark was written. A start that
  finds it at or after the committed offset knows that record killed the process: it is
  dead-lettered as ``poison`` and skipped, never handled a third time. (The committed offset
  may lie before it: a stage that holds input still in flight, such as the referee's open
  decision windows, commits no further than that input, which is then delivered again.)

After a run that did not end cleanly, dead letters it had written past the committed offsets
are read back (``DeadLetterLedger``), so a record is dead-lettered once per service, even when
the crash came between the dead letter's acknowledgement and the offset commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from contracts import ContractError, DeadLetterV2, decode
from services.runtime.admin import connect_admin
from services.runtime.kafka_security import kafka_client_options

log = logging.getLogger(__name__)

CAREFUL_MAX = 100_000
"""Most records one careful pass handles one at a time (each costs an offset commit, ~1-3 ms)."""
CAREFUL_FIRST = 100
"""Records handled carefully after a crash that followed progress (the batch size when smaller): the record
that killed the run is most often just past its last commit, and pinning it on this start saves a crash."""
READ_BACK_SLACK_MS = 120_000
"""Dead letters are read back from this long before the last mark (clock skew, commit interval)."""


@dataclass(frozen=True, slots=True)
class Mark:
    ts_ms: int
    attempts: int = 0
    careful_at: int | None = None
    clean: bool = False

    def encode(self) -> str:
        body: dict[str, object] = {"v": 1, "ts": self.ts_ms, "a": self.attempts}
        if self.careful_at is not None:
            body["c"] = self.careful_at
        if self.clean:
            body["clean"] = True
        return orjson.dumps(body).decode()

    @staticmethod
    def decode(text: str | None) -> Mark | None:
        """The mark in a commit's metadata; None for none, another writer's or a garbled one."""
        if not text:
            return None
        try:
            body = orjson.loads(text)
            if not isinstance(body, dict) or body.get("v") != 1:
                return None
            careful = body.get("c")
            return Mark(ts_ms=int(body["ts"]), attempts=max(0, int(body.get("a", 0))),
                        careful_at=None if careful is None else int(careful), clean=bool(body.get("clean", False)))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True, slots=True)
class Plan:
    """What a newly assigned partition needs before it is consumed as usual."""

    attempts: int
    """Written in the start mark."""
    careful: int = 0
    """Records to handle one at a time (0: none)."""
    poison: int | None = None
    """Offset of a record that crashed the process: dead-letter it as ``poison``, do not handle it."""
    crashed: bool = False
    """The previous run did not end cleanly: read back the dead letters it wrote."""
    since_ms: int | None = None
    """Time of the previous run's last mark (where reading dead letters back starts)."""


def plan_partition(committed: int | None, mark: Mark | None, *, careful_base: int) -> Plan:
    """Pure: from the committed offset and its mark, what this start must do for the partition."""
    if committed is None or mark is None:
        return Plan(attempts=1)  # never committed by this runtime: nothing to recognise
    if mark.clean:
        return Plan(attempts=1)
    if mark.careful_at is not None and mark.careful_at >= committed:
        return Plan(attempts=1, poison=mark.careful_at, crashed=True, since_ms=mark.ts_ms)
    attempts = mark.attempts + 1
    base = max(1, careful_base)
    careful = min(CAREFUL_FIRST, base) if attempts == 1 else min(CAREFUL_MAX, base * 2 ** min(attempts - 2, 20))
    return Plan(attempts=attempts, careful=careful, crashed=True, since_ms=mark.ts_ms)


def commit_mark(ts_ms: int, *, clean: bool, plan: Plan | None, careful_left: int, poison: int | None) -> Mark:
    """Pure: the mark a regular or hand-over commit carries for one partition.

    While a careful pass or a pending poison is unfinished, no commit may say ``clean`` or reset the attempts:
    a hand-over in the middle (a rebalance) would let the next owner go in batches into the record that killed
    the last run. Such a commit keeps the plan's attempts and names the pending poison."""
    if plan is not None and (careful_left > 0 or poison is not None):
        return Mark(ts_ms=ts_ms, attempts=plan.attempts, careful_at=poison)
    return Mark(ts_ms=ts_ms, clean=clean)


DeadKey = tuple[str, int, int]
"""(source topic, partition, offset) of a dead-lettered record."""


async def read_back_dead_letters(
    bootstrap: str, topic: str, *, service: str, since_ms: int, from_offsets: dict[tuple[str, int], int],
) -> set[DeadKey]:
    """Dead letters ``service`` wrote since ``since_ms`` for records at or after ``from_offsets``.

    Bounded by what all services dead-lettered since the crash (usually little); a failure to read
    is logged and yields nothing (a duplicate dead letter is better than not starting).
    """
    found: set[DeadKey] = set()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **kafka_client_options(),
                                group_id=None, enable_auto_commit=False,
                                isolation_level="read_committed")
    try:
        await consumer.start()
        tps = await _partitions(bootstrap, topic)
        if not tps:
            return found
        consumer.assign(tps)
        starts = await consumer.offsets_for_times({tp: max(0, since_ms - READ_BACK_SLACK_MS) for tp in tps})
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            start = starts.get(tp)
            if start is None:
                consumer.seek(tp, ends[tp])
            else:
                consumer.seek(tp, start.offset)
        while True:
            remaining = [tp for tp in tps if await consumer.position(tp) < ends[tp]]
            if not remaining:
                break
            batch = await consumer.getmany(*remaining, timeout_ms=1000, max_records=5000)
            if not batch:
                continue
            for records in batch.values():
                found.update(_matching(records, service, from_offsets))
    except (KafkaError, OSError) as exc:
        log.warning("could not read back dead letters from %s (%s); a record may be dead-lettered twice", topic, exc)
    finally:
        await _stop_quietly(consumer)
    return found


async def _partitions(bootstrap: str, topic: str) -> list[TopicPartition]:
    # (a group-less consumer's partitions_for_topic knows only topics it was assigned already)
    admin = await connect_admin(bootstrap, timeout_s=10.0)
    try:
        if topic not in await admin.list_topics():  # describing a missing topic may auto-create it
            return []
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return [TopicPartition(topic, p["partition"]) for t in described if t["topic"] == topic and not t["error_code"]
            for p in t["partitions"]]


async def _stop_quietly(consumer: AIOKafkaConsumer) -> None:
    """``consumer.stop()``, except that aiokafka's group-less coordinator can raise CancelledError from it.

    (Its ``close`` cancels and awaits a task that may not have run yet.) Here that would escape the
    rebalance callback this runs in and kill the stage's consumer; a real cancellation of the
    calling task is re-raised.
    """
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        log.debug("group-less consumer stopped with a CancelledError of its own (ignored)")


def _matching(records: Iterable[object], service: str, from_offsets: dict[tuple[str, int], int]) -> set[DeadKey]:
    out: set[DeadKey] = set()
    for record in records:
        try:
            letter = decode(DeadLetterV2, getattr(record, "value", None))
        except ContractError:
            continue
        start = from_offsets.get((letter.source_topic, letter.partition))
        if letter.service == service and start is not None and letter.offset >= start:
            out.add((letter.source_topic, letter.partition, letter.offset))
    return out
