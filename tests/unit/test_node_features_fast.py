"""The hot-path sample math is bit-identical to the generic form it replaced.

``sample_metrics`` / ``sample_from_dict`` / ``sample_from_nodestate`` (straight-line
``_metrics``) and ``PaneAgg.add`` are compared with a frozen copy of the original
implementation (the ``_reference_*`` functions below, copied from the code before the
optimisation, so this test does not depend on git history): every metric must be the
same float bit for bit (compared by ``float.hex``, which tells -0.0 from 0.0 and is
NaN-aware), at the same ``None`` positions, with the same violation count, and pane sums
must be the same floats after the same sequence of additions.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from contracts import NodeState
from featurelib.node.panes import PaneAgg
from featurelib.node.samples import (
    COUNTERS_USED,
    PEAK_BW_METRIC,
    WRAP_LIMIT,
    Sample,
    sample_from_dict,
    sample_from_nodestate,
    sample_metrics,
)
from featurelib.node.schema import METRICS, MI
from simulator import SyntheticCluster

# ----------------------------------------------------------------------------- frozen reference


def _reference_counter_value(status: str, value: float | None) -> float | None:
    if status not in ("counted", "multiplexed") or value is None:
        return None
    return float(value)


def _reference_ratio(num: float | None, den: float | None, scale: float = 1.0) -> float | None:
    if num is None or den is None or den <= 0.0:
        return None
    return num / den * scale


def _reference_sample_metrics(
    counters: Mapping[str, float | None],
    *,
    cpu_util: float,
    mem_util: float,
    interval_ms: int,
    recorded: Mapping[str, float] | None = None,
) -> tuple[list[float | None], int]:
    violations = 0
    c: dict[str, float | None] = {}
    for name in COUNTERS_USED:
        v = counters.get(name)
        if v is not None and (v >= WRAP_LIMIT or v != v):
            violations += 1
            v = None
        c[name] = v
    out: list[float | None] = [None] * len(METRICS)
    cyc, ins = c["cycles"], c["instructions"]
    secs = interval_ms / 1000.0

    def bounded(value: float | None, upper: float, clip: float | None = None) -> float | None:
        nonlocal violations
        if value is None:
            return None
        if value > upper:
            violations += 1
            return None
        return min(value, clip) if clip is not None else value

    _ratio = _reference_ratio
    ipc = bounded(_ratio(ins, cyc), 10.0)
    out[MI["ipc"]] = ipc
    out[MI["cpi"]] = None if ipc is None or ipc <= 0.0 else 1.0 / ipc
    out[MI["llc_mpki"]] = bounded(_ratio(c["LLC-load-misses"], ins, 1e3), 1e3)
    out[MI["llc_miss_ratio"]] = bounded(_ratio(c["LLC-load-misses"], c["LLC-loads"]), 1.05, 1.0)
    out[MI["cache_mpki"]] = bounded(_ratio(c["cache-misses"], ins, 1e3), 1e3)
    out[MI["cache_miss_ratio"]] = bounded(_ratio(c["cache-misses"], c["cache-references"]), 1.05, 1.0)
    bw = c["mem-bandwidth-bytes"]
    gbs = bounded(None if bw is None else bw / secs / 1e9, 1e4)
    out[MI["membw_gbs"]] = gbs
    peak = (recorded or {}).get(PEAK_BW_METRIC)
    out[MI["membw_util"]] = None if gbs is None or not peak else min(gbs / peak, 1.0)
    out[MI["stall_frontend"]] = bounded(_ratio(c["stalled-cycles-frontend"], cyc), 1.05, 1.0)
    out[MI["stall_backend"]] = bounded(_ratio(c["stalled-cycles-backend"], cyc), 1.05, 1.0)
    out[MI["branch_mpki"]] = bounded(_ratio(c["branch-misses"], ins, 1e3), 1e3)
    out[MI["branch_miss_ratio"]] = bounded(_ratio(c["branch-misses"], c["branch-instructions"]), 1.05, 1.0)
    out[MI["cpu_util"]] = float(cpu_util)
    out[MI["mem_util"]] = float(mem_util)
    cs, pf = c["context-switches"], c["page-faults"]
    out[MI["ctx_switches_log"]] = None if cs is None else math.log10(1.0 + cs / secs)
    out[MI["page_faults_log"]] = None if pf is None else math.log10(1.0 + pf / secs)
    tc = c["task-clock"]
    out[MI["busy_cpus"]] = bounded(None if tc is None else tc / (secs * 1e9), 4096.0)
    out[MI["inst_gps"]] = None if ins is None else ins / secs / 1e9
    for metric, counter in (
        ("llc_loads_gps", "LLC-loads"),
        ("llc_misses_gps", "LLC-load-misses"),
        ("cache_refs_gps", "cache-references"),
        ("cache_misses_gps", "cache-misses"),
        ("branch_misses_gps", "branch-misses"),
    ):
        v = c[counter]
        out[MI[metric]] = None if v is None else v / secs / 1e9
    rec = recorded or {}
    out[MI["rec_mkpi"]] = rec.get("mkpi")
    out[MI["rec_mem_gps"]] = rec.get("mem_gps")
    out[MI["sanity_violation"]] = float(min(violations, 1))
    return out, violations


def _reference_sample_from_dict(state: Mapping[str, Any], input_ts_ms: int | None = None) -> tuple[Any, ...]:
    """The fields of the reference ``Sample`` (node, seq, ts, interval, input ts, metrics)."""
    counters = {
        name: _reference_counter_value(c.get("status", "counted"), c.get("value"))
        for name, c in state.get("counters", {}).items()
    }
    values, _ = _reference_sample_metrics(
        counters,
        cpu_util=state["cpu_util"],
        mem_util=state["mem_util"],
        interval_ms=state["interval_ms"],
        recorded=state.get("metrics") or {},
    )
    ts = state["ts_ms"] if input_ts_ms is None else input_ts_ms
    return state["node"], state["seq"], state["ts_ms"], state["interval_ms"], ts, tuple(values)


def _reference_pane_add(
    n: list[float], s: list[float], q: list[float], metrics: Sequence[float | None]
) -> None:
    for i, v in enumerate(metrics):
        if v is not None:
            n[i] += 1.0
            s[i] += v
            q[i] += v * v


# ----------------------------------------------------------------------------- comparison


def _bits(values: Sequence[Any]) -> list[tuple[str, Any]]:
    """Exact identity of each value: its type, and a float's every bit (sign of zero, NaN)."""
    return [(type(v).__name__, v.hex() if isinstance(v, float) else v) for v in values]


