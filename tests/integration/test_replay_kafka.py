"""`borgctl replay` against the real broker: every message it produces validates against its contract."""

from __future__ import annotations

import asyncio
import gzip
from collections import defaultdict
from pathlib import Path

import pytest

from contracts import NodeState, TaskEvent, decode
from contracts.headers import header
from loadtests import replay
from tests.kafka_helpers import consume

pytestmark = pytest.mark.integration


async def test_synthetic_replay_is_valid_and_ordered_per_node(kafka_bootstrap: str, topic_prefix: str) -> None:
    argv = [
        "--source",
        "synthetic",
        "--nodes",
        "40",
        "--count",
        "2000",
        "--seed",
        "3",
        "--quiet",
        "--bootstrap",
        kafka_bootstrap,
        "--topic-prefix",
        topic_prefix,
    ]
    assert await asyncio.to_thread(replay.main, argv) == 0
    records = await consume(kafka_bootstrap, f"{topic_prefix}nodestate.v1", 2000)
    assert len(records) == 2000
    seqs: dict[str, list[int]] = defaultdict(list)
    for record in records:
        state = decode(NodeState, record.value)  # the hot path skipped pydantic; the consumer does not
        assert record.key == state.node.encode()
        assert header(record.headers, "schema") == "nodestate.v1"
        seqs[state.node].append(state.seq)
    assert len(seqs) == 40
    assert all(s == list(range(50)) for s in seqs.values())


async def test_google2011_replay_produces_task_events(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    rows = [
        "0,2,3418309,0,4155527081,0,70s3v5qRyCO/1PCdI6fVXnrW8FU/w+5CKRSa72xgcIo=,3,9,,,,",
        "600026913,,515042969,10,,0,r8bWgSzDkQkiNuy3qfpelcHjIi1u2PfrHdXkl9q5iwY=,0,1,0.0125,0.01553,0.0001154,1",
        "600026999,,515042969,10,351618647,1,r8bWgSzDkQkiNuy3qfpelcHjIi1u2PfrHdXkl9q5iwY=,0,1,0.0125,0.01553,0.0001154,1",
        "700000000,,515042969,10,351618647,4,r8bWgSzDkQkiNuy3qfpelcHjIi1u2PfrHdXkl9q5iwY=,0,1,0.0125,0.01553,0.0001154,1",
    ]
    part = tmp_path / "task_events" / "part-00000-of-00500.csv.gz"
    part.parent.mkdir()
    with gzip.open(part, "wt") as fh:
        fh.write("\n".join(rows) + "\n")
    argv = [
        "--source",
        "google2011",
        "--path",
        str(tmp_path),
        "--quiet",
        "--speedup",
        "1000",
        "--bootstrap",
        kafka_bootstrap,
        "--topic-prefix",
        topic_prefix,
    ]
    assert await asyncio.to_thread(replay.main, argv) == 0
    records = await consume(kafka_bootstrap, f"{topic_prefix}taskevents.v1", 4)
    events = sorted((decode(TaskEvent, r.value) for r in records), key=lambda e: e.trace_time_us or 0)
    assert [e.event for e in events] == ["SUBMIT", "SUBMIT", "SCHEDULE", "FINISH"]
    assert events[3].task_id == "515042969-10"
    assert events[3].machine == "m351618647"
    assert events[3].ts_ms - events[0].ts_ms == 700  # 700 s of trace time at 1000× speed-up (and paced so)
