"""One NodeState interval → base metrics (``featurelib.node.schema.METRICS`` order): a :class:`Sample`.

:func:`sample_metrics` turns one interval into base metrics (IPC, CPI, LLC/cache MPKI and
miss ratios, memory bandwidth, stall ratios, branch MPKI, utilisation, software event
rates, absolute event rates per second, busy CPUs from task-clock, recorded Alibaba
metrics). A metric whose counters the node lacks, or that ran for less than
``MULTIPLEX_MIN_FRACTION`` of the time they were enabled, is ``None`` (never invented); a
physically impossible value (counter wrap, reset artefact, IPC > 10, misses > references …)
is ``None`` too and is counted in the ``sanity_violation`` metric. CPU frequency (and
``ref-cycles``, its proxy) is never read: it is a utilisation confound.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from featurelib.node.counters import NODE_COUNTERS

WRAP_LIMIT: Final = float(2**47)
"""A per-interval count at or above this is a wrapped/reset 48-bit counter, not a measurement."""

COUNTERS_USED: Final = tuple(name for name in NODE_COUNTERS if name not in ("ref-cycles", "cpu-migrations"))
"""Canonical counter names read, in the order :func:`_metrics` unpacks them. ``ref-cycles`` is not: frequency
proxy; ``cpu-migrations`` feeds no metric."""
MULTIPLEX_MIN_FRACTION: Final = 0.05
"""A multiplexed counter that ran (``running_ns``) for less than this fraction of the time it was
enabled (``enabled_ns``) is not measurable: None, as if unsupported, so the features it feeds are
invalid and the regime model abstains (``counters_missing``) instead of reading an extrapolation.
Only status ``multiplexed`` is checked: every producer (``services/node_agent/nodestate.counted``)
marks a counter that ran for less than it was enabled so, and ``counted`` means it ran throughout.

