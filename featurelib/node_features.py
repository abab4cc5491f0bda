"""Node contention features: the ONE definition, used by the features service and by training.

Three layers, all pure (no I/O, no Kafka):

* :func:`sample_metrics` turns one NodeState interval into base metrics (IPC, CPI,
  LLC/cache MPKI and miss ratios, memory bandwidth, stall ratios, branch MPKI,
  utilisation, software event rates, absolute event rates per second, busy CPUs
  from task-clock, recorded Alibaba metrics). A metric whose
  counters the node lacks is ``None`` (never invented); a physically impossible
  value (counter wrap, reset artefact, IPC > 10, misses > references …) is ``None``
  too and is counted in the ``sanity_violation`` metric. CPU frequency (and
  ``ref-cycles``, its proxy) is never read: it is a utilisation confound.
* :class:`PaneAgg` keeps count / sum / sum of squares per metric for one *pane*
  (``hop_ms`` of event time). Hopping windows of 10 s, 60 s and 300 s that advance
  by one pane are unions of the last 1, 6 and 30 panes (:func:`window_features`).
* :class:`NodeWindows` is the per-node state machine over a small key-value store
  (a dict offline; a faust table with a changelog online). It deduplicates samples,
  accepts out-of-order samples until their pane closes, closes a pane on the sample
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
from dataclasses import dataclass, field
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


def counter_value(status: str, value: float | None) -> float | None:
    """The usable number of one counter, or None (not counted / not supported / no value)."""
    if status not in ("counted", "multiplexed") or value is None:
        return None
    return float(value)


def _ratio(num: float | None, den: float | None, scale: float = 1.0) -> float | None:
    if num is None or den is None or den <= 0.0:
        return None
    return num / den * scale


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
    violations = 0
    c: dict[str, float | None] = {}
    for name in COUNTERS_USED:
        v = counters.get(name)
        if v is not None and (v >= WRAP_LIMIT or v != v):
            violations += 1  # wrapped or reset counter: a delta across the wrap is meaningless
            v = None
        c[name] = v
    out: list[float | None] = [None] * M
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
    # absolute activity (per second of the interval): aggressors differ from gentle co-runners
    # of the same kind by how much they do, which per-instruction ratios cannot show.
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
    counters = {name: counter_value(c.status, c.value) for name, c in state.counters.items()}
    values, _ = sample_metrics(
        counters,
        cpu_util=state.cpu_util,
        mem_util=state.mem_util,
        interval_ms=state.interval_ms,
        recorded=state.metrics,
    )
    ts = state.ts_ms if input_ts_ms is None else input_ts_ms
    return Sample(state.node, state.seq, state.ts_ms, state.interval_ms, ts, tuple(values))


def sample_from_dict(state: Mapping[str, Any], input_ts_ms: int | None = None) -> Sample:
    """From a NodeState-shaped dict (the simulator's and replay's hot path; same numbers)."""
    counters = {
        name: counter_value(c.get("status", "counted"), c.get("value"))
        for name, c in state.get("counters", {}).items()
    }
    values, _ = sample_metrics(
        counters,
        cpu_util=state["cpu_util"],
        mem_util=state["mem_util"],
        interval_ms=state["interval_ms"],
        recorded=state.get("metrics") or {},
    )
    ts = state["ts_ms"] if input_ts_ms is None else input_ts_ms
    return Sample(state["node"], state["seq"], state["ts_ms"], state["interval_ms"], ts, tuple(values))


# ----------------------------------------------------------------------------- panes

_PANE_HEAD: Final = struct.Struct("<qqqq")  # pane index, samples, newest input ts, expected samples
_PANE_BODY: Final = struct.Struct("<" + "d" * (3 * M))


@dataclass(slots=True)
class PaneAgg:
    """Count, sum and sum of squares per metric over one pane (plain lists: the hot path)."""

    index: int
    n: list[float] = field(default_factory=lambda: [0.0] * M)
    s: list[float] = field(default_factory=lambda: [0.0] * M)
    q: list[float] = field(default_factory=lambda: [0.0] * M)
    samples: int = 0
    input_ts_ms: int = 0
    expected: int = 1

    def add(self, metrics: Sequence[float | None], input_ts_ms: int) -> None:
        n, s, q = self.n, self.s, self.q
        for i, v in enumerate(metrics):
            if v is not None:
                n[i] += 1.0
                s[i] += v
                q[i] += v * v
        self.samples += 1
        if input_ts_ms > self.input_ts_ms:
            self.input_ts_ms = input_ts_ms

    def array(self) -> np.ndarray:
        """(3, M): counts, sums, sums of squares."""
        out: np.ndarray = np.array((self.n, self.s, self.q), dtype=np.float64)
        return out

    def to_bytes(self) -> bytes:
        head = _PANE_HEAD.pack(self.index, self.samples, self.input_ts_ms, self.expected)
        return head + _PANE_BODY.pack(*self.n, *self.s, *self.q)

    @classmethod
    def from_bytes(cls, data: bytes) -> PaneAgg:
        index, samples, input_ts, expected = _PANE_HEAD.unpack_from(data)
        body = _PANE_BODY.unpack_from(data, _PANE_HEAD.size)
        return cls(index, list(body[:M]), list(body[M : 2 * M]), list(body[2 * M :]), samples, input_ts, expected)


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
    k = len(panes)
    stack = np.zeros((k, 3, M))
    for i, p in enumerate(panes):
        if p is not None:
            stack[i] = (p.n, p.s, p.q)
    n10, s10 = stack[-1, 0], stack[-1, 1]
    t60 = stack[-PANES_60:].sum(axis=0)
    t300 = stack.sum(axis=0)
    n60, s60, q60 = t60
    n300, s300, q300 = t300
    m10, m60, m300 = _mean(n10, s10), _mean(n60, s60), _mean(n300, s300)
    sd60, sd300 = _std(n60, s60, q60), _std(n300, s300, q300)
    eps = 1e-6 + 0.01 * np.abs(m300)
    z = (m10 - m300) / np.maximum(sd300, eps)
    if k >= 2:
        nprev, sprev = stack[-2, 0], stack[-2, 1]
        delta = m10 - _mean(nprev, sprev)
        delta_ok = (n10 > 0) & (nprev > 0)
    else:
        delta, delta_ok = np.zeros(M), np.zeros(M, dtype=bool)
    stats = np.stack([m10, m60, m300, sd60, z, delta], axis=1)
    ok = np.stack([n10 > 0, n60 > 0, n300 > 0, n60 >= 2, (n300 >= 3) & (n10 > 0), delta_ok], axis=1)
    values = np.where(ok, stats, 0.0).reshape(-1)
    valid = ok.reshape(-1)
    frac = min(last.samples / max(last.expected, 1), 1.0)
    return [*values.tolist(), frac], [*valid.tolist(), True]


# ----------------------------------------------------------------------------- state machine


class PaneStore(Protocol):
    """Where per-node state lives: a dict offline, a changelog-backed faust table online."""

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
    """accepted | duplicate | late | replayed"""
    windows: tuple[Window, ...] = ()


def pane_phase_ms(node: str, hop_ms: int = HOP_MS) -> int:
    """Per-node offset of pane boundaries: spreads window closes of many nodes over the hop."""
    return zlib.crc32(node.encode()) % hop_ms


def pane_key(node: str, index: int) -> str:
    return f"{node}|{index % RING}"


class NodeWindows:
    """Per-node pane aggregation with dedup, bounded lateness and idempotent re-emission.

    State per node in ``store``: key ``node`` holds the open pane (JSON: aggregates, the
    (seq, ts) ids it contains, the closing ids of the last ``REPLAY_PANES`` windows); keys
    ``node|i`` hold closed panes (packed binary), a ring of ``RING``. Every ``observe``
    writes the pane key (when a pane closes) before the node key, so any prefix of the
    writes (what a changelog restores after a crash) is a consistent state.
    """

    def __init__(self, store: PaneStore, *, hop_ms: int = HOP_MS, spread: bool = True) -> None:
        if hop_ms != HOP_MS:
            raise ValueError(f"hop_ms is part of the feature schema ({HOP_MS}); got {hop_ms}")
        self.store = store
        self.hop_ms = hop_ms
        self.spread = spread
        self._phase: dict[str, int] = {}

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
    def _load_open(self, node: str) -> dict[str, Any] | None:
        raw = self.store.get(node)
        if raw is None:
            return None
        state: dict[str, Any] = orjson.loads(raw)
        return state

    @staticmethod
    def _open_agg(state: dict[str, Any]) -> PaneAgg:
        return PaneAgg(
            state["p"],
            state["n"],
            state["s"],
            state["q"],
            state["cnt"],
            state["in"],
            state["exp"],
        )

    @staticmethod
    def _open_state(agg: PaneAgg, ids: list[list[int]], emits: list[list[int]]) -> dict[str, Any]:
        return {
            "p": agg.index,
            "n": agg.n,
            "s": agg.s,
            "q": agg.q,
            "cnt": agg.samples,
            "in": agg.input_ts_ms,
            "exp": agg.expected,
            "ids": ids,
            "emits": emits[-REPLAY_PANES:],
        }

    def closed_pane(self, node: str, index: int) -> PaneAgg | None:
        raw = self.store.get(pane_key(node, index))
        if raw is None:
            return None
        pane = PaneAgg.from_bytes(raw)
        return pane if pane.index == index else None

    def window(self, node: str, index: int, newest: PaneAgg | None = None) -> Window | None:
        """Recompute the window ending at closed pane ``index`` from the store (or ``newest``)."""
        last = newest if newest is not None else self.closed_pane(node, index)
        if last is None or last.samples == 0:
            return None
        panes = [self.closed_pane(node, i) for i in range(index - PANES_300 + 1, index)] + [last]
        values, valid = window_features(panes)
        return Window(node, self.pane_end(node, index), index, values, valid, last.samples, last.input_ts_ms)

    # -- the transition ---------------------------------------------------------------------
    def observe(self, sample: Sample) -> Outcome:
        node = sample.node
        state = self._load_open(node)
        ident = [sample.seq, sample.ts_ms]
        index = self.pane_of(node, sample.ts_ms)
        if state is not None:
            for pane, seq, ts in state["emits"]:
                if seq == sample.seq and ts == sample.ts_ms:
                    # a sample that closed a recent pane, delivered again (replay after a crash):
                    # re-emit the identical window so an output lost with the crash is restored.
                    again = self.window(node, pane)
                    return Outcome("replayed", (again,) if again is not None else ())
            if ident in state["ids"]:
                return Outcome("duplicate")
            if index < state["p"]:
                return Outcome("late")
        windows: list[Window] = []
        emits: list[list[int]]
        if state is None:
            agg, ids, emits = PaneAgg(index), [], []
        else:
            agg, ids, emits = self._open_agg(state), state["ids"], state["emits"]
            if index > agg.index:
                if agg.samples > 0:
                    windows.append(self._close(node, agg))
                    emits.append([agg.index, sample.seq, sample.ts_ms])
                agg, ids = PaneAgg(index), []
        agg.expected = max(1, self.hop_ms // max(sample.interval_ms, 1))
        agg.add(sample.metrics, sample.input_ts_ms)
        ids.append(ident)
        if self.pane_of(node, sample.ts_ms + sample.interval_ms) > index:
            windows.append(self._close(node, agg))
            emits.append([agg.index, sample.seq, sample.ts_ms])
            agg, ids = PaneAgg(index + 1), []
        self.store.put(node, orjson.dumps(self._open_state(agg, ids, emits)))
        return Outcome("accepted", tuple(windows))

    def _close(self, node: str, agg: PaneAgg) -> Window:
        self.store.put(pane_key(node, agg.index), agg.to_bytes())
        window = self.window(node, agg.index, newest=agg)
        assert window is not None  # agg has samples
        return window


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