def _fields(sample: Sample) -> tuple[Any, ...]:
    return sample.node, sample.seq, sample.ts_ms, sample.interval_ms, sample.input_ts_ms, sample.metrics


def _assert_same_sample(got: Sample, want: tuple[Any, ...]) -> None:
    assert type(got.metrics) is tuple
    assert _fields(got)[:5] == want[:5]
    assert _bits(got.metrics) == _bits(want[5])


class _Panes:
    """A PaneAgg and the reference lists fed the same samples."""

    def __init__(self) -> None:
        self.agg = PaneAgg(0)
        self.n, self.s, self.q = [0.0] * len(METRICS), [0.0] * len(METRICS), [0.0] * len(METRICS)
        self.count = 0
        self.newest = 0

    def add(self, metrics: Sequence[float | None], input_ts_ms: int) -> None:
        self.agg.add(metrics, input_ts_ms)
        _reference_pane_add(self.n, self.s, self.q, metrics)
        self.count += 1
        self.newest = max(self.newest, input_ts_ms)

    def check(self) -> None:
        assert _bits(self.agg.n) == _bits(self.n)
        assert _bits(self.agg.s) == _bits(self.s)
        assert _bits(self.agg.q) == _bits(self.q)
        assert (self.agg.samples, self.agg.input_ts_ms) == (self.count, self.newest)


# ----------------------------------------------------------------------------- simulator


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_simulator_samples_and_panes_are_bit_identical(seed: int) -> None:
    sim = SyntheticCluster(nodes=30, seed=seed, missing_event_prob=0.4, multiplex_prob=0.4, anomaly_rate=0.05)
    panes: dict[str, _Panes] = {}
    nones = 0
    for tick in range(25):
        states = sim.tick().nodestate_dicts()
        for state in states:
            ts = state["ts_ms"] + 7 * tick
            got = sample_from_dict(state, ts)
            _assert_same_sample(got, _reference_sample_from_dict(state, ts))
            _assert_same_sample(sample_from_dict(state), _reference_sample_from_dict(state))
            nones += sum(v is None for v in got.metrics)
            panes.setdefault(state["node"], _Panes()).add(got.metrics, ts)
        if tick % 5 == 0:  # the pydantic path gives the same sample
            for state in states:
                model = NodeState.model_validate(state)
                _assert_same_sample(sample_from_nodestate(model), _reference_sample_from_dict(state))
    assert nones > 0  # missing counters were exercised
    for p in panes.values():
        p.check()


