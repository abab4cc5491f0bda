"""Node contention features: the ONE definition, used by the features service and by training.

Three layers, all pure (no I/O, no Kafka):

* :func:`sample_metrics` turns one NodeState interval into base metrics (IPC, CPI,
  LLC/cache MPKI and miss ratios, memory bandwidth, stall ratios, branch MPKI,
  utilisation, software event rates, absolute event rates per second, busy CPUs
  from task-clock, recorded Alibaba metrics). A metric whose
  counters the node lacks, or that ran for less than ``MULTIPLEX_MIN_FRACTION`` of the
  time they were enabled, is ``None`` (never invented); a physically impossible
  value (counter wrap, reset artefact, IPC > 10, misses > references …) is ``None``
  too and is counted in the ``sanity_violation`` metric. CPU frequency (and
  ``ref-cycles``, its proxy) is never read: it is a utilisation confound.
* :class:`PaneAgg` keeps count / sum / sum of squares per metric for one *pane*
  (``hop_ms`` of event time). Hopping windows of 10 s, 60 s and 300 s that advance
  by one pane are unions of the last 1, 6 and 30 panes (:func:`window_features`).
* :class:`NodeWindows` is the per-node state machine, persisted to a small key-value
  store (a dict offline; a changelog topic in the features service, written once per
  commit). It deduplicates samples, accepts out-of-order samples until their pane
  closes, closes a pane on the sample
  that completes it (``ts + interval`` reaches the pane end) or on the first sample
  of a later pane, and emits one :class:`Window` per closed pane. Re-delivering a
  sample that closed one of the last ``REPLAY_PANES`` panes re-emits the identical
  window (idempotent replay after a crash between producing and committing).

Feature names are ``<metric>_<stat>`` with stats ``mean_10s, mean_60s, mean_300s,
std_60s, z_300s, delta_10s`` plus ``samples_frac_10s``; :func:`node_feature_schema_hash`
covers names, windows and hop, so a model trained on another definition is refused.
"""

from __future__ import annotations

import hashlib
import math
import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import numpy as np
import orjson

FEATURE_SCHEMA_VERSION: Final = "node-features-v1"
HOP_MS: Final = 10_000
WINDOWS_S: Final = (10, 60, 300)
PANES_300: Final = 300_000 // HOP_MS
PANES_60: Final = 60_000 // HOP_MS
REPLAY_PANES: Final = 6
"""Windows that can be re-emitted identically when their closing sample is delivered again."""
RING: Final = PANES_300 + REPLAY_PANES
"""Closed panes kept per node: a 300 s window plus the replay tolerance."""
WRAP_LIMIT: Final = float(2**47)
"""A per-interval count at or above this is a wrapped/reset 48-bit counter, not a measurement."""

METRICS: Final[tuple[str, ...]] = (
    "ipc",
    "cpi",
    "llc_mpki",
    "llc_miss_ratio",
    "cache_mpki",
    "cache_miss_ratio",
    "membw_gbs",
    "membw_util",
    "stall_frontend",
    "stall_backend",
    "branch_mpki",
    "branch_miss_ratio",
    "cpu_util",
    "mem_util",
    "ctx_switches_log",
    "page_faults_log",
    "busy_cpus",
    "inst_gps",
    "llc_loads_gps",
    "llc_misses_gps",
    "cache_refs_gps",
    "cache_misses_gps",
    "branch_misses_gps",
    "rec_mkpi",
    "rec_mem_gps",
    "sanity_violation",
)
M: Final = len(METRICS)
MI: Final = {name: i for i, name in enumerate(METRICS)}
STATS: Final = ("mean_10s", "mean_60s", "mean_300s", "std_60s", "z_300s", "delta_10s")
NODE_FEATURE_NAMES: Final[tuple[str, ...]] = (
    *(f"{m}_{s}" for m in METRICS for s in STATS),
    "samples_frac_10s",
)
N_FEATURES: Final = len(NODE_FEATURE_NAMES)
FEATURE_INDEX: Final = {name: i for i, name in enumerate(NODE_FEATURE_NAMES)}

