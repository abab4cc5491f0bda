"""The stream processors' loop on the real broker: changelog state across restarts, commits, restore failure.

A small counting processor on ``BatchStream`` + ``ChangelogState``: per key, how many
records it has seen. Running it twice over one topic (the second run after more input)
must continue the counts from the changelog and the committed offsets, and a worker whose
state cannot be restored must stop instead of consuming without it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from aiokafka import AIOKafkaProducer

from services.risk.replay import committed_offsets
from services.runtime.batch_stream import Batch, BatchStream, ChangelogState
from services.runtime.changelog import read_changelog
from services.runtime.latency import STAGE_LATENCY
from services.runtime.stream_io import Sink
from services.runtime.stream_settings import StreamSettings
from tests.conftest import wait_until

pytestmark = [pytest.mark.integration]
SERVICE = "counter"
TOPIC = "nodestate.v1"  # any registry topic with 6 partitions; the values are opaque here


def _settings(bootstrap: str, prefix: str) -> StreamSettings:
    # keyword names are the settings' environment variables (validation aliases)
    return StreamSettings(KAFKA_BOOTSTRAP=bootstrap, BORG_TOPIC_PREFIX=prefix,  # type: ignore[call-arg]
                          STREAM_COMMIT_INTERVAL_S=0.2)


class _Counter:
    def __init__(self, bootstrap: str, prefix: str, sink: Sink) -> None:
        self.state = ChangelogState(bootstrap=bootstrap, topic=f"{prefix}borg-{SERVICE}-counts-changelog", sink=sink)
        self.stream = BatchStream(service=SERVICE, settings=_settings(bootstrap, prefix), sink=sink, topics=[TOPIC],
                                  handle=self.handle, state=[self.state])
        self.handled = 0

    async def handle(self, batch: Batch) -> None:
        for tp, records in batch.items():
            self.state.partition = tp.partition
            for record in records:
                key = (record.key or b"").decode()
                seen = int(self.state.get(key) or b"0")
                self.state.put(key, str(seen + 1).encode())
                self.handled += 1


async def _produce(bootstrap: str, topic: str, keys: Sequence[str], rounds: int) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for _ in range(rounds):
            for key in keys:
                await producer.send(topic, key=key.encode(), value=b"x")
        await producer.flush()
    finally:
        await producer.stop()
    return rounds * len(keys)


async def _run_until(counter: _Counter, bootstrap: str, prefix: str, total: int) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(counter.stream.run(stop))
    try:
        async def committed() -> bool:
            done = await committed_offsets(bootstrap, counter.stream.group, prefix + TOPIC)
            return sum(done.values()) >= total

        await wait_until(committed, timeout=60, interval=0.3, what=f"{total} records committed")
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_state_and_offsets_continue_across_restarts(kafka_bootstrap: str, topic_prefix: str) -> None:
    keys = [f"node-{i:03d}" for i in range(40)]
    sink = Sink(bootstrap=kafka_bootstrap, service=SERVICE, topic_prefix=topic_prefix)
    await sink.start()
    try:
        first = await _produce(kafka_bootstrap, topic_prefix + TOPIC, keys, 3)
        one = _Counter(kafka_bootstrap, topic_prefix, sink)
        await _run_until(one, kafka_bootstrap, topic_prefix, first)
        assert one.handled == first
        total = first + await _produce(kafka_bootstrap, topic_prefix + TOPIC, keys, 2)
        two = _Counter(kafka_bootstrap, topic_prefix, sink)
        await _run_until(two, kafka_bootstrap, topic_prefix, total)
        assert two.handled == total - first, "the second run re-read committed input"
        assert {k: int(two.state.get(k) or b"0") for k in keys} == dict.fromkeys(keys, 5)
        # every record handled was counted in the stage latency histogram (once, across both runs)
        (family,) = list(STAGE_LATENCY.collect())
        counted = [s.value for s in family.samples if s.name == "borg_stage_latency_seconds_count"
                   and s.labels == {"service": SERVICE, "topic": topic_prefix + TOPIC}]
        assert counted == [total]
        changelog = await read_changelog(kafka_bootstrap, two.state.topic, range(6))
        merged = {k.decode(): int(v) for part in changelog.values() for k, v in part.items()}
        assert merged == dict.fromkeys(keys, 5)
        # every key's records live in the partition its input came from
        owners = {k.decode(): p for p, part in changelog.items() for k in part}
        assert {two.state.owner[k.encode()] for k in keys} <= set(owners.values())
        assert all(two.state.owner[k.encode()] == owners[k] for k in keys)
    finally:
        await sink.stop()


class _BrokenRestore(ChangelogState):
    async def restore(self, partitions: Sequence[int]) -> None:
        raise OSError("changelog unreadable (injected)")


async def test_a_worker_that_cannot_restore_its_state_stops(kafka_bootstrap: str, topic_prefix: str) -> None:
    sink = Sink(bootstrap=kafka_bootstrap, service=SERVICE, topic_prefix=topic_prefix)
    await sink.start()
    try:
        await _produce(kafka_bootstrap, topic_prefix + TOPIC, ["a", "b"], 1)
        counter = _Counter(kafka_bootstrap, topic_prefix, sink)
        assert counter.stream.topics == [topic_prefix + TOPIC]
        broken = _BrokenRestore(bootstrap=kafka_bootstrap, topic=counter.state.topic, sink=sink)
        counter.stream.state = [broken]
        with pytest.raises(RuntimeError, match="state restore failed"):
            await asyncio.wait_for(counter.stream.run(asyncio.Event()), 60)
        assert counter.handled == 0, "records were handled without their state"
        assert not counter.stream.is_ready()
    finally:
        await sink.stop()


class _SlowCheckpoint(ChangelogState):
    """A checkpoint that takes seconds (a large state written in slices, a slow broker)."""

    def __init__(self, *args: object, gate: asyncio.Event, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.gate = gate
        self.rounds = 0

    async def checkpoint(self, *, spread_s: float = 0.0) -> None:
        self.rounds += 1
        if self.rounds == 1:
            await self.gate.wait()
        await super().checkpoint(spread_s=spread_s)


async def test_batches_go_on_while_a_commit_round_waits(kafka_bootstrap: str, topic_prefix: str) -> None:
    """A commit round notes positions between batches, then checkpoints beside the batch loop.

    While the first round's checkpoint is held, later input is still handled, and no offset
    is committed; once it is released the round commits what it noted, and the next rounds
    commit the rest.
    """
    keys = [f"k{i}" for i in range(12)]
    sink = Sink(bootstrap=kafka_bootstrap, service=SERVICE, topic_prefix=topic_prefix)
    await sink.start()
    stop = asyncio.Event()
    gate = asyncio.Event()
    try:
        first = await _produce(kafka_bootstrap, topic_prefix + TOPIC, keys, 1)
        counter = _Counter(kafka_bootstrap, topic_prefix, sink)
        slow = _SlowCheckpoint(bootstrap=kafka_bootstrap, topic=counter.state.topic, sink=sink, gate=gate)
        counter.state = slow
        counter.stream.state = [slow]
        task = asyncio.create_task(counter.stream.run(stop))
        await wait_until(lambda: slow.rounds == 1, timeout=60, interval=0.05, what="the first commit round")
        more = await _produce(kafka_bootstrap, topic_prefix + TOPIC, keys, 3)
        await wait_until(lambda: counter.handled == first + more, timeout=30, interval=0.05,
                         what="input handled while the commit round waits")
        done = await committed_offsets(kafka_bootstrap, counter.stream.group, topic_prefix + TOPIC)
        assert sum(done.values()) == 0, "offsets committed before the state they depend on was written"
        gate.set()

        async def all_committed() -> bool:
            offsets = await committed_offsets(kafka_bootstrap, counter.stream.group, topic_prefix + TOPIC)
            return sum(offsets.values()) == first + more

        await wait_until(all_committed, timeout=30, interval=0.2, what="every record committed")
        stop.set()
        await asyncio.wait_for(task, 30)
        changelog = await read_changelog(kafka_bootstrap, slow.topic, range(6))
        merged = {k.decode(): int(v) for part in changelog.values() for k, v in part.items()}
        assert merged == dict.fromkeys(keys, 4)
    finally:
        stop.set()
        gate.set()
        await sink.stop()


class _RefusingSink(Sink):
    """The broker refuses what the processor wrote (e.g. an authorisation or size error)."""

    refuse = True

    async def flush(self) -> None:
        if self.refuse:
            raise OSError("produce refused (injected)")
        await super().flush()


async def test_a_failed_commit_round_stops_the_worker(kafka_bootstrap: str, topic_prefix: str) -> None:
    sink = _RefusingSink(bootstrap=kafka_bootstrap, service=SERVICE, topic_prefix=topic_prefix)
    await sink.start()
    try:
        await _produce(kafka_bootstrap, topic_prefix + TOPIC, ["a", "b"], 1)
        counter = _Counter(kafka_bootstrap, topic_prefix, sink)
        with pytest.raises(RuntimeError, match="commit failed") as caught:
            await asyncio.wait_for(counter.stream.run(asyncio.Event()), 60)
        assert isinstance(caught.value.__cause__, OSError)
        done = await committed_offsets(kafka_bootstrap, counter.stream.group, topic_prefix + TOPIC)
        assert sum(done.values()) == 0, "offsets committed although the outputs were refused"
    finally:
        sink.refuse = False
        await sink.stop()


async def test_a_lingering_stream_gets_what_trickled_in_as_one_batch(kafka_bootstrap: str, topic_prefix: str) -> None:
    """With ``linger_s`` the broker gathers the batch: records arriving a few ms apart come as a few batches."""
    sink = Sink(bootstrap=kafka_bootstrap, service=SERVICE, topic_prefix=topic_prefix)
    await sink.start()
    stop = asyncio.Event()
    sizes: list[int] = []
    try:
        counter = _Counter(kafka_bootstrap, topic_prefix, sink)

        async def handle(batch: Batch) -> None:
            sizes.append(sum(map(len, batch.values())))
            await counter.handle(batch)

        stream = BatchStream(service=SERVICE, settings=_settings(kafka_bootstrap, topic_prefix), sink=sink,
                             topics=[TOPIC], handle=handle, state=[counter.state], linger_s=0.5)
        task = asyncio.create_task(stream.run(stop))
        await wait_until(stream.is_ready, timeout=60, what="partitions assigned")
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", linger_ms=0)
        await producer.start()
        try:
            for i in range(60):  # one record every ~5 ms: ~0.3 s of trickle
                await producer.send_and_wait(topic_prefix + TOPIC, key=f"k{i % 6}".encode(), value=b"x")
                await asyncio.sleep(0.005)
        finally:
            await producer.stop()
        await wait_until(lambda: counter.handled == 60, timeout=30, what="60 records handled")
        stop.set()
        await asyncio.wait_for(task, 30)
        # polling without a broker-side linger hands these out a record or two at a time
        assert len(sizes) <= 6, f"60 trickled records came in {len(sizes)} batches: {sizes}"
    finally:
        stop.set()
        await sink.stop()
