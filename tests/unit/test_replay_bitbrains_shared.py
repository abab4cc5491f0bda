"""The real Bitbrains files parse and replay as valid NodeState (needs ../shared/data)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from contracts import NodeState
from loadtests.sources import Clock
from loadtests.sources.bitbrains import BitbrainsReplay
from training.forecast.bitbrains import read_file, read_rows

pytestmark = pytest.mark.shared_data


def test_real_files_fast_and_line_parsers_agree(shared_data: Path) -> None:
    root = shared_data / "bitbrains_rnd"
    files = sorted(root.rglob("*.csv.gz"))[:3]
    assert files
    for f in files:
        t, cpu, _ = read_file(f)
        rows = list(read_rows(f))
        assert len(rows) == len(t) > 1000
        assert [r.time_s for r in rows] == t.tolist()
        assert [r.cpu_pct for r in rows] == pytest.approx(cpu.tolist())


def test_real_replay_is_valid_nodestate(shared_data: Path) -> None:
    replay = BitbrainsReplay(shared_data / "bitbrains_rnd", nodes=3)
    chunks = list(itertools.islice(replay.chunks(Clock(1_700_000_000_000)), 50))
    states = [NodeState.model_validate_json(v) for c in chunks for _, v in c.records]
    assert len({s.node for s in states}) == 3
    assert all(s.counters == {} and s.source == "replay_bitbrains" for s in states)