# ----------------------------------------------------------------------------- fuzz

_STATUSES = ("counted", "multiplexed", "not_counted", "not_supported")


def _count(rng: random.Random) -> float | int | None:
    r = rng.random()
    if r < 0.08:
        return None
    if r < 0.14:
        return 0.0
    if r < 0.18:
        return rng.choice((WRAP_LIMIT, WRAP_LIMIT * 3.5, 2.0**64, math.inf, math.nan))  # wrapped/reset
    if r < 0.22:
        return rng.uniform(2.0**46, WRAP_LIMIT)  # huge, just below the wrap limit
    if r < 0.27:
        return rng.randrange(0, 10**12)  # an int count
    if r < 0.30:
        return rng.choice((1.0, 5e-324, 1e-300, 2.0**47 - 1.0))
    return rng.uniform(0.0, 1.0) * math.pow(10.0, rng.uniform(0.0, 12.0))


def _related(rng: random.Random, counters: dict[str, float | int | None]) -> None:
    """Make ratios land near their bounds (clip at 1.0, violations above 1.05, IPC 10)."""
    for num, den in (
        ("LLC-load-misses", "LLC-loads"),
        ("cache-misses", "cache-references"),
        ("branch-misses", "branch-instructions"),
        ("stalled-cycles-frontend", "cycles"),
        ("stalled-cycles-backend", "cycles"),
        ("instructions", "cycles"),
    ):
        d = counters.get(den)
        if isinstance(d, float) and 0.0 < d < 1e12 and rng.random() < 0.5:
            factor = rng.choice((0.5, 1.0, 1.0 + 1e-12, 1.02, 1.05, 1.05 + 1e-9, 1.2, 9.99, 10.0, 10.5, 2e3))
            counters[num] = d * factor


def _random_counters(rng: random.Random) -> dict[str, float | int | None]:
    names = [*COUNTERS_USED, "ref-cycles", "cpu-migrations"]
    counters = {name: _count(rng) for name in names if rng.random() < 0.85}
    _related(rng, counters)
    return counters


def _random_recorded(rng: random.Random) -> dict[str, float] | None:
    r = rng.random()
    if r < 0.2:
        return None
    rec: dict[str, float] = {}
    if rng.random() < 0.5:
        rec[PEAK_BW_METRIC] = rng.choice((0.0, 1e-6, 50.0, 300.0, rng.uniform(0.0, 1e3)))
    if rng.random() < 0.4:
        rec["mkpi"] = rng.uniform(0.0, 50.0)
    if rng.random() < 0.4:
        rec["mem_gps"] = rng.uniform(0.0, 100.0)
    return rec


def _interval(rng: random.Random) -> int:
    return rng.choice((1, 2, 999, 1000, 1001, 60_000, rng.randint(1, 60_000)))


def _util(rng: random.Random) -> float:
    return rng.choice((0.0, -0.0, 1.0, rng.random()))


def test_fuzz_sample_metrics_is_bit_identical() -> None:
    rng = random.Random(20240611)
    panes = _Panes()
    violations = 0
    for i in range(4000):
        counters = _random_counters(rng)
        kw: dict[str, Any] = {
            "cpu_util": _util(rng),
            "mem_util": _util(rng),
            "interval_ms": _interval(rng),
            "recorded": _random_recorded(rng),
        }
        got, got_violations = sample_metrics(counters, **kw)
        want, want_violations = _reference_sample_metrics(counters, **kw)
        assert type(got) is list
        assert _bits(got) == _bits(want), counters
        assert got_violations == want_violations
        violations += got_violations
        panes.add(got, i)
    assert violations > 0
    panes.check()


def _counter_entry(rng: random.Random, value: float | int | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"raw": value, "enabled_ns": 10**9, "running_ns": 10**9}
    if rng.random() < 0.9:
        entry["status"] = rng.choice(_STATUSES)  # absent: counted
    if rng.random() < 0.95:
        entry["value"] = value
    return entry


