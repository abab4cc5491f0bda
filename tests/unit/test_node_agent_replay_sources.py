"""Replay sources without a broker: the fast encoders produce contract-valid values; bad input names file:line."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from contracts import NodeState, TaskEvent, decode
from loadtests import replay
from loadtests.sources import Clock
from loadtests.sources.google2011 import Google2011Replay, task_event
from services.node_agent.errors import InputLineError
from services.node_agent.synthetic import SyntheticEncoder
from simulator import SyntheticCluster

CLOCK = Clock(start_ms=1_700_000_000_000, speedup=1.0)


def test_fast_synthetic_encoder_is_contract_valid_and_matches_the_plain_dicts() -> None:
    sim = SyntheticCluster(nodes=60, seed=11, missing_event_prob=0.4, multiplex_prob=0.4, anomaly_rate=0.05)
    twin = SyntheticCluster(nodes=60, seed=11, missing_event_prob=0.4, multiplex_prob=0.4, anomaly_rate=0.05)
    encoder = SyntheticEncoder(sim)
    for tick in range(5):
        batch, same = sim.tick(), twin.tick()
        values = encoder.encode(batch, ts_ms=1_700_000_000_000 + tick * 1000, seq=tick)
        plain = same.nodestate_dicts(ts_ms=1_700_000_000_000 + tick * 1000)
        for key, value, expected in zip(encoder.keys, values, plain, strict=True):
            fast = decode(NodeState, value)  # the contract check the hot path skips
            assert fast == NodeState.model_validate(expected)
            assert key == fast.node.encode()
    statuses = {c.status for v in values for c in decode(NodeState, v).counters.values()}
    assert statuses == {"counted", "multiplexed", "not_supported"}


GOOD = [
    "0,2,3418309,0,4155527081,0,70s3v5qRyCO/1PCdI6fVXnrW8FU/w+5CKRSa72xgcIo=,3,9,,,,",
    "600026913,,515042969,10,,1,r8bWgSzDkQkiNuy3qfpelcHjIi1u2PfrHdXkl9q5iwY=,0,1,0.0125,0.01553,0.0001154,1",
    "5611824441,,6251812952,1761,1351558,8,6rZ3...=,2,0,0.0625,0.04388,3.815e-05,0",
]


def test_google2011_rows_become_valid_task_events() -> None:
    events = [TaskEvent.model_validate(task_event(row, "part-0.csv", n, CLOCK)) for n, row in enumerate(GOOD, 1)]
    assert events[0].task_id == "3418309-0"
    assert events[0].event == "SUBMIT"
    assert events[0].machine == "m4155527081"
    assert events[0].missing_info
    assert events[0].ts_ms == 1_700_000_000_000
    assert events[0].cpu_request is None
    assert events[1].event == "SCHEDULE"
    assert events[1].machine is None
    assert events[1].trace_time_us == 600_026_913
    assert events[1].ts_ms == 1_700_000_000_000 + 600_027
    assert events[1].different_machines_restriction is True
    assert events[2].event == "UPDATE_RUNNING"
    assert events[2].scheduling_class == 2
    assert events[2].priority == 0
    fast = task_event(GOOD[1], "p", 1, Clock(start_ms=1_700_000_000_000, speedup=100.0))
    assert fast["ts_ms"] == 1_700_000_000_000 + 6_000


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("0,,1,0,5,9,u,0,0,,,,", "event_type 9"),
        ("0,,1,0,5,1,u,0,0,,,", "expected 13 columns"),
        ("x,,1,0,5,1,u,0,0,,,,", "time: not an integer"),
        ("0,,,0,5,1,u,0,0,,,,", "job_id is empty"),
        ("0,,1,0,5,1,u,7,0,,,,", "scheduling_class 7"),
        ("0,,1,0,5,1,u,0,0,abc,,,", "cpu_request"),
    ],
)
def test_google2011_bad_rows(row: str, reason: str) -> None:
    with pytest.raises(InputLineError, match=reason) as info:
        task_event(row, "task_events/part-00000.csv.gz", 41, CLOCK)
    assert str(info.value).startswith("task_events/part-00000.csv.gz:41:")


def test_google2011_gz_parts_in_order(tmp_path: Path) -> None:
    parts = tmp_path / "task_events"
    parts.mkdir()
    with gzip.open(parts / "part-00000-of-00500.csv.gz", "wt") as fh:
        fh.write("\n".join(GOOD[:2]) + "\n")
    with gzip.open(parts / "part-00001-of-00500.csv.gz", "wt") as fh:
        fh.write(GOOD[2] + "\n")
    source = Google2011Replay(tmp_path)
    records = [r for chunk in source.chunks(CLOCK) for r in chunk.records]
    assert [k for k, _ in records] == [b"3418309-0", b"515042969-10", b"6251812952-1761"]
    for _, value in records:
        decode(TaskEvent, value)


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = replay.main(argv)
    return code, capsys.readouterr().err


def test_cli_input_error_names_file_and_line_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "machine_usage.csv"
    bad.write_text("m_1,100,41,92,,,43.04,33.08,5\nm_1,110,oops,92,,,43.04,33.08,5\n")
    code, err = _cli(["--source", "alibaba2018", "--path", str(bad), "--dry-run"], capsys)
    assert code == 2
    assert f"{bad}:2: cpu_util_percent: not a number" in err
    assert "Traceback" not in err
    perf = tmp_path / "run.out"
    perf.write_text(" Performance counter stats for 'CPU(s) 0':\n\n   1,000   cycles\n   what is this\n")
    code, err = _cli(["--source", "perfstat", "--path", str(perf), "--dry-run"], capsys)
    assert code == 2
    assert f"{perf}:4: unrecognised line" in err
    code, err = _cli(["--source", "google2011", "--path", str(tmp_path / "missing"), "--dry-run"], capsys)
    assert code == 2
    assert "no such file" in err
    code, err = _cli(["--source", "synthetic", "--rate", "0"], capsys)
    assert code == 2
    assert "--rate must be > 0" in err


def test_cli_synthetic_dry_run_reports_the_rate(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    code, err = _cli(
        ["--source", "synthetic", "--nodes", "20", "--count", "100", "--dry-run", "--truth-out", str(truth)], capsys
    )
    assert code == 0
    assert "sent 100 NodeState" in err
    assert "msg/s" in err
    rows = [orjson.loads(line) for line in truth.read_text().splitlines()]
    assert len(rows) == 100
    assert {"regime", "slowdown", "co_runners", "anomaly"} <= set(rows[0])


@pytest.mark.shared_data
def test_cli_dry_runs_over_the_real_data(shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(["--source", "perfstat", "--path", str(shared_data / "perfstat"), "--dry-run", "--quiet"], capsys)
    assert code == 0
    assert "sent 251 NodeState" in err
    code, err = _cli(
        [
            "--source",
            "alibaba2018",
            "--path",
            str(shared_data / "alibaba2018"),
            "--dry-run",
            "--quiet",
            "--count",
            "5000",
        ],
        capsys,
    )
    assert code == 0
    assert "sent 5,000 NodeState" in err
    part = shared_data / "google2011/task_events/part-00001-of-00500.csv.gz"
    code, err = _cli(
        ["--source", "google2011", "--path", str(part), "--dry-run", "--quiet", "--count", "20000"], capsys
    )
    assert code == 0
    assert "sent 20,000 TaskEvent" in err
