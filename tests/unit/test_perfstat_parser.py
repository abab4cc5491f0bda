"""perf stat parser on output the tests generate (human table, -x, CSV, -I intervals) and property tests."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import NodeState
from services.node_agent.perfstat import PerfParseError, parse_perf_stat
from services.node_agent.recorded import cpus_of_target, perf_report_nodestates


# ---------------------------------------------------------------- generating perf's formats
@dataclass(frozen=True)
class Line:
    event: str
    value: float | None
    pct: float | None = None
    status: str = "counted"
    unit: str = ""


def _value_text(line: Line) -> str:
    if line.status == "not_supported":
        return "<not supported>"
    if line.status == "not_counted" or line.value is None:
        return "<not counted>"
    if float(line.value).is_integer():
        return f"{int(line.value):,}"
    return f"{line.value:,.2f}"


def render_human(samples: list[tuple[float | None, list[Line]]], target: str = "CPU(s) 0") -> str:
    """perf stat's table: `-I` prefixes the interval end; multiplexed counters end with (NN.NN%)."""
    out = ["# started on Thu Dec 15 17:58:53 2022", "", "", f" Performance counter stats for '{target}':", ""]
    for end, lines in samples:
        for line in lines:
            prefix = f"{end:15.9f} " if end is not None else ""
            unit = f" {line.unit}" if line.unit else ""
            pct = f"   ({line.pct:.2f}%)" if line.pct is not None and line.status == "counted" else ""
            out.append(f"{prefix}{_value_text(line):>18}{unit}      {line.event:<50}{pct}")
    out += ["", "      60.004274133 seconds time elapsed", ""]
    return "\n".join(out) + "\n"


def render_csv(samples: list[tuple[float | None, list[Line]]]) -> str:
    """`perf stat -x,`: [time,]value,unit,event,running_ns,pct[,metric,unit]; no thousands separators."""
    out = []
    for end, lines in samples:
        for line in lines:
            if line.status == "counted" and line.value is not None:
                value = str(int(line.value)) if float(line.value).is_integer() else f"{line.value:.2f}"
                pct = 100.0 if line.pct is None else line.pct
                running = int(1_000_000_000 * pct / 100)
                fields = [value, line.unit, line.event, str(running), f"{pct:.2f}", "", ""]
            else:
                text = "<not supported>" if line.status == "not_supported" else "<not counted>"
                fields = [text, line.unit, line.event, "0", "100.00", "", ""]
            if end is not None:
                fields.insert(0, f"{end:.9f}")
            out.append(",".join(fields))
    return "\n".join(out) + "\n"


HUMAN = """# started on Thu Dec 15 17:58:53 2022


 Performance counter stats for 'CPU(s) 0-3':

     1,349,481,367      cpu_core/cpu-cycles:u/                                        (28.13%)
    17,213,627,056      cpu_core/cpu-cycles:k/                                        (28.13%)
         9,943,302      cpu_core/r0280:u/                                             (100.00%)
   <not supported>      cpu_core/stalled-cycles-frontend/
     <not counted>      cpu_core/r0e11:k/                                             (0.00%)
            400.91 msec task-clock                       #    2.005 CPUs utilized
             1,911      context-switches                 #    4.767 K/sec

      60.004274133 seconds time elapsed

       0.000000000 seconds user
       0.001669000 seconds sys
"""


def test_human_whole_run() -> None:
    report = parse_perf_stat(HUMAN, "gen.out")
    assert report.target == "CPU(s) 0-3"
    assert report.elapsed_s == pytest.approx(60.004274133)
    assert report.started is not None
    assert report.started.year == 2022
    (sample,) = report.samples
    by = {r.event: r for r in sample.readings}
    assert by["cpu_core/cpu-cycles:u/"].value == 1_349_481_367
    assert by["cpu_core/cpu-cycles:u/"].status == "multiplexed"
    assert by["cpu_core/cpu-cycles:u/"].pct == pytest.approx(28.13)
    assert by["cpu_core/r0280:u/"].status == "counted"
    assert by["cpu_core/stalled-cycles-frontend/"].status == "not_supported"
    assert by["cpu_core/stalled-cycles-frontend/"].value is None
    assert by["cpu_core/r0e11:k/"].status == "not_counted"
    assert by["cpu_core/r0e11:k/"].value is None
    assert by["task-clock"].unit == "msec"
    assert by["context-switches"].value == 1911


