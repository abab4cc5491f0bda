"""The bounded on-disk spool: order, persistence, drop-oldest accounting, torn-tail recovery."""

from __future__ import annotations

import logging
from collections import deque
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from services.node_agent.spool import Spool

HEADERS = [("content-type", b"application/json"), ("schema", b"nodestate.v1")]


def _dropped_metric() -> float:
    return REGISTRY.get_sample_value("borg_spool_dropped_total") or 0.0


def test_fifo_and_commit(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    for i in range(10):
        assert spool.append(b"node-a", f"v{i}".encode(), HEADERS) == i
    first = spool.peek(4)
    assert [r.value for r in first] == [b"v0", b"v1", b"v2", b"v3"]
    assert first[0].key == b"node-a"
    assert first[0].headers == HEADERS
    assert spool.commit(first[-1].index) == 4
    assert [r.value for r in spool.peek(100)] == [f"v{i}".encode() for i in range(4, 10)]
    assert len(spool) == 6


def test_survives_restart(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=1024)
    for i in range(100):
        spool.append(b"k", f"value-{i:03d}".encode() * 3)
    spool.commit(spool.peek(37)[-1].index)
    spool.close()
    again = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=1024)
    records = again.peek(1000)
    assert [r.index for r in records] == list(range(37, 100))
    assert records[0].value == b"value-037" * 3
    assert again.append(b"k", b"next") == 100


def test_full_spool_drops_oldest_and_counts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    spool = Spool(tmp_path, max_bytes=4096, segment_bytes=1024)
    before = _dropped_metric()
    with caplog.at_level(logging.WARNING, logger="services.node_agent.spool"):
        for i in range(200):
            spool.append(b"k", f"{i:05d}".encode() * 10)
    assert spool.live_bytes <= 4096
    assert spool.dropped > 0
    assert _dropped_metric() - before == spool.dropped
    assert any("dropped" in r.message and "oldest" in r.message for r in caplog.records)
    values = [r.value for r in spool.peek(1000)]
    assert values[-1] == b"00199" * 10  # newest kept
    indices = [r.index for r in spool.peek(1000)]
    assert indices == list(range(200 - len(indices), 200))  # the oldest went, in order
    disk = sum(p.stat().st_size for p in tmp_path.glob("*.seg"))
    assert disk <= 4096 + 1024 + 128


def test_commit_after_drops_during_flight(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=2048, segment_bytes=512)
    for i in range(10):
        spool.append(b"k", bytes([i]) * 100)
    in_flight = spool.peek(5)
    for i in range(10, 30):
        spool.append(b"k", bytes([i]) * 100)  # drops the records that are in flight
    spool.commit(in_flight[-1].index)
    remaining = spool.peek(100)
    assert remaining
    assert all(r.index > in_flight[-1].index for r in remaining)
    assert remaining[-1].value == bytes([29]) * 100


def test_torn_tail_is_cut(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    for i in range(5):
        spool.append(b"k", f"v{i}".encode())
    spool.close()
    (segment,) = tmp_path.glob("*.seg")
    with segment.open("ab") as fh:
        fh.write(b"\x40\x00\x00\x00\x01\x02")  # a crash mid-write
    with caplog.at_level(logging.WARNING):
        again = Spool(tmp_path, max_bytes=1 << 20)
    assert [r.value for r in again.peek(10)] == [f"v{i}".encode() for i in range(5)]
    assert any("torn" in r.message for r in caplog.records)
    assert again.append(b"k", b"after") == 5
    again.close()
    assert [r.value for r in Spool(tmp_path, max_bytes=1 << 20).peek(10)][-1] == b"after"


def test_delivered_segments_are_deleted(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=256)
    for i in range(50):
        spool.append(b"k", b"x" * 60 + bytes([i]))
    assert len(list(tmp_path.glob("*.seg"))) > 5
    spool.commit(spool.peek(1000)[-1].index)
    assert len(spool) == 0
    assert len(list(tmp_path.glob("*.seg"))) <= 1


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(min_value=1, max_value=300)),
            st.tuples(st.just("ship"), st.integers(min_value=1, max_value=20)),
            st.tuples(st.just("reopen"), st.just(0)),
        ),
        max_size=60,
    )
)
def test_behaves_like_a_bounded_fifo(tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]]) -> None:
    """Against an exact model: a FIFO of (index, value) that drops its oldest entries to stay under the limit."""
    directory = tmp_path_factory.mktemp("spool")
    limit = 3000
    spool = Spool(directory, max_bytes=limit, segment_bytes=700)
    model: deque[tuple[int, bytes]] = deque()
    dropped = 0
    next_index = 0

    def size(value: bytes) -> int:
        return 8 + 2 + len(b"key") + 2 + len(value)  # frame + key + header count + value

    for op, arg in ops:
        if op == "append":
            value = next_index.to_bytes(4, "big") * (arg // 4 + 1)
            while model and sum(size(v) for _, v in model) + size(value) > limit:
                model.popleft()
                dropped += 1
            assert spool.append(b"key", value) == next_index
            model.append((next_index, value))
            next_index += 1
        elif op == "ship":
            batch = spool.peek(arg)
            assert [(r.index, r.value) for r in batch] == list(model)[:arg]
            if batch:
                spool.commit(batch[-1].index)
                for _ in batch:
                    model.popleft()
        else:
            spool.close()
            spool = Spool(directory, max_bytes=limit, segment_bytes=700)
            dropped = 0  # the drop count is per process (the metric is what accumulates)
        assert [(r.index, r.value) for r in spool.peek(10_000)] == list(model)
        assert spool.live_bytes == sum(size(v) for _, v in model) <= limit
        assert spool.dropped == dropped
    spool.close()


def test_indices_never_go_backwards_even_without_segments(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=256)
    for i in range(20):
        spool.append(b"k", bytes([i]) * 50)
    spool.commit(spool.peek(100)[-1].index)
    spool.close()
    for seg in tmp_path.glob("*.seg"):
        seg.unlink()  # an operator cleaned up the segments but left HEAD
    again = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=256)
    assert again.append(b"k", b"fresh") >= 19
    again.close()
    assert [r.value for r in Spool(tmp_path, max_bytes=1 << 20).peek(10)] == [b"fresh"]


def test_a_failed_write_drops_the_sample_and_keeps_the_segment_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    spool.append(b"k", b"before")
    real_open = open

    class FullDisk:
        def __init__(self, fh: object) -> None:
            self.fh = fh

        def write(self, data: bytes) -> int:
            self.fh.write(data[:5])  # type: ignore[attr-defined]
            self.fh.flush()  # type: ignore[attr-defined]
            raise OSError(28, "No space left on device")

        def close(self) -> None:
            self.fh.close()  # type: ignore[attr-defined]

    spool.close()
    spool = Spool(tmp_path, max_bytes=1 << 20)
    monkeypatch.setattr("builtins.open", lambda *a, **k: FullDisk(real_open(*a, **k)))
    assert spool.append(b"k", b"lost") == -1
    assert spool.dropped == 1
    monkeypatch.setattr("builtins.open", real_open)
    spool.append(b"k", b"after")
    spool.close()
    assert [r.value for r in Spool(tmp_path, max_bytes=1 << 20).peek(10)] == [b"before", b"after"]
