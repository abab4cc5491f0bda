"""SyntheticCluster: N nodes of co-located workloads producing Sapphire-Rapids-like counters."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from contracts.models import REGIMES, WORKLOAD_CLASSES
from featurelib.node.counters import NODE_COUNTERS
from simulator.workloads import (
    GENTLE_LIMIT,
    KINDS,
    REGIME_THRESHOLD,
    RESOURCES,
    SENSITIVITY_MATRIX,
    class_slowdowns,
    excess,
    regime_of,
    validate_kinds,
)

EVENTS: Final = NODE_COUNTERS
"""Counter names (``featurelib/node/counters.py``), the columns of ``TickBatch.values``; task-clock in ns, bandwidth
in bytes."""
COL: Final = {name: i for i, name in enumerate(EVENTS)}
MULTIPLEXABLE: Final = tuple(
    COL[n]
    for n in (
        "cache-references",
        "cache-misses",
        "LLC-loads",
        "LLC-load-misses",
        "branch-instructions",
        "branch-misses",
        "stalled-cycles-frontend",
        "stalled-cycles-backend",
    )
)
OPTIONAL_GROUPS: Final = (
    ("stalled-cycles-frontend", "stalled-cycles-backend"),  # generic stall events absent on many Intel parts
    ("mem-bandwidth-bytes",),  # no uncore IMC access (VMs, locked-down hosts)
    ("LLC-loads", "LLC-load-misses"),
)
ANOMALY_KINDS: Final = ("cpu_hog", "memory_leak", "counter_glitch", "thrashing", "hang")
COUNTED, MULTIPLEXED, NOT_SUPPORTED = 0, 1, 2
STATUS_NAMES: Final = ("counted", "multiplexed", "not_supported")
# Sapphire Rapids-like SKUs: cores, base MHz, all-core turbo MHz, memory GB, peak DRAM GB/s.
SKUS: Final = (
    (56, 2000.0, 3000.0, 512.0, 300.0),
    (48, 2100.0, 3100.0, 256.0, 280.0),
    (32, 2000.0, 3200.0, 256.0, 250.0),
)
_NOT_SUPPORTED_COUNTER: Final = {
    "raw": None,
    "value": None,
    "enabled_ns": 0,
    "running_ns": 0,
    "status": "not_supported",
}


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cores: int
    base_mhz: float
    turbo_mhz: float
    mem_gb: float
    peak_bw_gbs: float
    missing: frozenset[str]
    multiplexed: bool

    @property
    def supported_events(self) -> list[str]:
        return [e for e in EVENTS if e not in self.missing]


@dataclass
class TickBatch:
    """One sampling interval of every node: counters (arrays) plus ground truth kept apart."""

    tick: int
    ts_ms: int
    interval_ms: int
    nodes: Sequence[NodeSpec]
    values: np.ndarray
    """(nodes, len(EVENTS)) scaled counts; NaN where not supported."""
    raw: np.ndarray
    running_ns: np.ndarray
    status: np.ndarray
    """(nodes, len(EVENTS)) int8: COUNTED, MULTIPLEXED or NOT_SUPPORTED."""
    cpu_util: np.ndarray
    mem_util: np.ndarray
    cpu_freq_mhz: np.ndarray
    regime: np.ndarray
    """Ground truth: index into contracts.models.REGIMES."""
    slowdown: np.ndarray
    """Ground truth: (nodes, len(WORKLOAD_CLASSES)) slowdown a workload of each class would see."""
    corunners: list[tuple[str, ...]]
    anomaly: np.ndarray
    """Ground truth: index into ANOMALY_KINDS, -1 when normal."""
    plain: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=bool))

    @property
    def enabled_ns(self) -> int:
        return self.interval_ms * 1_000_000

    def __len__(self) -> int:
        return len(self.nodes)

    def regimes(self) -> list[str]:
        return [REGIMES[int(r)] for r in self.regime]

    def truth_records(self) -> list[dict[str, Any]]:
        """Ground truth per node: never part of the NodeState stream."""
        out = []
        slowdowns = self.slowdown.round(4).tolist()
        for i, spec in enumerate(self.nodes):
            kinds = self.corunners[i]
            out.append(
                {
                    "node": spec.name,
                    "tick": self.tick,
                    "ts_ms": self.ts_ms,
                    "regime": REGIMES[int(self.regime[i])],
                    "co_runners": list(kinds),
                    "co_runner_classes": [KINDS[k].workload_class for k in kinds],
                    "slowdown": dict(zip(WORKLOAD_CLASSES, slowdowns[i], strict=True)),
                    "anomaly": None if self.anomaly[i] < 0 else ANOMALY_KINDS[int(self.anomaly[i])],
                }
            )
        return out

    def counter_dicts(self, i: int) -> dict[str, dict[str, Any]]:
        """Counters of node ``i`` as NodeState.counters (Counter-shaped dicts)."""
        values, raws, runs, status = (
            self.values[i].tolist(),
            self.raw[i].tolist(),
            self.running_ns[i].tolist(),
            self.status[i].tolist(),
        )
        enabled = self.enabled_ns
        out: dict[str, dict[str, Any]] = {}
        for j, name in enumerate(EVENTS):
            st = status[j]
            if st == NOT_SUPPORTED:
                out[name] = dict(_NOT_SUPPORTED_COUNTER)
            else:
                out[name] = {
                    "raw": raws[j],
                    "value": values[j],
                    "enabled_ns": enabled,
                    "running_ns": runs[j],
                    "status": STATUS_NAMES[st],
                }
        return out

    def nodestate_dicts(self, seq_offset: int = 0, ts_ms: int | None = None) -> list[dict[str, Any]]:
        """NodeState-shaped dicts for every node (the replay hot path: no pydantic here)."""
        enabled = self.enabled_ns
        stamp = self.ts_ms if ts_ms is None else ts_ms
        seq = self.tick + seq_offset
        util = self.cpu_util.tolist()
        mem = self.mem_util.tolist()
        freq = self.cpu_freq_mhz.tolist()
        values = self.values.tolist()
        out = []
        for i, spec in enumerate(self.nodes):
            if self.plain[i]:
                counters = {
                    name: {"raw": v, "value": v, "enabled_ns": enabled, "running_ns": enabled, "status": "counted"}
                    for name, v in zip(EVENTS, values[i], strict=True)
                }
            else:
                counters = self.counter_dicts(i)
            out.append(
                {
                    "node": spec.name,
                    "ts_ms": stamp,
                    "seq": seq,
                    "interval_ms": self.interval_ms,
                    "source": "synthetic",
                    "pmu": "hardware",
                    "supported_events": spec.supported_events,
                    "counters": counters,
                    "cpu_util": util[i],
                    "mem_util": mem[i],
                    "cpu_freq_mhz": freq[i],
                }
            )
        return out


@dataclass
class _Epoch:
    kinds: tuple[str, ...]
    pressures: np.ndarray
    regime: int
    slowdown: np.ndarray


class SyntheticCluster:
    """Seeded simulator of ``nodes`` nodes; see the package docstring for the model."""

    def __init__(
        self,
        nodes: int = 8,
        seed: int = 0,
        workloads: Sequence[str] | None = None,
        *,
        interval_ms: int = 1000,
        start_ms: int = 1_700_000_000_000,
        regime_weights: Mapping[str, float] | None = None,
        corunners: tuple[int, int] = (1, 4),
        epoch_ticks: tuple[int, int] = (30, 120),
        missing_event_prob: float = 0.25,
        multiplex_prob: float = 0.25,
        anomaly_rate: float = 0.0,
        anomaly_kinds: Sequence[str] = ANOMALY_KINDS,
        anomaly_ticks: tuple[int, int] = (5, 30),
        noise: float = 0.02,
        node_prefix: str = "sim-",
        node_names: Sequence[str] | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError("nodes must be >= 1")
        if node_names is not None and len(node_names) != nodes:
            raise ValueError(f"node_names has {len(node_names)} names for {nodes} nodes")
        if not 1 <= corunners[0] <= corunners[1]:
            raise ValueError("corunners must be (min, max) with 1 <= min <= max")
        if not 1 <= epoch_ticks[0] <= epoch_ticks[1]:
            raise ValueError("epoch_ticks must be (min, max) with 1 <= min <= max")
        unknown_anomalies = [a for a in anomaly_kinds if a not in ANOMALY_KINDS]
        if unknown_anomalies:
            raise ValueError(f"unknown anomaly kind(s) {unknown_anomalies}; known: {list(ANOMALY_KINDS)}")
        self.kinds = validate_kinds(workloads if workloads is not None else tuple(KINDS))
        self.seed = seed
        self.interval_ms = interval_ms
        self.start_ms = start_ms
        self.corunners = corunners
        self.epoch_ticks = epoch_ticks
        self.anomaly_rate = anomaly_rate
        self.anomaly_kinds = tuple(ANOMALY_KINDS.index(a) for a in anomaly_kinds)
        self.anomaly_ticks = anomaly_ticks
        self.noise = noise
        weights = dict(regime_weights) if regime_weights is not None else dict.fromkeys(REGIMES, 1.0)
        bad = [r for r in weights if r not in REGIMES]
        if bad:
            raise ValueError(f"unknown regime(s) {bad}; known: {list(REGIMES)}")
        self._regimes = [r for r in REGIMES if weights.get(r, 0.0) > 0]
        total = sum(weights[r] for r in self._regimes)
        if total <= 0:
            raise ValueError("regime_weights must give some regime a positive weight")
        self._weights = np.array([weights[r] / total for r in self._regimes])
        self._aggressors = {
            r: tuple(k for k in self.kinds if KINDS[k].dominant == r and max(KINDS[k].pressure) > REGIME_THRESHOLD)
            for r in RESOURCES
        }
        self._check_feasible()
        self._rng = np.random.default_rng(seed)
        names = list(node_names) if node_names is not None else [f"{node_prefix}{i:04d}" for i in range(nodes)]
        self.specs = [self._node_spec(name, missing_event_prob, multiplex_prob) for name in names]
        n, c = nodes, len(EVENTS)
        self._rates = np.zeros((n, c))
        self._util0 = np.zeros(n)
        self._mem0 = np.zeros(n)
        self._freq0 = np.zeros(n)
        self._load = np.ones(n)
        self._epoch_end = np.zeros(n, dtype=np.int64)
        self._epochs: list[_Epoch | None] = [None] * n
        self._regime = np.zeros(n, dtype=np.int8)
        self._slowdown = np.ones((n, len(WORKLOAD_CLASSES)))
        self._anomaly = np.full(n, -1, dtype=np.int8)
        self._anomaly_start = np.zeros(n, dtype=np.int64)
        self._anomaly_end = np.zeros(n, dtype=np.int64)
        self._anomaly_col = np.zeros(n, dtype=np.int64)
        self._supported = np.array([[e not in s.missing for e in EVENTS] for s in self.specs])
        self._mux = np.array([s.multiplexed for s in self.specs])
        self._plain = np.array([not s.missing and not s.multiplexed for s in self.specs])
        self._cores = np.array([s.cores for s in self.specs], dtype=np.float64)
        self._base = np.array([s.base_mhz for s in self.specs])
        self._tick = 0

    # ----------------------------------------------------------------- set-up
    def _check_feasible(self) -> None:
        need = {"llc": ("llc",), "membw": ("membw",), "core": ("core", "frontend")}
        for regime in self._regimes:
            if regime == "none":
                continue
            dims = need.values() if regime == "mixed" else [need[regime]]
            have = [any(self._aggressors[r] for r in d) for d in dims]
            if (regime == "mixed" and sum(have) < 2) or (regime != "mixed" and not all(have)):
                raise ValueError(
                    f"regime {regime!r} needs aggressor workloads the chosen kinds do not include "
                    f"({list(self.kinds)}); drop it from regime_weights or add kinds"
                )

    def _node_spec(self, name: str, missing_prob: float, mux_prob: float) -> NodeSpec:
        rng = self._rng
        cores, base, turbo, mem, bw = SKUS[int(rng.integers(len(SKUS)))]
        missing: set[str] = set()
        if rng.random() < missing_prob:
            picks = rng.choice(len(OPTIONAL_GROUPS), size=int(rng.integers(1, 3)), replace=False)
            for p in picks:
                missing.update(OPTIONAL_GROUPS[int(p)])
        multiplexed = bool(rng.random() < mux_prob)
        return NodeSpec(name, cores, base, turbo, mem, bw, frozenset(missing), multiplexed)

    # ----------------------------------------------------------------- epochs
    def _draw(self, target: str) -> tuple[list[str], list[float]]:
        rng = self._rng
        dims: list[str] = []
        core_dims = [r for r in ("core", "frontend") if self._aggressors[r]]
        if target in ("llc", "membw"):
            dims = [target]
        elif target == "core":
            dims = [core_dims[int(rng.integers(len(core_dims)))]]
        elif target == "mixed":
            options = [d for d in ("llc", "membw", "core") if (self._aggressors[d] if d != "core" else core_dims)]
            chosen = rng.choice(len(options), size=2, replace=False)
            for c in sorted(int(x) for x in chosen):
                d = options[c]
                dims.append(core_dims[int(rng.integers(len(core_dims)))] if d == "core" else d)
        kinds: list[str] = []
        intensity: list[float] = []
        for d in dims:
            pool = self._aggressors[d]
            kind = pool[int(rng.integers(len(pool)))]
            top = max(KINDS[kind].pressure)
            low = min(1.0, (REGIME_THRESHOLD + 0.05) / top)
            kinds.append(kind)
            intensity.append(float(rng.uniform(low, 1.0)))
        total = int(rng.integers(self.corunners[0], self.corunners[1] + 1))
        for _ in range(max(total - len(kinds), 0 if kinds else 1)):
            kind = self.kinds[int(rng.integers(len(self.kinds)))]
            cap = GENTLE_LIMIT / max(KINDS[kind].pressure)
            kinds.append(kind)
            intensity.append(float(cap * rng.uniform(0.3, 0.98)))
        return kinds, intensity

    def draw_epoch(self) -> tuple[list[str], np.ndarray]:
        """One epoch's workloads as a node's new epoch draws them (a regime target, then the kinds and their
        intensities that produce it): for studies of what nodes run, without running the cluster."""
        rng = self._rng
        target = self._regimes[int(rng.choice(len(self._regimes), p=self._weights))]
        kinds, intensity = self._draw(target)
        return kinds, np.array(intensity)

    def _new_epoch(self, i: int) -> None:
        rng = self._rng
        spec = self.specs[i]
        kinds, inten = self.draw_epoch()
        pressures = np.array([KINDS[k].pressure for k in kinds]) * inten[:, None]
        regime = regime_of(pressures)
        slowdown = class_slowdowns(pressures)
        self._rates[i], self._util0[i], self._mem0[i], self._freq0[i] = self._epoch_rates(spec, kinds, inten, pressures)
        self._epochs[i] = _Epoch(tuple(kinds), pressures, REGIMES.index(regime), slowdown)
        self._regime[i] = REGIMES.index(regime)
        self._slowdown[i] = slowdown
        lo, hi = self.epoch_ticks
        self._epoch_end[i] = self._tick + int(rng.integers(lo, hi + 1))

    def _epoch_rates(
        self, spec: NodeSpec, kinds: list[str], inten: np.ndarray, pressures: np.ndarray
    ) -> tuple[np.ndarray, float, float, float]:
        per, util, mem, freq = workload_rates(spec, kinds, inten, pressures, self._rng)
        return node_rates(spec, per), util, mem, freq

    # ----------------------------------------------------------------- ticks
    def _start_anomalies(self) -> None:
        if self.anomaly_rate <= 0 or not self.anomaly_kinds:
            return
        rng = self._rng
        idle = self._anomaly < 0
        starting = np.nonzero(idle & (rng.random(len(self.specs)) < self.anomaly_rate))[0]
        lo, hi = self.anomaly_ticks
        for i in starting.tolist():
            self._anomaly[i] = self.anomaly_kinds[int(rng.integers(len(self.anomaly_kinds)))]
            self._anomaly_start[i] = self._tick
            self._anomaly_end[i] = self._tick + int(rng.integers(lo, hi + 1))
            self._anomaly_col[i] = int(rng.integers(COL["ref-cycles"]))

    def _apply_anomalies(self, values: np.ndarray, util: np.ndarray, mem: np.ndarray, dt: float) -> None:
        kind = self._anomaly
        if not (kind >= 0).any():
            return
        rng = self._rng
        c = COL
        hog = np.nonzero(kind == ANOMALY_KINDS.index("cpu_hog"))[0]
        if len(hog):
            extra = (1.0 - util[hog]) * 0.8 * self._cores[hog]
            util[hog] += extra / self._cores[hog]
            cyc = extra * self._freq0[hog] * 1e6 * dt
            values[hog, c["cycles"]] += cyc
            values[hog, c["instructions"]] += cyc * 2.5
            values[hog, c["ref-cycles"]] += extra * self._base[hog] * 1e6 * dt
            values[hog, c["task-clock"]] += extra * 1e9 * dt
        leak = np.nonzero(kind == ANOMALY_KINDS.index("memory_leak"))[0]
        if len(leak):
            span = (self._anomaly_end[leak] - self._anomaly_start[leak]).astype(np.float64)
            progress = (self._tick - self._anomaly_start[leak] + 1) / np.maximum(span, 1.0)
            mem[leak] += (0.98 - mem[leak]) * np.clip(progress, 0, 1)
            values[leak, c["page-faults"]] *= 3 + 10 * progress
        glitch = np.nonzero(kind == ANOMALY_KINDS.index("counter_glitch"))[0]
        if len(glitch):
            values[glitch, self._anomaly_col[glitch]] *= rng.uniform(20, 100, size=len(glitch))
        thrash = np.nonzero(kind == ANOMALY_KINDS.index("thrashing"))[0]
        if len(thrash):
            values[thrash, c["page-faults"]] *= 50
            values[thrash, c["context-switches"]] *= 10
            values[thrash, c["instructions"]] *= 0.4
            be = c["stalled-cycles-backend"]
            values[thrash, be] = np.minimum(values[thrash, be] * 2, values[thrash, c["cycles"]] * 0.95)
        hang = np.nonzero(kind == ANOMALY_KINDS.index("hang"))[0]
        if len(hang):
            for name in (
                "cycles",
                "instructions",
                "ref-cycles",
                "task-clock",
                "branch-instructions",
                "branch-misses",
                "cache-references",
                "cache-misses",
                "LLC-loads",
                "LLC-load-misses",
                "stalled-cycles-frontend",
                "stalled-cycles-backend",
                "mem-bandwidth-bytes",
            ):
                values[hang, c[name]] *= 0.02
            values[hang, c["context-switches"]] *= 0.01
            util[hang] *= 0.02

    def tick(self) -> TickBatch:
        """Advance one interval and return every node's counters and ground truth."""
        rng = self._rng
        t = self._tick
        for i in np.nonzero(self._epoch_end <= t)[0].tolist():
            self._new_epoch(i)
        self._start_anomalies()
        n, ncol = self._rates.shape
        dt = self.interval_ms / 1000.0
        self._load = np.clip(1.0 + 0.8 * (self._load - 1.0) + 0.03 * rng.standard_normal(n), 0.6, 1.4)
        noise = np.exp(self.noise * rng.standard_normal((n, ncol)))
        values = self._rates * (self._load * dt)[:, None] * noise
        util = np.clip(self._util0 * self._load, 0.0, 1.0)
        mem = np.clip(self._mem0 * (1.0 + 0.005 * rng.standard_normal(n)), 0.0, 1.0)
        self._apply_anomalies(values, util, mem, dt)
        util = np.clip(util, 0.0, 1.0)
        mem = np.clip(mem, 0.0, 1.0)
        freq = np.round(self._freq0 + 15.0 * rng.standard_normal(n), 1)
        values = np.rint(values)
        enabled = self.interval_ms * 1_000_000
        status = np.zeros((n, ncol), dtype=np.int8)
        running = np.full((n, ncol), enabled, dtype=np.int64)
        raw = values.copy()
        if self._mux.any():
            rows = np.nonzero(self._mux)[0]
            cols = np.array(MULTIPLEXABLE)
            frac = rng.uniform(0.5, 0.95, size=(len(rows), len(cols)))
            sub = np.ix_(rows, cols)
            counted_raw = np.rint(values[sub] * frac * np.exp(0.03 * rng.standard_normal(frac.shape)))
            run = np.rint(enabled * frac).astype(np.int64)
            raw[sub] = counted_raw
            running[sub] = run
            values[sub] = np.rint(counted_raw * enabled / run)
            status[sub] = MULTIPLEXED
        unsupported = ~self._supported
        status[unsupported] = NOT_SUPPORTED
        values[unsupported] = np.nan
        raw[unsupported] = np.nan
        running[unsupported] = 0
        done = (self._anomaly >= 0) & (self._anomaly_end <= t + 1)
        anomaly = self._anomaly.copy()
        self._anomaly[done] = -1
        batch = TickBatch(
            tick=t,
            ts_ms=self.start_ms + t * self.interval_ms,
            interval_ms=self.interval_ms,
            nodes=self.specs,
            values=values,
            raw=raw,
            running_ns=running,
            status=status,
            cpu_util=util,
            mem_util=mem,
            cpu_freq_mhz=freq,
            regime=self._regime.copy(),
            slowdown=self._slowdown.copy(),
            corunners=[e.kinds if e is not None else () for e in self._epochs],
            anomaly=anomaly,
            plain=self._plain,
        )
        self._tick += 1
        return batch

    def run(self, ticks: int) -> Iterator[TickBatch]:
        for _ in range(ticks):
            yield self.tick()