def test_human_to_nodestate_never_invents_a_number() -> None:
    report = parse_perf_stat(HUMAN, "gen.out")
    (state,) = perf_report_nodestates(report, node="n1", start_ms=1_671_126_333_000)
    model = NodeState.model_validate(state)
    c = model.counters
    assert c["cycles:u"].value == 1_349_481_367
    assert c["cycles:u"].raw is None  # perf prints the scaled count only
    assert c["cycles:u"].running_ns == pytest.approx(c["cycles:u"].enabled_ns * 0.2813, rel=1e-3)
    assert c["cycles"].value == 1_349_481_367 + 17_213_627_056  # u + k, both measured
    assert c["stalled-cycles-frontend"].status == "not_supported"
    assert c["stalled-cycles-frontend"].value is None
    assert c["r0e11:k"].status == "not_counted"
    assert c["r0e11:k"].value is None
    assert c["task-clock"].value == pytest.approx(400.91e6)  # msec → ns
    assert "cpu_core/cpu-cycles:u/" in model.supported_events
    assert "cpu_core/stalled-cycles-frontend/" not in model.supported_events
    assert model.interval_ms == 60_004
    assert model.cpu_util == pytest.approx(400.91e6 / (60.004274133e9 * 4))


def test_interval_human_and_csv_agree() -> None:
    lines = [
        Line("cycles", 1_000_000.0, pct=50.0),
        Line("instructions", 2_500_000.0, pct=50.0),
        Line("LLC-load-misses", None, status="not_supported"),
    ]
    human = render_human([(1.0, lines), (2.0, lines)])
    csv = render_csv([(1.0, lines), (2.0, lines)])
    for text in (human, csv):
        report = parse_perf_stat(text, "gen")
        assert report.interval_mode
        assert [s.end_s for s in report.samples] == [1.0, 2.0]
        states = perf_report_nodestates(report, node="n", start_ms=1_700_000_000_000)
        assert [s["seq"] for s in states] == [0, 1]
        assert [s["ts_ms"] for s in states] == [1_700_000_001_000, 1_700_000_002_000]
        for state in states:
            model = NodeState.model_validate(state)
            assert model.counters["cycles"].value == 1_000_000
            assert model.counters["cycles"].status == "multiplexed"
            assert model.counters["LLC-load-misses"].status == "not_supported"
            assert model.interval_ms == 1000


def test_csv_with_running_time_and_cgroup_column() -> None:
    text = (
        "1.000,12345,,cycles,pod-a,500000000,50.00,,\n"
        "1.000,<not counted>,,cycles,pod-b,0,0.00,,\n"
        "1.000,2000,,context-switches,,1000000000,100.00,2.0,K/sec\n"
    )
    report = parse_perf_stat(text, "cg.csv")
    readings = report.samples[0].readings
    assert readings[0].cgroup == "pod-a"
    assert readings[0].running_ns == 500_000_000
    assert readings[1].status == "not_counted"
    (state,) = perf_report_nodestates(report, node="n", start_ms=1_700_000_000_000)
    model = NodeState.model_validate(state)
    assert model.cgroups["pod-a"]["cycles"].enabled_ns == 1_000_000_000  # running / pct
    assert model.cgroups["pod-b"]["cycles"].value is None
    assert model.counters["context-switches"].value == 2000


def test_per_cpu_lines_are_summed() -> None:
    text = "CPU0   1,000   cycles\nCPU1   2,000   cycles\n\n  1.0 seconds time elapsed\n"
    (state,) = perf_report_nodestates(parse_perf_stat(text, "a.out"), node="n", start_ms=1_700_000_000_000)
    assert state["counters"]["cycles"]["value"] == 3000


def test_cpu_list_targets() -> None:
    assert cpus_of_target("CPU(s) 0-3,8") == 5
    assert cpus_of_target("CPU(s) 16") == 1
    assert cpus_of_target("system wide") is None


@pytest.mark.parametrize(
    "bad",
    [
        "   12ab   cycles",
        "   -5   cycles",
        "   1,000   cycles   (150.00%)",
        "   1,000   bad/event",
        "garbage",
    ],
)
def test_malformed_human_lines_name_file_and_line(bad: str) -> None:
    text = HUMAN.replace("             1,911      context-switches", bad, 1)
    line = HUMAN.splitlines().index("             1,911      context-switches                 #    4.767 K/sec") + 1
    with pytest.raises(PerfParseError) as info:
        parse_perf_stat(text, "run/x.out")
    assert info.value.line == line
    assert str(info.value).startswith(f"run/x.out:{line}:")


