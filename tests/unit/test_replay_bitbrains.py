"""`borgctl replay --source bitbrains`: generated per-VM files → NodeState (utilisation only), errors name file:line."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from contracts import NodeState
from loadtests.replay import main as replay_main
from loadtests.sources import Clock
from loadtests.sources.bitbrains import BitbrainsReplay
from training.forecast.synthetic import HEADER, write_dataset


def _write(path: Path, rows: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(("\n".join([HEADER, *rows]) + "\n").encode()))
    return path


def row(t: int, cpu: float, cap_kb: float, used_kb: float) -> str:
    return f"{t};\t2;\t5851.9989;\t{cpu * 58.5};\t{cpu};\t{cap_kb};\t{used_kb};\t0.0;\t1.0;\t0.5;\t0.5"


def test_rows_merge_in_time_order_across_months_with_per_node_seq(tmp_path: Path) -> None:
    _write(tmp_path / "2013-8" / "7.csv.gz", [row(1000, 10.0, 1000.0, 250.0), row(1300, 20.0, 1000.0, 500.0)])
    _write(tmp_path / "2013-7" / "7.csv.gz", [row(400, 5.0, 1000.0, 100.0)])
    _write(tmp_path / "2013-7" / "9.csv.gz", [row(700, 150.0, 0.0, 0.0)])
    clock = Clock(start_ms=1_700_000_000_000, speedup=100.0)
    chunks = list(BitbrainsReplay(tmp_path).chunks(clock))
    states = [NodeState.model_validate_json(v) for c in chunks for _, v in c.records]
    assert [(s.node, s.seq) for s in states] == [
        ("bitbrains-7", 0), ("bitbrains-9", 0), ("bitbrains-7", 1), ("bitbrains-7", 2)]
    first = states[0]
    assert first.source == "replay_bitbrains"
    assert first.pmu == "recorded"
    assert first.counters == {}
    assert first.supported_events == []  # no PMU counter is claimed
    assert first.cpu_util == pytest.approx(0.05)
    assert first.mem_util == pytest.approx(0.10)
    assert states[1].cpu_util == 1.0  # clipped
    assert states[2].interval_ms == 600_000  # since the node's previous row (July file, then August)
    assert [c.due_s for c in chunks] == [0.0, 3.0, 6.0, 9.0]
    assert states[3].ts_ms == 1_700_000_000_000 + 9_000


def test_generated_dataset_replays_and_nodes_limit(tmp_path: Path) -> None:
    data = write_dataset(tmp_path, vms=3, start="2013-08-31T12:00:00+00:00", days=1.0)
    states = [NodeState.model_validate_json(v) for c in BitbrainsReplay(data, nodes=2).chunks(Clock(1_700_000_000_000))
              for _, v in c.records]
    assert {s.node for s in states} == {"bitbrains-1", "bitbrains-2"}
    assert len(states) > 500
    assert all(s.ts_ms >= 1_700_000_000_000 for s in states)


def test_bad_line_exits_2_naming_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _write(tmp_path / "3.csv.gz", [row(400, 5.0, 1000.0, 100.0), row(700, 5.0, 1000.0, 100.0).replace(
        "5.0;", "five;", 1)])
    code = replay_main(["--source", "bitbrains", "--path", str(tmp_path), "--dry-run", "--quiet"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{bad}:3:" in err
    assert "CPU usage [%]" in err


def test_missing_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay_main(["--source", "bitbrains", "--path", str(tmp_path / "none"), "--dry-run"]) == 2
    assert "no such file" in capsys.readouterr().err
