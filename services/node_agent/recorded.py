"""Recorded data → NodeState dicts: ``perf stat`` reports and Alibaba 2018 ``machine_usage`` rows.

perf stat prints counts already scaled for multiplexing plus the running percentage,
never the raw count: ``value`` is the printed count, ``enabled_ns`` the measurement
window (interval or elapsed time), ``running_ns`` its counted share, and ``raw`` is
given only when the counter ran the whole window (then raw = value). perf stat carries
no utilisation: ``cpu_util``/``mem_util`` are 0.0 for these replays unless the output
has a per-task ``task-clock`` (see docs/node_agent.md, "Known gaps").

Alibaba's ``mem_gps`` and ``mkpi`` are PMU-derived metrics present in only some rows:
they go into ``NodeState.metrics`` (and ``supported_events``) only when present — a
missing value is never filled with 0. ``-1`` (the trace's marker for "no measurement",
e.g. in ``disk_io_percent``) counts as missing too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from services.node_agent.errors import InputLineError
from services.node_agent.events import add_privilege_totals, parse_event
from services.node_agent.nodestate import CounterDict, counted, nodestate_dict, without_number
from services.node_agent.perfstat import PerfReading, PerfReport

_UNIT_TO_NS: Final = {"msec": 1_000_000.0, "usec": 1_000.0, "nsec": 1.0, "ns": 1.0}


def _reading_counter(reading: PerfReading, window_ns: int) -> CounterDict:
    if reading.value is None:
        return without_number(reading.status, enabled_ns=window_ns if reading.status == "not_counted" else 0)
    value = reading.value * _UNIT_TO_NS.get(reading.unit, 1.0)
    pct = reading.pct
    if reading.running_ns is not None and pct:
        running = reading.running_ns
        enabled = max(running, round(running * 100.0 / pct))
    else:
        enabled = window_ns
        running = enabled if pct is None else min(enabled, round(enabled * pct / 100.0))
    full = pct is None or pct >= 100.0
    if full:
        running = enabled
    return counted(value, enabled_ns=enabled, running_ns=running, raw=value if full else None)


def _merge(a: CounterDict, b: CounterDict) -> CounterDict:
    """Two readings of one canonical counter (per-CPU lines, two hybrid PMUs): their sum, if both counted."""
    if a["value"] is None or b["value"] is None:
        status = "not_supported" if a["status"] == b["status"] == "not_supported" else "not_counted"
        return without_number(status, enabled_ns=max(a["enabled_ns"], b["enabled_ns"]))
    enabled = max(a["enabled_ns"], b["enabled_ns"])
    running = min(a["running_ns"], b["running_ns"])
    raw = None if a["raw"] is None or b["raw"] is None else a["raw"] + b["raw"]
    return counted(a["value"] + b["value"], enabled_ns=enabled, running_ns=running, raw=raw)


def counters_from_readings(
    readings: Iterable[PerfReading], window_ns: int
) -> tuple[dict[str, CounterDict], dict[str, dict[str, CounterDict]], list[str]]:
    """(node counters, per-cgroup counters, supported original spellings) of one sample."""
    node: dict[str, CounterDict] = {}
    groups: dict[str, dict[str, CounterDict]] = {}
    supported: list[str] = []
    for reading in readings:
        name = parse_event(reading.event).canonical
        counter = _reading_counter(reading, window_ns)
        if reading.status != "not_supported" and reading.event not in supported:
            supported.append(reading.event)
        target = groups.setdefault(reading.cgroup, {}) if reading.cgroup else node
        target[name] = _merge(target[name], counter) if name in target else counter
    add_privilege_totals(node)
    for group in groups.values():
        add_privilege_totals(group)
    return node, groups, supported


def _cpu_util(counters: dict[str, CounterDict], window_ns: int, ncpus: int | None) -> float:
    task = counters.get("task-clock") or counters.get("cpu-clock")
    if task is None or task["value"] is None or not ncpus or window_ns <= 0:
        return 0.0
    return min(1.0, float(task["value"]) / (window_ns * ncpus))


def cpus_of_target(target: str | None) -> int | None:
    """``CPU(s) 0-3,8`` → 5; None for system-wide or per-task targets."""
    if not target or not target.startswith("CPU(s) "):
        return None
    total = 0
    for part in target[len("CPU(s) ") :].split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return None
        total += (int(hi) - int(lo) + 1) if hi else 1
    return total or None


def perf_report_nodestates(report: PerfReport, *, node: str, start_ms: int, seq_start: int = 0) -> list[dict[str, Any]]:
    """One NodeState per interval (``-I``) or one for the whole run; ``ts_ms`` = start + interval end."""
    out = []
    previous_end = 0.0
    ncpus = cpus_of_target(report.target)
    for offset, sample in enumerate(report.samples):
        if sample.end_s is None:
            end_s = report.elapsed_s if report.elapsed_s is not None else 0.0
            window_s = end_s
        else:
            end_s = sample.end_s
            window_s = end_s - previous_end
            previous_end = end_s
        window_ns = max(0, round(window_s * 1e9))
        counters, groups, supported = counters_from_readings(sample.readings, window_ns)
        out.append(
            nodestate_dict(
                node=node,
                ts_ms=start_ms + round(end_s * 1000),
                seq=seq_start + offset,
                interval_ms=min(3_600_000, max(1, round(window_s * 1000))),
                source="replay_perfstat",
                pmu="recorded",
                supported_events=supported,
                counters=counters,
                cpu_util=_cpu_util(counters, window_ns, ncpus),
                mem_util=0.0,
                cgroups=groups or None,
            )
        )
    return out


# ------------------------------------------------------------------ Alibaba 2018 machine_usage
ALIBABA_COLUMNS: Final = (
    "machine_id",
    "time_stamp",
    "cpu_util_percent",
    "mem_util_percent",
    "mem_gps",
    "mkpi",
    "net_in",
    "net_out",
    "disk_io_percent",
)
_ALIBABA_METRICS: Final = ("mem_gps", "mkpi", "net_in", "net_out", "disk_io_percent")
_PMU_DERIVED: Final[tuple[str, ...]] = ("mem_gps", "mkpi")
DEFAULT_ALIBABA_INTERVAL_MS: Final = 10_000


@dataclass(frozen=True)
class AlibabaRow:
    machine: str
    time_s: int
    cpu_percent: float
    mem_percent: float
    metrics: dict[str, float]
    line: int


def _optional_float(text: str, column: str, path: str, line: int, raw: str) -> float | None:
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputLineError(path, line, f"{column}: not a number ({text!r})", raw) from None
    if value == -1.0:  # the trace's own "no measurement" marker (seen in disk_io_percent)
        return None
    if not math.isfinite(value) or value < 0:
        raise InputLineError(path, line, f"{column}: must be a finite number >= 0 or -1 (got {text})", raw)
    return value


def parse_alibaba_line(raw: str, path: str, line: int) -> AlibabaRow:
    fields = raw.rstrip("\r\n").split(",")
    if len(fields) != len(ALIBABA_COLUMNS):
        raise InputLineError(
            path, line, f"expected {len(ALIBABA_COLUMNS)} columns ({','.join(ALIBABA_COLUMNS)}), got {len(fields)}", raw
        )
    machine = fields[0].strip()
    if not machine:
        raise InputLineError(path, line, "machine_id is empty", raw)
    try:
        time_s = int(fields[1])
    except ValueError:
        raise InputLineError(path, line, f"time_stamp: not an integer ({fields[1]!r})", raw) from None
    if time_s < 0:
        raise InputLineError(path, line, "time_stamp must be >= 0", raw)
    values: dict[str, float | None] = {}
    for column, text in zip(ALIBABA_COLUMNS[2:], fields[2:], strict=True):
        values[column] = _optional_float(text.strip(), column, path, line, raw)
    cpu, mem = values.pop("cpu_util_percent"), values.pop("mem_util_percent")
    if cpu is None or mem is None:
        raise InputLineError(path, line, "cpu_util_percent and mem_util_percent are required", raw)
    if cpu > 100 or mem > 100:
        raise InputLineError(path, line, "utilisation percentages must be <= 100", raw)
    metrics = {k: v for k, v in values.items() if v is not None}
    return AlibabaRow(machine, time_s, cpu, mem, metrics, line)


def read_alibaba(lines: Iterable[str], path: str) -> Iterator[AlibabaRow]:
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        yield parse_alibaba_line(raw, path, number)


def alibaba_nodestate(row: AlibabaRow, *, seq: int, ts_ms: int, interval_ms: int) -> dict[str, Any]:
    """NodeState of one machine_usage row: utilisation, and derived PMU metrics only when present."""
    supported = [m for m in _PMU_DERIVED if m in row.metrics]
    return nodestate_dict(
        node=row.machine,
        ts_ms=ts_ms,
        seq=seq,
        interval_ms=min(3_600_000, max(1, interval_ms)),
        source="replay_alibaba",
        pmu="recorded",
        supported_events=supported,
        counters={},
        cpu_util=row.cpu_percent / 100.0,
        mem_util=row.mem_percent / 100.0,
        metrics={k: row.metrics[k] for k in _ALIBABA_METRICS if k in row.metrics} or None,
    )