Why 0.05: the kernel scales such a count by enabled/running, here by more than 20, from
less than 50 ms of each second, i.e. 12-50 multiplexing slices (the rotation timer is 1000/HZ
ms, 1-4 ms): the relative error of a bursty rate extrapolated from so few slices is of the order
of the contention shifts the model separates (tens of per cent). The threshold sits well
below every fraction seen in legitimate use, so it removes only degenerate readings (a PMU
starved by another perf user or a time-sliced virtual PMU): real ``perf stat`` output in
``../shared/data/perfstat`` is never below 12.48 % (4,016 multiplexed readings of 16 events on
the available counters), and the simulator multiplexes at 50-95 %, so no training window
changes. Counters without times (``enabled_ns`` 0, e.g. recorded data) are kept.
"""
PEAK_BW_METRIC: Final = "mem_bw_peak_gbs"
"""NodeState.metrics entry (when an agent reports it) that makes ``membw_util`` measurable."""


def counter_value(status: str, value: float | None, enabled_ns: int = 0, running_ns: int = 0) -> float | None:
    """The usable number of one counter, or None (not counted / not supported / no value / multiplexed
    for less than ``MULTIPLEX_MIN_FRACTION`` of its enabled time)."""
    if value is None:
        return None
    if status == "counted" or (status == "multiplexed" and not running_ns < enabled_ns * MULTIPLEX_MIN_FRACTION):
        return float(value)
    return None


def _screen(raw: Sequence[float | None]) -> tuple[list[float | None], int]:
    """``raw`` (``COUNTERS_USED`` order) with wrapped/reset or NaN counts made None, and how many."""
    violations = 0
    out: list[float | None] = []
    for v in raw:
        if v is not None and (v >= WRAP_LIMIT or v != v):
            violations += 1  # wrapped or reset counter: a delta across the wrap is meaningless
            v = None
        out.append(v)
    return out, violations


def sample_metrics(
    counters: Mapping[str, float | None],
    *,
    cpu_util: float,
    mem_util: float,
    interval_ms: int,
    recorded: Mapping[str, float] | None = None,
) -> tuple[list[float | None], int]:
    """Base metrics of one interval (``METRICS`` order) and the number of sanity violations.

    ``counters`` maps canonical names to per-interval counts (None = not measurable).
    """
    used, violations = _screen([counters.get(name) for name in COUNTERS_USED])
    values, violations = _metrics(used, violations, cpu_util, mem_util, interval_ms, recorded)
    return list(values), violations


def _bounded(value: float | None, upper: float) -> tuple[float | None, int]:
    """``value``, or None and one violation when it is physically impossible (above ``upper``)."""
    if value is not None and value > upper:
        return None, 1
    return value, 0


def _fraction(num: float | None, den: float | None) -> tuple[float | None, int]:
    """``num / den`` as a fraction: None without a positive ``den``; above 1.05 a violation; clipped to 1."""
    if num is None or den is None or not den > 0.0:
        return None, 0
    value = num / den
    if value > 1.05:
        return None, 1
    return (1.0 if value > 1.0 else value), 0


def _metrics(
    used: Sequence[float | None],
    violations: int,
    cpu_util: float,
    mem_util: float,
    interval_ms: int,
    recorded: Mapping[str, float] | None,
) -> tuple[tuple[float | None, ...], int]:
    """:func:`sample_metrics` on counts already screened by :func:`_screen` (``violations`` so far).

    Flat on purpose: it runs once per NodeState on the features hot path, where the generic
    form (a dict of counters, ``MI`` lookups, a ``bounded`` closure around a
    ``ratio(num, den, scale)`` helper) cost about twice as much. Each metric is still that
    form's expression, operand for operand, so the floats are bit-identical: a ratio is
    None unless both counts exist and ``den > 0.0`` (the same as ``not den <= 0.0``:
    NaN counts were screened out); a value above its bound is None and one violation;
    ``x * 1.0 == x`` exactly (scale 1.0 is dropped); ``min(x, 1.0)`` is ``1.0 if x > 1.0
    else x``. Computed in the generic form's order, so a malformed input raises the same
    error. ``tests/unit/test_node_features_fast.py`` keeps a frozen copy of the generic
    form and checks bit-identity against it.
    """
    # COUNTERS_USED order (tests/unit/test_node_features_fast.py pins both orders)
    cyc, ins, crefs, cmiss, llc_loads, llc_miss, br_ins, br_miss, st_fe, st_be, bw, tc, cs, pf = used
    secs = interval_ms / 1000.0
    cyc_den = cyc if cyc is not None and cyc > 0.0 else None  # usable as a denominator
    ins_den = ins if ins is not None and ins > 0.0 else None

    ipc, bad = _bounded(None if ins is None or cyc_den is None else ins / cyc_den, 10.0)
    violations += bad
    cpi = None if ipc is None or ipc <= 0.0 else 1.0 / ipc
    llc_mpki, bad = _bounded(None if llc_miss is None or ins_den is None else llc_miss / ins_den * 1e3, 1e3)
    violations += bad
    llc_ratio, bad = _fraction(llc_miss, llc_loads)
    violations += bad
    cache_mpki, bad = _bounded(None if cmiss is None or ins_den is None else cmiss / ins_den * 1e3, 1e3)
    violations += bad
    cache_ratio, bad = _fraction(cmiss, crefs)
    violations += bad
    gbs, bad = _bounded(None if bw is None else bw / secs / 1e9, 1e4)
    violations += bad
    peak = recorded.get(PEAK_BW_METRIC) if recorded else None
    bw_util = None if gbs is None or not peak else min(gbs / peak, 1.0)
    stall_fe, bad = _fraction(st_fe, cyc_den)
    violations += bad
    stall_be, bad = _fraction(st_be, cyc_den)
    violations += bad
    br_mpki, bad = _bounded(None if br_miss is None or ins_den is None else br_miss / ins_den * 1e3, 1e3)
    violations += bad
    br_ratio, bad = _fraction(br_miss, br_ins)
    violations += bad
    cpu = float(cpu_util)
    mem = float(mem_util)
    ctx_log = None if cs is None else math.log10(1.0 + cs / secs)
    pf_log = None if pf is None else math.log10(1.0 + pf / secs)
    # absolute activity (per second of the interval): aggressors differ from gentle co-runners
    # of the same kind by how much they do, which per-instruction ratios cannot show.
    busy, bad = _bounded(None if tc is None else tc / (secs * 1e9), 4096.0)
    violations += bad
    rec = recorded or {}
    return (  # METRICS order
        ipc,
        cpi,
        llc_mpki,
        llc_ratio,
        cache_mpki,
        cache_ratio,
        gbs,
        bw_util,
        stall_fe,
        stall_be,
        br_mpki,
        br_ratio,
        cpu,
        mem,
        ctx_log,
        pf_log,
        busy,
        None if ins is None else ins / secs / 1e9,
        None if llc_loads is None else llc_loads / secs / 1e9,
        None if llc_miss is None else llc_miss / secs / 1e9,
        None if crefs is None else crefs / secs / 1e9,
        None if cmiss is None else cmiss / secs / 1e9,
        None if br_miss is None else br_miss / secs / 1e9,
        rec.get("mkpi"),
        rec.get("mem_gps"),
        1.0 if violations else 0.0,  # sanity_violation: float(min(violations, 1))
    ), violations


@dataclass(frozen=True, slots=True)
class Sample:
    """One NodeState reduced to what the windows need."""

    node: str
    seq: int
    ts_ms: int
    interval_ms: int
    input_ts_ms: int
    """Produce time of the NodeState (Kafka record timestamp online, ts_ms offline)."""
    metrics: tuple[float | None, ...]


def sample_from_nodestate(state: Any, input_ts_ms: int | None = None) -> Sample:
    """From a validated ``contracts.NodeState`` (attribute access)."""
    counters = state.counters
    raw: list[float | None] = []
    for name in COUNTERS_USED:
        c = counters.get(name)
        raw.append(None if c is None else counter_value(c.status, c.value, c.enabled_ns, c.running_ns))
    used, violations = _screen(raw)
    values, _ = _metrics(used, violations, state.cpu_util, state.mem_util, state.interval_ms, state.metrics)
    ts = state.ts_ms if input_ts_ms is None else input_ts_ms
    return Sample(state.node, state.seq, state.ts_ms, state.interval_ms, ts, values)


_ABSENT: Final[Any] = object()
"""A counter the NodeState lacks, told apart from an entry that is present but None (malformed)."""


def sample_from_dict(state: Mapping[str, Any], input_ts_ms: int | None = None) -> Sample:
    """From a NodeState-shaped dict (the simulator's and replay's hot path; same numbers).

    :func:`counter_value` and :func:`_screen` are inlined into one pass over
    ``COUNTERS_USED`` (counters the metrics do not read, e.g. ``ref-cycles``, are never
    looked at): this runs once per NodeState in the features service.
    """
    counters = state.get("counters", {})
    violations = 0
    used: list[float | None] = []
    for name in COUNTERS_USED:
        c = counters.get(name, _ABSENT)
        v: float | None = None
        if c is not _ABSENT:  # present but not a mapping: raises, as it always did (dead letter)
            try:  # a validated NodeState's counter has every key: plain lookups, no method calls
                if type(c) is not dict:
                    raise KeyError
                value = c["value"]
                status = c["status"]
            except KeyError:
                value = c.get("value")
                status = c.get("status", "counted") if value is not None else None
            # the times are looked up only for a multiplexed counter (a small share): "counted"
            # ran all the time it was enabled (every producer marks running < enabled multiplexed)
            if value is not None and (
                status == "counted"
                or (status == "multiplexed"
                    and not c.get("running_ns", 0) < c.get("enabled_ns", 0) * MULTIPLEX_MIN_FRACTION)
            ):
                v = float(value)
                if not v < WRAP_LIMIT:  # v >= WRAP_LIMIT or NaN, as in _screen
                    violations += 1  # wrapped or reset counter
                    v = None
        used.append(v)
    values, _ = _metrics(
        used, violations, state["cpu_util"], state["mem_util"], state["interval_ms"], state.get("metrics") or {}
    )
    ts = state["ts_ms"] if input_ts_ms is None else input_ts_ms
    return Sample(state["node"], state["seq"], state["ts_ms"], state["interval_ms"], ts, values)