COUNTERS_USED: Final = (
    "cycles",
    "instructions",
    "cache-references",
    "cache-misses",
    "LLC-loads",
    "LLC-load-misses",
    "branch-instructions",
    "branch-misses",
    "stalled-cycles-frontend",
    "stalled-cycles-backend",
    "mem-bandwidth-bytes",
    "task-clock",
    "context-switches",
    "page-faults",
)
"""Canonical counter names read (services/node_agent/events.py). ``ref-cycles`` is not: frequency proxy."""
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


def vector_problem(vector: Any, schema_hash: str, consumer: str) -> str | None:
    """Why a FeatureVector cannot be fed to `consumer`'s model (None when it can)."""
    if vector.schema_hash != schema_hash:
        return (
            f"feature schema {vector.schema_hash[:12]}… differs from the model's {schema_hash[:12]}… "
            f"(features and {consumer} run different feature definitions)"
        )
    if len(vector.values) != N_FEATURES:
        return f"model input needs {N_FEATURES} features, the vector has {len(vector.values)}"
    return None


def node_feature_schema_hash() -> str:
    """sha256 over the schema version, hop, windows and the ordered feature names."""
    text = (
        f"{FEATURE_SCHEMA_VERSION}\nhop_ms={HOP_MS}\nwindows_s={','.join(map(str, WINDOWS_S))}\n"
        + "\n".join(NODE_FEATURE_NAMES)
    )
    return hashlib.sha256(text.encode()).hexdigest()