def node_rates(spec: NodeSpec, per: np.ndarray) -> np.ndarray:
    """A node's counter rates from its workloads' (``workload_rates`` rows): their sum, with DRAM traffic capped
    at the node's peak bandwidth."""
    rates = np.zeros(len(EVENTS))
    for row in per:  # row by row, as the node's counters always were summed (bit-identical figures)
        rates += row
    rates[COL["mem-bandwidth-bytes"]] = min(rates[COL["mem-bandwidth-bytes"]], spec.peak_bw_gbs * 0.95e9)
    return rates


def workload_rates(
    spec: NodeSpec, kinds: Sequence[str], inten: np.ndarray, pressures: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, float, float, float]:
    """Counter rates per second of each workload on one node (rows: ``kinds``; columns: ``EVENTS``), the node's
    CPU utilisation, memory fraction and frequency. What per-cgroup counting would see per workload: each row
    already carries the slowdown its co-runners cause. The node's counters are the rows' sum, with DRAM traffic
    capped at the node's peak bandwidth (``SyntheticCluster._epoch_rates``)."""
    n = len(kinds)
    util = rng.uniform(0.6, 0.95, size=n)
    cores = np.array([KINDS[k].cores for k in kinds]) * (0.25 + 1.5 * inten)
    busy = cores * util
    if busy.sum() > spec.cores * 0.97:
        busy *= spec.cores * 0.97 / busy.sum()
    node_util = float(busy.sum() / spec.cores)
    freq = spec.turbo_mhz - (spec.turbo_mhz - spec.base_mhz) * node_util
    ex = excess(pressures)
    per = np.zeros((n, len(EVENTS)))
    for w, name in enumerate(kinds):
        k = KINDS[name]
        cls = WORKLOAD_CLASSES.index(k.workload_class)
        others = np.delete(ex, w, axis=0)
        if len(others):
            sd = float((1.0 + SENSITIVITY_MATRIX[cls] @ others.T).max())
            worst = others.max(axis=0)
        else:
            sd, worst = 1.0, np.zeros(len(RESOURCES))
        cycles = busy[w] * freq * 1e6
        instr = cycles * k.ipc * rng.uniform(0.92, 1.08) / sd
        llc = instr * k.llc_apki / 1000.0
        miss = min(
            0.98, k.llc_miss_ratio + (1 - k.llc_miss_ratio) * 0.6 * worst[0] * SENSITIVITY_MATRIX[cls, 0] / 1.2
        )
        br = instr * k.branch_pki / 1000.0
        fe = min(0.9, k.frontend_stall * (1 + 0.8 * worst[3] + 0.3 * worst[2]))
        be = min(0.95 - fe, k.backend_stall + (1 - k.backend_stall - fe) * (1 - 1 / sd))
        per[w] = np.array(
            [
                cycles,
                instr,
                llc * 1.3,
                llc * miss * 1.15,
                llc,
                llc * miss,
                br,
                br * k.branch_miss_ratio * (1 + 0.6 * worst[2] + 0.4 * worst[3]),
                cycles * fe,
                cycles * max(be, 0.0),
                busy[w] * spec.base_mhz * 1e6,
                llc * miss * 64 * 1.3,
                busy[w] * 1e9,
                busy[w] * (300 + 2000 * k.frontend_stall),
                busy[w] * 15,
                k.mem_gb * 20 * inten[w],
            ]
        )
    mem_gb = 4.0 + sum(KINDS[k].mem_gb * (0.5 + inten[w]) for w, k in enumerate(kinds))
    return per, node_util, min(mem_gb / spec.mem_gb, 0.97), freq


def node_specs_for(seed: int, count: int = 64, interval_ms: int = 10_000) -> list[NodeSpec]:
    """The SKUs a ``SyntheticCluster`` of ``count`` nodes would draw with this seed."""
    return list(SyntheticCluster(nodes=count, seed=seed, interval_ms=interval_ms).specs)
