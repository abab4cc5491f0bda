"""The perf stat parser on the real samples in ../shared/data/perfstat (hybrid Intel, raw codes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts import NodeState
from services.node_agent.perfstat import parse_perf_stat_file
from services.node_agent.recorded import perf_report_nodestates

pytestmark = pytest.mark.shared_data


@pytest.fixture(scope="module")
def perf_files(shared_data: Path) -> list[Path]:
    files = sorted((shared_data / "perfstat").rglob("*.out"))
    assert files, "no perf stat samples under shared data"
    return files


def test_every_real_file_parses_strictly_and_validates(perf_files: list[Path]) -> None:
    spellings: set[str] = set()
    multiplexed = 0
    for path in perf_files:
        report = parse_perf_stat_file(path)
        assert report.elapsed_s
        assert report.elapsed_s > 59
        assert report.target
        assert report.target.startswith("CPU(s) ")
        (sample,) = report.samples
        assert len(sample.readings) == 16
        spellings.update(r.event for r in sample.readings)
        assert report.started is not None
        (state,) = perf_report_nodestates(report, node=path.stem, start_ms=int(report.started.timestamp() * 1000))
        model = NodeState.model_validate(state)
        multiplexed += sum(c.status == "multiplexed" for c in model.counters.values())
        for name, counter in model.counters.items():
            assert counter.value is not None, name
            assert ":" in name or name in ("cycles", "instructions", "cache-misses") or name.startswith("r")
    assert multiplexed > 0
    assert {"cpu_core/cpu-cycles:u/", "cpu_atom/cpu-cycles:u/", "cpu_core/r0280:k/"} <= spellings


def test_known_values_of_one_real_file(shared_data: Path) -> None:
    path = shared_data / "perfstat/media_streaming/results_pinned_kernel_E/media_streaming_P_0-3_0.out"
    report = parse_perf_stat_file(path)
    by = {r.event: r for r in report.samples[0].readings}
    assert by["cpu_core/cpu-cycles:u/"].value == 1_349_481_367
    assert by["cpu_core/cpu-cycles:u/"].pct == pytest.approx(28.13)
    assert by["cpu_core/r2724:k/"].value == 98_459_169
    assert by["cpu_core/r2724:k/"].pct == pytest.approx(12.50)
    (state,) = perf_report_nodestates(report, node="n", start_ms=1_671_126_333_000)
    counters = NodeState.model_validate(state).counters
    assert counters["cycles:u"].value == 1_349_481_367
    assert counters["r0280:u"].value == 9_943_302  # raw codes keep their raw name
    assert counters["cycles"].value == 1_349_481_367 + 17_213_627_056
    assert counters["cycles"].status == "multiplexed"


def test_hybrid_core_and_atom_map_to_the_same_names(shared_data: Path) -> None:
    atom = shared_data / "perfstat/media_streaming/results_pinned_kernel_E/media_streaming_E_16-23_21.out"
    core = shared_data / "perfstat/media_streaming/results_pinned_kernel_E/media_streaming_P_0-3_0.out"
    names = []
    for path in (atom, core):
        (state,) = perf_report_nodestates(parse_perf_stat_file(path), node="n", start_ms=1_671_126_333_000)
        names.append(set(state["counters"]))
    assert {"cycles:u", "instructions:k", "cache-misses:u", "r0280:u"} <= names[0] & names[1]
    assert "r0e85:u" in names[0] - names[1]  # per-node event differences stay visible
    assert "r0e11:u" in names[1] - names[0]