# ----------------------------------------------------------------------------- one sample


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
            value = c.get("value")
            # the times are looked up only for a multiplexed counter (a small share): "counted"
            # ran all the time it was enabled (every producer marks running < enabled multiplexed)
            if value is not None and (
                (status := c.get("status", "counted")) == "counted"
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


# ----------------------------------------------------------------------------- panes

_PANE_HEAD: Final = struct.Struct("<qqqq")  # pane index, samples, newest input ts, expected samples
_PANE_BODY: Final = struct.Struct("<" + "d" * (3 * M))


class PaneAgg:
    """Count, sum and sum of squares per metric over one pane.

    ``add`` only keeps the sample's metrics; they are folded into the sums with numpy when
    the sums are read (the pane closes, or a checkpoint writes it). Adding 26 metrics one by
    one into three lists of Python floats cost ~2 µs per sample in a loop over one pane, but
    ~14 µs per NodeState in the features service at 10,000/s (py-spy): 5,000 nodes' lists
    and floats do not stay in the CPU caches between a node's samples. The fold adds the
    samples in their order onto the sums so far, as the loop did, so the sums are the same
    floats (``tests/unit/test_node_features_fast.py`` compares bits with the loop).
    """

    __slots__ = ("_pending", "_sums", "expected", "index", "input_ts_ms", "samples")

    def __init__(self, index: int, n: Sequence[float] | None = None, s: Sequence[float] | None = None,
                 q: Sequence[float] | None = None, samples: int = 0, input_ts_ms: int = 0, expected: int = 1) -> None:
        self.index = index
        self._sums: np.ndarray | None = None if n is None and s is None and q is None else np.array(
            [_ZEROS if v is None else v for v in (n, s, q)], dtype=np.float64)
        self._pending: list[Sequence[float | None]] = []
        self.samples = samples
        self.input_ts_ms = input_ts_ms
        self.expected = expected

    @classmethod
    def of_sums(cls, index: int, sums: np.ndarray, samples: int, input_ts_ms: int, expected: int) -> PaneAgg:
        """A pane whose (3, M) counts, sums and sums of squares are ``sums`` (taken as they are, not copied)."""
        agg = cls(index, samples=samples, input_ts_ms=input_ts_ms, expected=expected)
        agg._sums = sums
        return agg

    def add(self, metrics: Sequence[float | None], input_ts_ms: int) -> None:
        """Count the sample ``metrics`` (M floats or None, kept as given until the next fold: a tuple, or a list
        nobody changes)."""
        if len(metrics) != M:  # here, not in a later fold, so the error is this sample's
            raise ValueError(f"a sample has {M} metrics, not {len(metrics)}")
        self._pending.append(metrics)
        self.samples += 1
        if input_ts_ms > self.input_ts_ms:
            self.input_ts_ms = input_ts_ms

    def sums(self) -> np.ndarray:
        """(3, M): counts, sums, sums of squares (the pane's own array: do not modify it)."""
        pending = self._pending
        if pending:
            self._sums = _fold(self._sums, pending)
            self._pending = []
        elif self._sums is None:
            self._sums = np.zeros((3, M))
        return self._sums

    @property
    def n(self) -> list[float]:
        out: list[float] = self.sums()[0].tolist()
        return out

    @property
    def s(self) -> list[float]:
        out: list[float] = self.sums()[1].tolist()
        return out

    @property
    def q(self) -> list[float]:
        out: list[float] = self.sums()[2].tolist()
        return out

    def body(self) -> bytes:
        """The sums as ``_PANE_BODY`` packs them: counts, sums, sums of squares, little-endian doubles."""
        return np.ascontiguousarray(self.sums(), dtype="<f8").tobytes()

    def to_bytes(self) -> bytes:
        return _PANE_HEAD.pack(self.index, self.samples, self.input_ts_ms, self.expected) + self.body()

    @classmethod
    def from_bytes(cls, data: bytes) -> PaneAgg:
        index, samples, input_ts, expected = _PANE_HEAD.unpack_from(data)
        return cls.of_sums(index, _body_sums(data, _PANE_HEAD.size), samples, input_ts, expected)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PaneAgg):
            return NotImplemented
        return ((self.index, self.samples, self.input_ts_ms, self.expected)
                == (other.index, other.samples, other.input_ts_ms, other.expected)
                and self.sums().tobytes() == other.sums().tobytes())

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it was

    def __repr__(self) -> str:
        return (f"PaneAgg(index={self.index}, samples={self.samples}, input_ts_ms={self.input_ts_ms}, "
                f"expected={self.expected}, sums={self.sums().tolist()})")


_ZEROS: Final = (0.0,) * M


def _body_sums(data: bytes, offset: int) -> np.ndarray:
    """The (3, M) sums packed at ``offset`` (``_PANE_BODY``), as a new writable array."""
    return np.frombuffer(data, dtype="<f8", count=3 * M, offset=offset).astype(np.float64).reshape(3, M)


@np.errstate(all="ignore")  # inf - inf and overflow make NaN and inf silently, as Python's floats do
def _fold(sums: np.ndarray | None, pending: Sequence[Sequence[float | None]]) -> np.ndarray:
    """``sums`` (None: zeros) with the samples ``pending`` added one after the other; a None metric is not counted.

    The reduction runs over the samples axis, which is not the contiguous one, so numpy adds
    row after row in order (no pairwise summation): the loop's floats exactly.
    """
    x = np.array(pending, dtype=np.float64)  # None becomes NaN
    missing = np.isnan(x)
    if sum(row.count(None) for row in pending) != np.count_nonzero(missing):
        # a metric that is NaN itself: counted (and its sums NaN), as the loop counted it
        missing = np.array([[v is None for v in row] for row in pending], dtype=bool)
    k = len(pending)
    stack = np.empty((3, k + 1, M))
    if sums is None:
        stack[:, 0] = 0.0
    else:
        stack[:, 0] = sums
    np.logical_not(missing, out=stack[0, 1:], casting="unsafe")
    np.copyto(stack[1, 1:], np.where(missing, 0.0, x))
    np.multiply(stack[1, 1:], stack[1, 1:], out=stack[2, 1:])
    out: np.ndarray = stack.sum(axis=1)
    return out


