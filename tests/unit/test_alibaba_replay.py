"""Alibaba 2018 machine_usage rows → NodeState: missing counters stay missing, errors name file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts import NodeState
from loadtests.sources import Clock
from loadtests.sources.recorded import AlibabaReplay
from services.node_agent.errors import InputLineError
from services.node_agent.recorded import alibaba_nodestate, parse_alibaba_line, read_alibaba

ROWS = """m_1,100,41,92,,,43.04,33.08,5
m_2,100,10,50,0.37,1,46.55,35.92,8
m_1,110,43,92,0.58,0,43.04,33.08,5
m_2,130,12,51,,,46.56,35.94,7
"""


def test_metrics_only_when_present() -> None:
    rows = list(read_alibaba(ROWS.splitlines(), "mu.csv"))
    without = alibaba_nodestate(rows[0], seq=0, ts_ms=1_700_000_000_000, interval_ms=10_000)
    with_pmu = alibaba_nodestate(rows[1], seq=0, ts_ms=1_700_000_000_000, interval_ms=10_000)
    a, b = NodeState.model_validate(without), NodeState.model_validate(with_pmu)
    assert "mem_gps" not in a.metrics
    assert "mkpi" not in a.metrics
    assert a.supported_events == []
    assert b.metrics["mem_gps"] == pytest.approx(0.37)
    assert b.metrics["mkpi"] == 1.0
    assert b.supported_events == ["mem_gps", "mkpi"]
    assert rows[2].metrics["mkpi"] == 0.0  # a real zero stays a zero
    assert a.cpu_util == pytest.approx(0.41)
    assert a.mem_util == pytest.approx(0.92)
    assert a.source == "replay_alibaba"
    assert a.pmu == "recorded"
    assert a.counters == {}


def test_replay_orders_by_time_with_per_machine_seq_and_interval(tmp_path: Path) -> None:
    path = tmp_path / "machine_usage.csv"
    path.write_text(ROWS)
    clock = Clock(start_ms=1_700_000_000_000, speedup=10.0)
    chunks = list(AlibabaReplay(path).chunks(clock))
    states = [NodeState.model_validate_json(v) for chunk in chunks for _, v in chunk.records]
    assert [(s.node, s.seq) for s in states] == [("m_1", 0), ("m_2", 0), ("m_1", 1), ("m_2", 1)]
    assert [s.ts_ms for s in states] == [1_700_000_000_000, 1_700_000_000_000, 1_700_000_001_000, 1_700_000_003_000]
    assert states[2].interval_ms == 10_000
    assert states[3].interval_ms == 30_000
    assert [c.due_s for c in chunks] == [0.0, 1.0, 3.0]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("m_1,100,41,92,,,43.04,33.08", "expected 9 columns"),
        ("m_1,abc,41,92,,,43.04,33.08,5", "time_stamp"),
        ("m_1,100,x,92,,,43.04,33.08,5", "cpu_util_percent: not a number"),
        ("m_1,100,141,92,,,43.04,33.08,5", "<= 100"),
        ("m_1,100,41,92,-2,,43.04,33.08,5", "mem_gps"),
        (",100,41,92,,,43.04,33.08,5", "machine_id"),
        ("m_1,100,,92,,,43.04,33.08,5", "required"),
    ],
)
def test_bad_rows_name_file_and_line(line: str, reason: str) -> None:
    with pytest.raises(InputLineError, match=reason) as info:
        list(read_alibaba(["m_0,1,1,1,,,1,1,1", "", line], "data/mu.csv"))
    assert str(info.value).startswith("data/mu.csv:3:")
    assert info.value.line == 3


@pytest.mark.shared_data
def test_real_excerpt(shared_data: Path) -> None:
    path = shared_data / "alibaba2018" / "machine_usage.csv"
    with path.open() as fh:
        rows = list(read_alibaba(fh, str(path)))
    assert len(rows) == 78_075
    with_pmu = [r for r in rows if "mem_gps" in r.metrics]
    assert len(with_pmu) == 17_332
    assert all("mkpi" in r.metrics for r in with_pmu)
    for row in rows[::997]:
        NodeState.model_validate(alibaba_nodestate(row, seq=0, ts_ms=1_700_000_000_000, interval_ms=10_000))
    assert parse_alibaba_line("m_1932,386640,41,92,,,43.04,33.08,5", str(path), 1).metrics == {
        "net_in": 43.04,
        "net_out": 33.08,
        "disk_io_percent": 5.0,
    }


def test_minus_one_is_the_traces_missing_marker() -> None:
    row = parse_alibaba_line("m_1934,212730,72,95,,,37.49,28.09,-1", "mu.csv", 1)
    assert "disk_io_percent" not in row.metrics