def test_lenient_mode_collects_every_error() -> None:
    text = HUMAN + "nonsense one\nnonsense two\n"
    report = parse_perf_stat(text, "x.out", strict=False)
    assert [e.line for e in report.errors] == [len(HUMAN.splitlines()) + 1, len(HUMAN.splitlines()) + 2]
    assert report.samples
    assert len(report.samples[0].readings) == 7


def test_empty_input_is_an_error() -> None:
    with pytest.raises(PerfParseError, match="no counter lines"):
        parse_perf_stat("# started on Thu Dec 15 17:58:53 2022\n\n", "empty.out")


# ---------------------------------------------------------------- property tests
EVENT_NAMES = st.sampled_from(
    [
        "cycles",
        "instructions",
        "cpu_core/cpu-cycles:u/",
        "cpu_atom/instructions:k/",
        "cpu_core/r0280:u/",
        "r2724",
        "cache-misses",
        "LLC-loads",
        "branch-misses",
        "task-clock",
    ]
)
lines_strategy = st.lists(
    st.builds(
        lambda ev, v, pct, status: Line(ev, None if status != "counted" else float(v), pct=pct, status=status),
        EVENT_NAMES,
        st.integers(min_value=0, max_value=10**13),
        st.one_of(st.none(), st.floats(min_value=0.01, max_value=100.0).map(lambda x: round(x, 2))),
        st.sampled_from(["counted", "counted", "counted", "not_supported", "not_counted"]),
    ),
    min_size=1,
    max_size=12,
    unique_by=lambda line: line.event,
)
GARBAGE = st.sampled_from(["???", "12 34 56 78 cycles", "1,2345 cycles", "   7,000   ", "%%%% cycles", "0x10 cycles"])


@settings(max_examples=60, deadline=None)
@given(lines=lines_strategy, csv=st.booleans())
def test_roundtrip_of_generated_output(lines: list[Line], csv: bool) -> None:
    text = render_csv([(None, lines)]) if csv else render_human([(None, lines)])
    report = parse_perf_stat(text, "gen")
    readings = report.samples[0].readings
    assert [r.event for r in readings] == [line.event for line in lines]
    for reading, line in zip(readings, lines, strict=True):
        assert reading.value == line.value
        if line.status == "counted":
            assert reading.status == ("multiplexed" if line.pct is not None and line.pct < 100 else "counted")
        else:
            assert reading.status == line.status
    (state,) = perf_report_nodestates(report, node="n", start_ms=1_700_000_000_000)
    NodeState.model_validate(state)


@settings(max_examples=60, deadline=None)
@given(lines=lines_strategy, garbage=GARBAGE, where=st.integers(min_value=0, max_value=40), csv=st.booleans())
def test_malformed_line_is_reported_with_file_and_line(lines: list[Line], garbage: str, where: int, csv: bool) -> None:
    text = render_csv([(None, lines)]) if csv else render_human([(None, lines)])
    rows = text.splitlines()
    at = min(where, len(rows))
    rows.insert(at, garbage)
    with pytest.raises(PerfParseError) as info:
        parse_perf_stat("\n".join(rows) + "\n", "some/file.out")
    assert info.value.line == at + 1
    assert str(info.value).startswith(f"some/file.out:{at + 1}:")
    lenient = parse_perf_stat("\n".join(rows) + "\n", "some/file.out", strict=False)
    assert [e.line for e in lenient.errors] == [at + 1]


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed on this machine")
def test_real_perf_stat_interval_csv_from_this_machine() -> None:
    """Output generated right now by the real perf tool (software events always; hardware if exposed)."""
    proc = subprocess.run(
        ["perf", "stat", "-x,", "-I", "100", "-a", "-e", "task-clock,context-switches,instructions", "sleep", "0.35"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if proc.returncode != 0 and "Permission" in proc.stderr:
        pytest.skip(f"perf not permitted here: {proc.stderr.strip()[:200]}")
    report = parse_perf_stat(proc.stderr, "perf-stat-live")
    assert len(report.samples) >= 2
    for state in perf_report_nodestates(report, node="here", start_ms=1_700_000_000_000):
        model = NodeState.model_validate(state)
        assert model.counters["task-clock"].value is not None
        assert model.counters["instructions"].status in ("counted", "multiplexed", "not_supported", "not_counted")
        if model.counters["instructions"].status == "not_supported":
            assert model.counters["instructions"].value is None