def _mean(n: np.ndarray, s: np.ndarray) -> np.ndarray:
    return np.where(n > 0, s / np.maximum(n, 1.0), 0.0)


def _std(n: np.ndarray, s: np.ndarray, q: np.ndarray) -> np.ndarray:
    var = (q - s * s / np.maximum(n, 1.0)) / np.maximum(n - 1.0, 1.0)
    out: np.ndarray = np.sqrt(np.clip(var, 0.0, None))
    return out


def window_features(panes: Sequence[PaneAgg | None]) -> tuple[list[float], list[bool]]:
    """Features of the window ending at ``panes[-1]`` (``panes`` oldest..newest, up to 30).

    Invalid features are 0.0 with ``valid`` False (the wire contract forbids NaN).
    """
    last = panes[-1]
    if last is None:
        raise ValueError("the newest pane of a window must exist")
    panes = list(panes[-PANES_300:])
    stack = np.zeros((len(panes), 3, M))
    for i, p in enumerate(panes):
        if p is not None:
            stack[i] = p.sums()
    return stack_features(stack, last.samples, last.expected)


def stack_features(stack: np.ndarray, last_samples: int, last_expected: int) -> tuple[list[float], list[bool]]:
    """Features from pane aggregates ``stack`` (k, 3, M), oldest..newest, missing panes all zero."""
    values, valid = stack_features_many(stack[None], np.array([last_samples]), np.array([last_expected]))
    return values[0].tolist(), valid[0].tolist()


