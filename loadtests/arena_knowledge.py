"""Which knowledge closes the offline arena's gap to its oracle? (issue 21, research tool)

    python -m loadtests.arena_knowledge --seed N [--quick | --synthetic JOBS] [--variants a,b,...] --out DIR

Runs, on the shipped regime model's held-out kinds (full size by default: 50 nodes, Google 2011 parts 0-9,
4 h; the same arrivals as ``borgctl eval arena``), kube-default, the true ``oracle``
(``simulator.arena.aware.OraclePolicy``) and *belief oracles*: the oracle's own rule (``placement_cost``:
fewest latency-sensitive tasks pushed over 1.25, then least slowdown seen + caused, then kube-default's
total, then seeded) evaluated on *believed* pressures instead of the true ones:

  a-class       residents = class mean (training kinds) × 0.75, arriving = class mean × 0.75
  b-res-exact   residents = true (what per-pod counters would show), arriving = class mean × 0.75
  c-job-kind    residents = true, arriving = its kind × 0.75 once a task of its job was placed, else as b
  d-arr-exact   residents = class mean × 0.75, arriving = true
  e-kind        every task at its kind's pressure × 0.75 (kinds known, intensities not)
  f-job-obs     residents = true, arriving = mean true pressure of its job's earlier tasks, else as b
  g-kind-arr    residents = true, arriving = its kind × 0.75 always
  h / i / k     residents = true, arriving = kind × 1.0 / class mean × 1.0 / class mean × 0.875
  j             residents = class mean × 0.75, arriving = class mean × 1.0
  oracle-belief residents and arriving true: must equal the oracle (the wrapper's own check)

0.75 is the mean of the per-task intensity U(0.5, 1). Writes ``DIR/seed<N>[-quick].json``. Figures and
reading: docs/arena.md ("What knowledge would reach the oracle?").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from simulator.arena import loop as arena_loop
from simulator.arena.arrivals import Arrival, load_trace_tasks, synthetic_tasks, to_arrivals
from simulator.arena.aware import COST_TIE, ArenaView, OraclePolicy, TaskPod, placement_cost
from simulator.arena.kube_default import NodeResources, PodRequest, fits, score
from simulator.arena.loop import NODE_MEMORY, NODE_MILLI_CPU, Arena
from simulator.arena.policies import PlacementPolicy, make_policy
from simulator.arena.report import metrics
from simulator.workloads import KINDS, KINDS_BY_CLASS, excess, task_slowdowns

ROOT: Final = Path(__file__).resolve().parents[1]


MEAN_INTENSITY: Final = 0.75
Pressure = tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class JobPod(TaskPod):
    """TaskPod plus what a belief oracle may be allowed to know (job, kind)."""

    job_id: int = -1
    kind: str = ""


def pod_of(a: Arrival) -> JobPod:
    """``simulator.arena.loop.pod_of`` with the job and kind a belief may use (the same requests)."""
    return JobPod(max(1, round(a.cpu * NODE_MILLI_CPU)), max(1, round(a.memory * NODE_MEMORY)),
                  a.workload_class, a.pressure, a.latency_sensitive, a.job_id, a.kind)


@contextlib.contextmanager
def job_pods() -> Iterator[None]:
    """The arena loop builds its pods with ``pod_of`` above while inside (restored after)."""
    original = arena_loop.pod_of
    arena_loop.pod_of = pod_of
    try:
        yield
    finally:
        arena_loop.pod_of = original


def _scaled(p: Sequence[float], k: float = MEAN_INTENSITY) -> Pressure:
    return (p[0] * k, p[1] * k, p[2] * k, p[3] * k)


def class_means(train_kinds: Sequence[str]) -> dict[str, Pressure]:
    """Per class: mean kind pressure over the training kinds of that class (intensity 1; beliefs scale it)."""
    out: dict[str, Pressure] = {}
    for cls, members in KINDS_BY_CLASS.items():
        ks = [k for k in members if k in train_kinds]
        m = np.mean([KINDS[k].pressure for k in ks], axis=0)
        out[cls] = _scaled(m.tolist(), 1.0)
    return out


VARIANTS: Final[dict[str, tuple[str, str, float]]] = {
    # name -> (residents belief, arriving belief, intensity assumed for an arriving class/kind belief)
    "a-class": ("class", "class", MEAN_INTENSITY),
    "b-res-exact": ("true", "class", MEAN_INTENSITY),
    "c-job-kind": ("true", "jobkind", MEAN_INTENSITY),
    "d-arr-exact": ("class", "true", MEAN_INTENSITY),
    "e-kind": ("kind", "kind", MEAN_INTENSITY),
    "f-job-obs": ("true", "jobobs", MEAN_INTENSITY),
    "g-kind-arr": ("true", "kind", MEAN_INTENSITY),
    # extras: a pessimistic (worst-case intensity 1.0) belief about the arriving task only
    "h-res-exact-kind-max": ("true", "kind", 1.0),
    "i-res-exact-class-max": ("true", "class", 1.0),
    "j-class-arr-max": ("class", "class", 1.0),
    "k-res-exact-class-0875": ("true", "class", 0.875),
    "oracle-belief": ("true", "true", MEAN_INTENSITY),  # sanity: must equal the real oracle
}


class BeliefOracle:
    """OraclePolicy.choose on believed pressures (see the module docstring)."""

    def __init__(self, name: str, seed: int, view: ArenaView, residents: str, arriving: str, arr_intensity: float,
                 means: dict[str, Pressure]) -> None:
        self.name = name
        self._rng = random.Random(seed)
        self._view = view
        self._res = residents
        self._arr = arriving
        self._arr_k = arr_intensity
        self._means = means
        self.arena: Arena | None = None
        self._shadow = ArenaView(view.nodes)
        self._key: list[object] = [None] * view.nodes
        self._job_seen: dict[int, list[Pressure]] = {}
        self.fallback = 0
        self.profiled = 0

    def _resident_belief(self, a: Arrival) -> Pressure:
        if self._res == "class":
            return _scaled(self._means[a.workload_class])
        if self._res == "kind":
            return _scaled(KINDS[a.kind].pressure)
        return a.pressure

    def _believed_view(self) -> ArenaView:
        if self._res == "true":
            return self._view
        assert self.arena is not None
        for i in range(self._view.nodes):
            cur = self._view.classes[i]
            if self._key[i] is cur:  # the loop assigns a new array on every change of node i
                continue
            self._key[i] = cur
            tasks = self.arena.residents[i]
            p = np.array([self._resident_belief(t.arrival) for t in tasks], dtype=np.float64).reshape(-1, 4)
            self._shadow.classes[i] = cur
            self._shadow.latency_sensitive[i] = self._view.latency_sensitive[i]
            self._shadow.excess[i] = excess(p)
            self._shadow.slowdown[i] = task_slowdowns([t.arrival.workload_class for t in tasks], p)
        return self._shadow

    def _arriving_belief(self, pod: JobPod) -> Pressure:
        if self._arr == "true":
            return pod.pressure
        if self._arr == "class":
            return _scaled(self._means[pod.workload_class], self._arr_k)
        if self._arr == "kind":
            return _scaled(KINDS[pod.kind].pressure, self._arr_k)
        seen = self._job_seen.get(pod.job_id)
        if not seen:
            self.fallback += 1
            return _scaled(self._means[pod.workload_class], self._arr_k)
        self.profiled += 1
        if self._arr == "jobkind":
            return _scaled(KINDS[pod.kind].pressure, self._arr_k)
        m = np.mean(seen, axis=0).tolist()  # jobobs: what the earlier tasks' counters showed
        return (m[0], m[1], m[2], m[3])

    def choose(self, pod: PodRequest, nodes: Sequence[NodeResources]) -> int | None:
        assert isinstance(pod, JobPod)
        feasible = [i for i, node in enumerate(nodes) if fits(pod, node)]
        if not feasible:
            return None
        view = self._believed_view()
        believed = self._arriving_belief(pod)
        costs = [placement_cost(view, i, pod.workload_class, believed, latency_sensitive=pod.latency_sensitive)
                 for i in feasible]
        low = min(costs)
        tied = [i for i, cost in zip(feasible, costs, strict=True)
                if cost[0] == low[0] and cost[1] <= low[1] + COST_TIE]
        best = [float(score(pod, nodes[i]).total) for i in tied]
        top = max(best)
        chosen = self._rng.choice([i for i, t in zip(tied, best, strict=True) if t == top])
        # the loop binds every non-None answer: the task starts now and its counters become a job profile
        self._job_seen.setdefault(pod.job_id, []).append(pod.pressure)
        return chosen


def run_variants(arrivals: Sequence[Arrival], nodes: int, horizon_s: float, seed: int, variants: Sequence[str],
                 train_kinds: Sequence[str], progress: bool = True) -> dict[str, dict[str, object]]:
    """Each variant on the same arrivals (the arena loop, tick 10 s); its metrics row by name."""
    means = class_means(train_kinds)
    rows: dict[str, dict[str, object]] = {}
    with job_pods():
        for name in variants:
            view = ArenaView(nodes)
            policy: PlacementPolicy
            if name == "oracle":
                policy = OraclePolicy(seed, view)
            elif name in VARIANTS:
                policy = BeliefOracle(name, seed, view, *VARIANTS[name], means)
            else:
                policy = make_policy(name, seed)
            w0, c0 = time.perf_counter(), time.process_time()
            arena = Arena(list(arrivals), nodes, policy, view, horizon_s=horizon_s, tick_s=10.0)
            if isinstance(policy, BeliefOracle):
                policy.arena = arena
            m = metrics(arena.run())
            row: dict[str, object] = {
                "slo_violation_task_s": m["slo_violation_task_s"],
                "useful_cpu_utilisation": m["useful_cpu_utilisation"],
                "mean_cpu_utilisation": m["mean_cpu_utilisation"],
                "slowdown_mean_latency_sensitive": m["slowdown_mean_latency_sensitive"],
                "slowdown_p95_latency_sensitive": m["slowdown_p95_latency_sensitive"],
                "mean_wait_s": m["mean_wait_s"], "placements": m["placements"], "unfinished": m["unfinished"],
                "wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - c0,
            }
            if isinstance(policy, BeliefOracle):
                row["arriving_fallback_decisions"] = policy.fallback
                row["arriving_profiled_decisions"] = policy.profiled
            rows[name] = row
            if progress:
                print(f"seed {seed} {name}: SLO violation {row['slo_violation_task_s']:.0f} task-s, useful "
                      f"utilisation {row['useful_cpu_utilisation']:.3f} ({row['wall_s']:.1f}s)",
                      file=sys.stderr, flush=True)
    base = rows.get("kube-default", {}).get("slo_violation_task_s")
    orc = rows.get("oracle", {}).get("slo_violation_task_s")
    for row in rows.values():
        v = row["slo_violation_task_s"]
        row["x_kube_default"] = v / base if isinstance(v, float) and isinstance(base, float) and base else None
        row["x_oracle"] = v / orc if isinstance(v, float) and isinstance(orc, float) and orc else None
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    from borgctl.paths import data_dir

    ap = argparse.ArgumentParser(prog="python -m loadtests.arena_knowledge", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="30 nodes, 2 trace parts, 1 h")
    ap.add_argument("--synthetic", type=int, default=None, metavar="JOBS", help="synthetic arrivals, not the trace")
    ap.add_argument("--variants", default="kube-default,oracle,a-class,b-res-exact,c-job-kind,d-arr-exact")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS and v not in ("kube-default", "oracle", "random")]
    if unknown:
        print(f"arena_knowledge: unknown variant(s) {unknown}; choose from kube-default, oracle, random, "
              f"{', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    version = (ROOT / "models" / "regime" / "CURRENT").read_text().strip()
    card = json.loads((ROOT / "models" / "regime" / version / "model_card.json").read_text())
    held, train = list(card["data"]["heldout_kinds"]), list(card["data"]["train_kinds"])
    nodes, parts, horizon = (30, 2, 3600.0) if args.quick else (50, 10, 4 * 3600.0)
    if args.synthetic:
        tasks = synthetic_tasks(args.synthetic, seed=args.seed)
    else:
        events = data_dir() / "google2011" / "task_events"
        if not events.is_dir():
            print(f"arena_knowledge: {events} not found (BORG_DATA_DIR); use --synthetic JOBS", file=sys.stderr)
            return 2
        tasks = load_trace_tasks(events, parts)
    # borgctl eval arena's defaults: --target-load 0.6, --node-fraction 0.125, --tick-s 10
    arrivals, stats = to_arrivals(tasks, kinds=held, nodes=nodes, seed=args.seed, horizon_s=horizon,
                                  node_fraction=0.125, target_load=0.6)
    rows = run_variants(arrivals, nodes, horizon, args.seed, variants, train)
    args.out.mkdir(parents=True, exist_ok=True)
    tag = f"seed{args.seed}" + ("-quick" if args.quick else "") + (f"-syn{args.synthetic}" if args.synthetic else "")
    doc = {"command": " ".join(sys.argv), "seed": args.seed, "nodes": nodes, "parts": parts, "horizon_s": horizon,
           "model_version": version, "heldout_kinds": held, "train_kinds": train, "arrivals": stats.as_dict(),
           "rows": rows}
    (args.out / f"{tag}.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out / f'{tag}.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