def test_fuzz_sample_from_dict_is_bit_identical() -> None:
    rng = random.Random(7)
    panes = _Panes()
    for i in range(4000):
        counters = {name: _counter_entry(rng, v) for name, v in _random_counters(rng).items()}
        state: dict[str, Any] = {
            "node": f"n{i % 13}",
            "ts_ms": 1_700_000_000_000 + i,
            "seq": i,
            "interval_ms": _interval(rng),
            "cpu_util": _util(rng),
            "mem_util": _util(rng),
        }
        if rng.random() < 0.9:
            state["counters"] = counters
        recorded = _random_recorded(rng)
        if recorded is not None or rng.random() < 0.5:
            state["metrics"] = recorded
        input_ts = None if rng.random() < 0.3 else rng.randint(0, 2**41)
        got = sample_from_dict(state, input_ts)
        _assert_same_sample(got, _reference_sample_from_dict(state, input_ts))
        panes.add(got.metrics, state["ts_ms"])
    panes.check()


def test_fuzz_pane_add_is_bit_identical() -> None:
    """Including -0.0, huge, infinite and NaN values (sums must stay the same floats).

    PaneAgg folds the samples it kept when its sums are read: panes of up to 400 samples
    (one fold summing hundreds in order), and reads in between (folds onto earlier sums).
    """
    rng = random.Random(3)
    pool: list[float | None] = [None, 0.0, -0.0, 1.0, -1.0, 1e308, -1e308, math.inf, 1e-320, 0.1, 3.0]
    for _ in range(60):
        panes = _Panes()
        for ts in range(rng.randint(1, 40) if rng.random() < 0.7 else rng.randint(100, 400)):
            metrics = [rng.choice(pool) if rng.random() < 0.3 else rng.uniform(-1e3, 1e3) for _ in METRICS]
            if rng.random() < 0.05:
                metrics[rng.randrange(len(metrics))] = math.nan
            panes.add(tuple(metrics) if rng.random() < 0.5 else metrics, rng.randint(0, 10**6) if ts else 0)
            if rng.random() < 0.03:
                panes.check()
        panes.check()


def test_pane_sums_survive_bytes_and_copies() -> None:
    """A pane read back from its bytes, or copied out of the ring, has the same sums and goes on adding alike."""
    rng = random.Random(5)
    panes = _Panes()
    for ts in range(12):
        panes.add([None if rng.random() < 0.2 else rng.uniform(0, 5) for _ in METRICS], 1000 + ts)
    back = PaneAgg.from_bytes(panes.agg.to_bytes())
    assert back == panes.agg and _bits(back.s) == _bits(panes.s)
    more = [rng.uniform(0, 5) for _ in METRICS]
    back.add(more, 2000)
    panes.add(more, 2000)
    panes.check()
    assert back == panes.agg and back != PaneAgg(panes.agg.index)


def test_malformed_counter_entry_fails_as_before() -> None:
    """A counter present but not a mapping was a processing error (dead letter); it still is."""
    state: dict[str, Any] = {
        "node": "n", "ts_ms": 1, "seq": 0, "interval_ms": 1000, "cpu_util": 0.5, "mem_util": 0.5,
        "counters": {"cycles": None},
    }
    with pytest.raises(AttributeError):
        _reference_sample_from_dict(state)
    with pytest.raises(AttributeError):
        sample_from_dict(state)


def test_orders_the_straight_line_code_relies_on() -> None:
    """``_metrics`` unpacks counters and builds metrics positionally: these orders are load-bearing."""
    assert COUNTERS_USED == (
        "cycles", "instructions", "cache-references", "cache-misses", "LLC-loads", "LLC-load-misses",
        "branch-instructions", "branch-misses", "stalled-cycles-frontend", "stalled-cycles-backend",
        "mem-bandwidth-bytes", "task-clock", "context-switches", "page-faults",
    )
    assert METRICS == (
        "ipc", "cpi", "llc_mpki", "llc_miss_ratio", "cache_mpki", "cache_miss_ratio", "membw_gbs",
        "membw_util", "stall_frontend", "stall_backend", "branch_mpki", "branch_miss_ratio", "cpu_util",
        "mem_util", "ctx_switches_log", "page_faults_log", "busy_cpus", "inst_gps", "llc_loads_gps",
        "llc_misses_gps", "cache_refs_gps", "cache_misses_gps", "branch_misses_gps", "rec_mkpi",
        "rec_mem_gps", "sanity_violation",
    )


def test_pane_refuses_a_sample_of_the_wrong_length_when_it_is_added() -> None:
    pane = PaneAgg(0)
    with pytest.raises(ValueError, match="metrics"):
        pane.add([1.0] * (len(METRICS) - 1), 0)
    assert pane.samples == 0 and pane.n == [0.0] * len(METRICS)