def stack_features_many(
    stacks: np.ndarray, last_samples: np.ndarray, last_expected: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Features of B windows at once: ``stacks`` (B, k, 3, M) → values (B, N_FEATURES), valid.

    One numpy pass for every window closed in a batch of input: numpy's per-call cost
    dominates on (k, 3, M) arrays, so the per-window cost falls with B. Element-wise the
    arithmetic (and the sequential sum over panes) is the same for any B.
    """
    b, k = stacks.shape[0], stacks.shape[1]
    n10, s10 = stacks[:, -1, 0], stacks[:, -1, 1]
    t60 = stacks[:, -PANES_60:].sum(axis=1)
    t300 = stacks.sum(axis=1)
    n60, s60, q60 = t60[:, 0], t60[:, 1], t60[:, 2]
    n300, s300, q300 = t300[:, 0], t300[:, 1], t300[:, 2]
    m10, m60, m300 = _mean(n10, s10), _mean(n60, s60), _mean(n300, s300)
    sd60, sd300 = _std(n60, s60, q60), _std(n300, s300, q300)
    eps = 1e-6 + 0.01 * np.abs(m300)
    z = (m10 - m300) / np.maximum(sd300, eps)
    if k >= 2:
        nprev, sprev = stacks[:, -2, 0], stacks[:, -2, 1]
        delta = m10 - _mean(nprev, sprev)
        delta_ok = (n10 > 0) & (nprev > 0)
    else:
        delta, delta_ok = np.zeros((b, M)), np.zeros((b, M), dtype=bool)
    stats = np.stack([m10, m60, m300, sd60, z, delta], axis=2)
    ok = np.stack([n10 > 0, n60 > 0, n300 > 0, n60 >= 2, (n300 >= 3) & (n10 > 0), delta_ok], axis=2)
    frac = np.minimum(last_samples / np.maximum(last_expected, 1), 1.0)
    values = np.concatenate([np.where(ok, stats, 0.0).reshape(b, -1), frac.reshape(b, 1)], axis=1)
    valid = np.concatenate([ok.reshape(b, -1), np.ones((b, 1), dtype=bool)], axis=1)
    return values, valid


# ----------------------------------------------------------------------------- state machine


class PaneStore(Protocol):
    """Where per-node state is persisted: a dict offline, a changelog topic online."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, value: bytes) -> None: ...


class DictStore:
    """In-memory PaneStore (training, tests)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def put(self, key: str, value: bytes) -> None:
        self.data[key] = value


@dataclass(frozen=True, slots=True)
class Window:
    """One emitted window: the FeatureVector payload before wire encoding."""

    node: str
    ts_ms: int
    """Window end (event time)."""
    pane: int
    values: list[float]
    valid: list[bool]
    samples: int
    input_ts_ms: int
    replay: bool = False
    """True when re-emitted for a re-delivered closing sample (identical to the original)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str
    """accepted | duplicate | late | replayed (| failed, from ``observe_many``)"""
    windows: tuple[Window, ...] = ()
    error: str | None = None


_BARE: Final = {status: Outcome(status) for status in ("accepted", "duplicate", "late", "replayed")}
"""Outcomes without windows or errors (frozen, so shared)."""


def pane_phase_ms(node: str, hop_ms: int = HOP_MS) -> int:
    """Per-node offset of pane boundaries: spreads window closes of many nodes over the hop."""
    return zlib.crc32(node.encode()) % hop_ms


def pane_key(node: str, index: int) -> str:
    return f"{node}|{index % RING}"


_META_INDEX, _META_SAMPLES, _META_INPUT, _META_EXPECTED = range(4)
_OPEN_MAGIC: Final = b"\x01"
"""First byte of a binary open-pane record (a JSON one starts with ``{``)."""
_OPEN_HEAD: Final = struct.Struct("<qqqqII")  # pane index, samples, newest input ts, expected, #ids, #emits
_SEQ_LIMIT: Final = 2**63
"""Sample ids are stored as signed 64-bit integers."""


@dataclass(slots=True)
class _NodeState:
    """One node's decoded state: the open pane and a ring of the last ``RING`` closed panes."""

    open: PaneAgg | None
    ids: list[list[int]]
    """(seq, ts_ms) of the samples in the open pane (dedup)."""
    emits: list[list[int]]
    """(pane, seq, ts_ms) of the samples that closed the last ``REPLAY_PANES`` panes."""
    ring: np.ndarray
    """(RING, 3, M) float64: counts, sums, sums of squares of closed pane ``i`` at row ``i % RING``."""
    meta: np.ndarray
    """(RING, 4) int64: pane index (-1 = empty), samples, newest input ts, expected samples."""


@dataclass(frozen=True, slots=True)
class _Pending:
    """A closed window whose features are not computed yet (its panes are copied)."""

    node: str
    index: int
    stack: np.ndarray
    samples: int
    input_ts_ms: int
    expected: int


class NodeWindows:
    """Per-node pane aggregation with dedup, bounded lateness and idempotent re-emission.

    State lives decoded in memory (one ``_NodeState`` per node) and is persisted as records
    in ``store``: key ``node`` holds the open pane (packed binary; the older JSON layout is
    still read: aggregates, the (seq, ts) ids it contains, the closing ids of the last
    ``REPLAY_PANES`` windows); keys ``node|i`` hold
    closed panes (packed binary), a ring of ``RING``. A node seen for the first time is
    loaded from ``store`` (what a changelog restored).

    ``write_through=True`` (offline) writes the records on every ``observe``;
    ``write_through=False`` (the features service) only marks them dirty, and
    :meth:`checkpoint` / :meth:`write_nodes` hand the dirty records to a writer — once per
    offset commit instead of once per sample. Either way a closed pane is written before its
    node's open-pane record, so any prefix of the writes (what a changelog restores after a
    crash) is a consistent state.
    """

    def __init__(self, store: PaneStore, *, hop_ms: int = HOP_MS, spread: bool = True,
                 write_through: bool = True) -> None:
        if hop_ms != HOP_MS:
            raise ValueError(f"hop_ms is part of the feature schema ({HOP_MS}); got {hop_ms}")
        self.store = store
        self.hop_ms = hop_ms
        self.spread = spread
        self.write_through = write_through
        self._phase: dict[str, int] = {}
        self._nodes: dict[str, _NodeState] = {}
        self._dirty: dict[str, list[int]] = {}
        """Nodes changed since they were last written, with the ring slots of panes they closed."""

    def phase(self, node: str) -> int:
        p = self._phase.get(node)
        if p is None:
            p = self._phase[node] = pane_phase_ms(node, self.hop_ms) if self.spread else 0
        return p

    def pane_of(self, node: str, ts_ms: int) -> int:
        return (ts_ms - self.phase(node)) // self.hop_ms

    def pane_end(self, node: str, index: int) -> int:
        return (index + 1) * self.hop_ms + self.phase(node)

    # -- state (de)serialisation ------------------------------------------------------------
    def _state(self, node: str) -> _NodeState:
        st = self._nodes.get(node)
        if st is None:
            st = self._nodes[node] = self._load(node)
        return st

    def _load(self, node: str) -> _NodeState:
        ring = np.zeros((RING, 3, M))
        meta = np.zeros((RING, 4), dtype=np.int64)
        meta[:, _META_INDEX] = -1
        for slot in range(RING):
            raw = self.store.get(f"{node}|{slot}")
            if raw is not None:
                pane = PaneAgg.from_bytes(raw)
                if pane.index % RING == slot:
                    ring[slot] = pane.sums()
                    meta[slot] = (pane.index, pane.samples, pane.input_ts_ms, pane.expected)
        raw = self.store.get(node)
        if raw is None:
            return _NodeState(None, [], [], ring, meta)
        if raw[:1] == _OPEN_MAGIC:
            index, samples, input_ts, expected, n_ids, n_emits = _OPEN_HEAD.unpack_from(raw, 1)
            sums = _body_sums(raw, 1 + _OPEN_HEAD.size)
            tail = struct.unpack_from(f"<{2 * n_ids + 3 * n_emits}q", raw, 1 + _OPEN_HEAD.size + _PANE_BODY.size)
            agg = PaneAgg.of_sums(index, sums, samples, input_ts, expected)
            ids = [list(tail[i:i + 2]) for i in range(0, 2 * n_ids, 2)]
            emits = [list(tail[i:i + 3]) for i in range(2 * n_ids, 2 * n_ids + 3 * n_emits, 3)]
            return _NodeState(agg, ids, emits, ring, meta)
        state: dict[str, Any] = orjson.loads(raw)  # the JSON layout written before the binary one
        agg = PaneAgg(state["p"], state["n"], state["s"], state["q"], state["cnt"], state["in"], state["exp"])
        return _NodeState(agg, state["ids"], state["emits"], ring, meta)

    @staticmethod
    def _open_record(st: _NodeState) -> bytes:
        """Binary (struct) open-pane record: ~5x cheaper than JSON, written per node per commit."""
        agg = st.open
        assert agg is not None
        flat = [x for pair in st.ids for x in pair] + [x for triple in st.emits for x in triple]
        return b"".join((
            _OPEN_MAGIC,
            _OPEN_HEAD.pack(agg.index, agg.samples, agg.input_ts_ms, agg.expected, len(st.ids), len(st.emits)),
            agg.body(),
            struct.pack(f"<{len(flat)}q", *flat),
        ))

    @staticmethod
    def _pane_record(st: _NodeState, slot: int) -> bytes:
        return _PANE_HEAD.pack(*st.meta[slot].tolist()) + _PANE_BODY.pack(*st.ring[slot].ravel().tolist())

    def closed_pane(self, node: str, index: int) -> PaneAgg | None:
        st = self._state(node)
        slot = index % RING
        if int(st.meta[slot, _META_INDEX]) != index:
            return None
        row = st.ring[slot]
        _, samples, input_ts, expected = st.meta[slot].tolist()
        return PaneAgg.of_sums(index, row.copy(), samples, input_ts, expected)

    def _gather(self, node: str, index: int) -> _Pending | None:
        """The panes of the window ending at closed pane ``index``, copied out of the ring."""
        st = self._state(node)
        slot = index % RING
        if int(st.meta[slot, _META_INDEX]) != index or int(st.meta[slot, _META_SAMPLES]) == 0:
            return None
        wanted = np.arange(index - PANES_300 + 1, index + 1)
        slots = wanted % RING
        present = st.meta[slots, _META_INDEX] == wanted
        stack = np.where(present[:, None, None], st.ring[slots], 0.0)
        _, samples, input_ts, expected = st.meta[slot].tolist()
        return _Pending(node, index, stack, samples, input_ts, expected)

    def _finish(self, pending: Sequence[_Pending]) -> list[Window]:
        """Compute the features of ``pending`` windows in one pass."""
        if not pending:
            return []
        values, valid = stack_features_many(
            np.stack([p.stack for p in pending]),
            np.array([p.samples for p in pending]),
            np.array([p.expected for p in pending]),
        )
        return [
            Window(p.node, self.pane_end(p.node, p.index), p.index, v, ok, p.samples, p.input_ts_ms)
            for p, v, ok in zip(pending, values.tolist(), valid.tolist(), strict=True)
        ]

    def window(self, node: str, index: int) -> Window | None:
        """Recompute the window ending at closed pane ``index`` from the ring."""
        pending = self._gather(node, index)
        return None if pending is None else self._finish([pending])[0]

    # -- the transition ---------------------------------------------------------------------
    def observe(self, sample: Sample) -> Outcome:
        status, pending = self._observe(sample)
        return Outcome(status, tuple(self._finish(pending)))

    def observe_many(self, samples: Sequence[Sample]) -> list[Outcome]:
        """``observe`` each sample in order; the windows they close are computed in one pass.

        A sample the state machine cannot handle gets status ``failed`` with the error, and
        the others go on (the service dead-letters it).
        """
        steps: list[tuple[str, list[_Pending]]] = []
        errors: dict[int, str] = {}
        for i, sample in enumerate(samples):
            try:
                steps.append(self._observe(sample))
            except Exception as exc:  # reported per sample; the batch goes on
                errors[i] = f"{type(exc).__name__}: {exc}"
                steps.append(("failed", []))
        windows = iter(self._finish([p for _, pending in steps for p in pending]))
        out: list[Outcome] = []
        for i, (status, pending) in enumerate(steps):
            if pending:
                out.append(Outcome(status, tuple(next(windows) for _ in pending)))
            elif i in errors:
                out.append(Outcome(status, (), errors[i]))
            else:
                out.append(_BARE[status])
        return out

    def _observe(self, sample: Sample) -> tuple[str, list[_Pending]]:
        node = sample.node
        if not 0 <= sample.seq < _SEQ_LIMIT:
            raise ValueError(f"seq {sample.seq} is outside the 64-bit range the window state stores")
        st = self._state(node)
        ident = [sample.seq, sample.ts_ms]
        index = self.pane_of(node, sample.ts_ms)
        agg = st.open
        if agg is not None:
            for pane, seq, ts in st.emits:
                if seq == sample.seq and ts == sample.ts_ms:
                    # a sample that closed a recent pane, delivered again (replay after a crash):
                    # re-emit the identical window so an output lost with the crash is restored.
                    again = self._gather(node, pane)
                    return "replayed", [again] if again is not None else []
            if ident in st.ids:
                return "duplicate", []
            if index < agg.index:
                return "late", []
        windows: list[_Pending] = []
        if agg is None:
            agg, st.ids, st.emits = PaneAgg(index), [], []
        elif index > agg.index:
            if agg.samples > 0:
                windows.append(self._close(node, st, agg))
                st.emits.append([agg.index, sample.seq, sample.ts_ms])
            agg, st.ids = PaneAgg(index), []
        agg.expected = max(1, self.hop_ms // max(sample.interval_ms, 1))
        agg.add(sample.metrics, sample.input_ts_ms)
        st.ids.append(ident)
        if self.pane_of(node, sample.ts_ms + sample.interval_ms) > index:
            windows.append(self._close(node, st, agg))
            st.emits.append([agg.index, sample.seq, sample.ts_ms])
            agg, st.ids = PaneAgg(index + 1), []
        st.open = agg
        if len(st.emits) > REPLAY_PANES:
            del st.emits[:-REPLAY_PANES]
        if self.write_through:
            self.store.put(node, self._open_record(st))
        elif node not in self._dirty:
            self._dirty[node] = []
        return "accepted", windows

    def _close(self, node: str, st: _NodeState, agg: PaneAgg) -> _Pending:
        slot = agg.index % RING
        st.ring[slot] = agg.sums()
        st.meta[slot] = (agg.index, agg.samples, agg.input_ts_ms, agg.expected)
        if self.write_through:
            self.store.put(pane_key(node, agg.index), self._pane_record(st, slot))
        else:
            self._dirty.setdefault(node, []).append(slot)
        pending = self._gather(node, agg.index)
        assert pending is not None  # agg has samples
        return pending

    # -- persistence (write_through=False) ----------------------------------------------------
    @property
    def dirty(self) -> int:
        """Records a checkpoint would write now."""
        return sum(len(set(slots)) + 1 for slots in self._dirty.values())

    def dirty_nodes(self) -> list[str]:
        """The nodes changed since they were last written (a snapshot, for :meth:`write_nodes`)."""
        return list(self._dirty)

    def write_nodes(self, nodes: Sequence[str], write: Callable[[str, str, bytes], None]) -> int:
        """Hand the changed records of ``nodes`` to ``write(node, key, value)``; the number written.

        Per node, the panes it closed come before its open pane, so every prefix of what
        ``write`` persisted is a consistent state (an open pane never names a closed pane the
        store lacks). The records are the state *now*: a node written after more samples
        arrived is written newer, never older. Nodes no longer dirty (or forgotten) are
        skipped, so a caller may write a snapshot of :meth:`dirty_nodes` in slices while
        samples keep arriving.
        """
        count = 0
        for node in nodes:
            slots = self._dirty.pop(node, None)
            st = self._nodes.get(node)
            if slots is None or st is None:
                continue
            for slot in dict.fromkeys(slots):
                write(node, f"{node}|{slot}", self._pane_record(st, slot))
            write(node, node, self._open_record(st))
            count += len(set(slots)) + 1
        return count

    def checkpoint(self, write: Callable[[str, str, bytes], None]) -> int:
        """Hand every record changed since the last checkpoint to ``write`` (see :meth:`write_nodes`)."""
        return self.write_nodes(self.dirty_nodes(), write)

    def forget(self, nodes: set[str]) -> None:
        """Drop the in-memory state of ``nodes`` (their partitions moved to another worker).

        Call :meth:`checkpoint` first: records of forgotten nodes that are still dirty are lost.
        """
        for node in nodes:
            self._nodes.pop(node, None)
            self._dirty.pop(node, None)

    def __len__(self) -> int:
        return len(self._nodes)


def features_for_stream(
    samples: Sequence[Sample], store: PaneStore | None = None, on_window: Callable[[Window], None] | None = None
) -> list[Window]:
    """Run the state machine over samples in order (training / tests); returns every window."""
    machine = NodeWindows(store if store is not None else DictStore())
    out: list[Window] = []
    for s in samples:
        for w in machine.observe(s).windows:
            out.append(w)
            if on_window is not None:
                on_window(w)
    return out


def as_model_input(values: Sequence[float], valid: Sequence[bool]) -> np.ndarray:
    """float32 row with NaN where a feature is not valid (what every node model consumes)."""
    arr = np.asarray(values, dtype=np.float32)
    mask = np.asarray(valid, dtype=bool)
    return np.where(mask, arr, np.float32(np.nan)).astype(np.float32)
