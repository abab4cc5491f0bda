"""A changelog drain writes each key once: the last record of a key queued since the previous drain
(a regime or risk drain with several windows of a node per batch), in the order the keys were last written."""

from __future__ import annotations

from services.runtime.batch_stream import ChangelogState, superseded_dropped


class _Sink:
    def __init__(self) -> None:
        self.sent: list[list[tuple[int, bytes, bytes]]] = []

    async def changelog_many(self, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
        self.sent.append(records)


async def test_a_drain_sends_the_last_record_of_each_key_in_order() -> None:
    sink = _Sink()
    state = ChangelogState(bootstrap="127.0.0.1:1", topic="t", sink=sink)  # type: ignore[arg-type]
    for key, value in (("a", b"1"), ("b", b"1"), ("a", b"2"), ("c", b"1"), ("a", b"3"), ("b", b"2")):
        state.put(key, value)
    await state.drain()
    assert sink.sent == [[(0, b"c", b"1"), (0, b"a", b"3"), (0, b"b", b"2")]]
    assert state.data == {b"a": b"3", b"b": b"2", b"c": b"1"} and state.pending == []
    state.put("a", b"4")
    await state.drain()
    await state.drain()  # nothing queued: nothing sent
    assert sink.sent[1:] == [[(0, b"a", b"4")]]


def test_only_a_later_record_of_the_same_key_and_partition_replaces_one() -> None:
    records = [(0, b"a", b"1"), (1, b"a", b"1"), (0, b"b", b"1")]
    assert superseded_dropped(records) is records  # nothing to drop: the same list, not a copy
    assert superseded_dropped([*records, (1, b"a", b"2")]) == [(0, b"a", b"1"), (0, b"b", b"1"), (1, b"a", b"2")]
    assert superseded_dropped([]) == []
