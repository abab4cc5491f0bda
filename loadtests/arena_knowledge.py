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

*Move variants* (``<belief>+move``, ``<belief>+move30``): the belief above for placement, plus a corrective
step after start (:class:`MoveController`, a ``loop.Controller``): at the start of every tick, on each node
where a latency-sensitive task's true slowdown exceeds 1.25 (what its per-pod counters show once it has run),
evict at most one task — the one whose removal cuts the remaining violation most, a batch task on ties —
through the arena's own ``Arena.evict`` (the orchestrator's evict action: the work done is lost, the task is
re-queued at the end of the pending queue and placed again by the same policy, now with its observed pressure,
never back on the node it left). A move is made only if the policy sees a node that takes the task without
pushing a latency-sensitive task over 1.25; never the job's last running task (the orchestrator's PDB-like
rule); each task at most once. Budget (cluster-wide): ``+move`` = the referee's default disruption budget
(``max_disruptions`` per ``disruption_window_s``: 5 per 300 s), ``+move30`` = its action rate limit
(``rate_limit_per_min``: 30 per 60 s) with no disruption budget; ``+move30-nopdb`` = that without the PDB-like
rule (a job's only running task may be moved too); ``-batch`` = only batch tasks are moved (a moved
latency-sensitive task restarts and is exposed again for all its work). Move rows add ``moves``,
``moves_per_min``, ``lost_work_task_s`` (nominal work redone after restarts), ``lost_work_fraction`` (of all
arrivals' work), ``lost_cpu_utilisation`` and ``useful_cpu_utilisation_net`` (useful utilisation minus the lost
work's CPU, over the same window).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

import numpy as np

from services.referee.settings import RefereeSettings
from simulator.arena import loop as arena_loop
from simulator.arena.arrivals import Arrival, load_trace_tasks, synthetic_tasks, to_arrivals
from simulator.arena.aware import (
    SLO_SLOWDOWN,
    ArenaView,
    OraclePolicy,
    TaskPod,
    least_interference,
    placement_cost,
)
from simulator.arena.kube_default import NodeResources, PodRequest, fits
from simulator.arena.loop import NODE_MEMORY, NODE_MILLI_CPU, Arena, _Running
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
                  a.workload_class, a.pressure, a.latency_sensitive, task_id=a.task_id, job_id=a.job_id, kind=a.kind)


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
    """The oracle's rule (``aware.least_interference``) on believed pressures (see the module docstring)."""

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
        self.observed: set[int] = set()
        """Tasks a move evicted: they ran, so their counters showed their true pressure."""
        self.avoid: dict[int, int] = {}
        """Task -> the node a move took it off (re-placing it there would undo the move)."""

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

    def target_cost(self, pod: JobPod, nodes: Sequence[NodeResources], avoid: int) -> tuple[int, float] | None:
        """The cheapest believed placement of an observed pod off node ``avoid`` (None: no other node fits)."""
        view = self._believed_view()
        costs = [placement_cost(view, i, pod.workload_class, pod.pressure, latency_sensitive=pod.latency_sensitive)
                 for i, node in enumerate(nodes) if i != avoid and fits(pod, node)]
        return min(costs) if costs else None

    def choose(self, pod: PodRequest, nodes: Sequence[NodeResources]) -> int | None:
        assert isinstance(pod, JobPod)
        away = self.avoid.get(pod.task_id, -1)  # -1 for every task no move touched: unchanged behaviour
        feasible = [i for i, node in enumerate(nodes) if i != away and fits(pod, node)]
        if not feasible:
            return None
        believed = pod.pressure if pod.task_id in self.observed else self._arriving_belief(pod)
        chosen = least_interference(self._rng, self._believed_view(), pod, nodes, feasible, believed)
        # the loop binds every non-None answer: the task starts now and its counters become a job profile
        self._job_seen.setdefault(pod.job_id, []).append(pod.pressure)
        self.avoid.pop(pod.task_id, None)
        return chosen


@dataclass(frozen=True, slots=True)
class MoveBudget:
    """Limits of the corrective step (cluster-wide window budget; per node per tick; per task; PDB)."""

    per_window: int
    """Moves allowed in any ``window_s`` of arena time, cluster-wide (0: none, the plain belief)."""
    window_s: float
    per_node_tick: int = 1
    once_per_task: bool = True
    """A moved task is never moved again (no ping-pong)."""
    pdb: bool = True
    """Never the job's last running task (the orchestrator's PDB-like rule, ``maxUnavailable: 1``)."""
    min_cut_s: float = 10.0
    """Skip a move whose estimated violation cut is under one tick: it cannot pay back a restart."""
    batch_only: bool = False
    """Move only batch tasks: a moved latency-sensitive task restarts and is exposed again for all its work."""


_REF = RefereeSettings.model_fields
# the referee's defaults (read from its settings, not the environment): its disruption budget, its rate limit
REFEREE_BUDGET: Final = MoveBudget(int(_REF["max_disruptions"].default), float(_REF["disruption_window_s"].default))
RATE_BUDGET: Final = MoveBudget(int(_REF["rate_limit_per_min"].default), 60.0)

MOVE_VARIANTS: Final[dict[str, tuple[str, MoveBudget]]] = {
    # name -> (placement belief in VARIANTS, move budget)
    "b-res-exact+move": ("b-res-exact", REFEREE_BUDGET),
    "b-res-exact+move30": ("b-res-exact", RATE_BUDGET),
    "b-res-exact+move30-nopdb": ("b-res-exact", replace(RATE_BUDGET, pdb=False)),
    "a-class+move": ("a-class", REFEREE_BUDGET),
    "a-class+move30": ("a-class", RATE_BUDGET),
    "a-class+move30-nopdb": ("a-class", replace(RATE_BUDGET, pdb=False)),
    "b-res-exact+move-batch": ("b-res-exact", replace(REFEREE_BUDGET, batch_only=True)),
    "b-res-exact+move30-batch": ("b-res-exact", replace(RATE_BUDGET, batch_only=True)),
    "a-class+move-batch": ("a-class", replace(REFEREE_BUDGET, batch_only=True)),
    "a-class+move30-batch": ("a-class", replace(RATE_BUDGET, batch_only=True)),
}


@dataclass(frozen=True, slots=True)
class _Candidate:
    cut_s: float
    batch: bool
    lost_s: float
    task: _Running

    def key(self) -> tuple[float, bool, float]:
        return (self.cut_s, self.batch, -self.lost_s)


class MoveController:
    """The corrective step after start (module docstring); a ``simulator.arena.loop.Controller``.

    It reads the true slowdowns and pressures of the tasks on a hot node (per-pod counters after start) and
    asks the placement policy, on its own beliefs, whether another node would take the task it would move.
    """

    def __init__(self, policy: BeliefOracle, budget: MoveBudget, slo: float = SLO_SLOWDOWN) -> None:
        self.policy = policy
        self.budget = budget
        self.slo = slo
        self._recent: deque[float] = deque()
        self._moved: set[int] = set()
        self.moves = 0
        self.moved_latency_sensitive = 0
        self.lost_work_s = 0.0
        """Nominal work (task-seconds) done by moved tasks before their eviction: redone after the restart."""
        self.lost_cpu_s = 0.0
        """The same in node-CPU-seconds (work × the pod's CPU request as a fraction of a node)."""
        self.hot_node_ticks = 0
        self.budget_blocked = 0
        """Hot node-ticks left alone because the window's budget was spent."""
        self.no_target = 0
        self.pdb_refused = 0

    def held(self) -> int:
        return 0

    def extra(self, outcome_ticks: int, tick_s: float) -> dict[str, float]:
        minutes = outcome_ticks * tick_s / 60.0
        return {"moves": float(self.moves), "moves_per_min": self.moves / minutes if minutes else 0.0,
                "moved_latency_sensitive": float(self.moved_latency_sensitive),
                "lost_work_task_s": self.lost_work_s, "lost_work_node_cpu_s": self.lost_cpu_s,
                "hot_node_ticks": float(self.hot_node_ticks), "moves_blocked_by_budget": float(self.budget_blocked),
                "moves_without_target": float(self.no_target), "moves_refused_pdb": float(self.pdb_refused)}

    def step(self, tick: int, t_s: float, arena: Arena, pending: deque[Arrival]) -> None:
        b = arena.view
        hot = [i for i in range(arena.n) if bool((b.latency_sensitive[i] & (b.slowdown[i] > self.slo)).any())]
        self.hot_node_ticks += len(hot)
        if not hot or self.budget.per_window <= 0:
            return
        while self._recent and self._recent[0] <= t_s - self.budget.window_s:
            self._recent.popleft()
        if len(self._recent) >= self.budget.per_window:  # spent: not worth ranking candidates
            self.budget_blocked += len(hot)
            return
        jobs = Counter(t.arrival.job_id for tasks in arena.residents for t in tasks) if self.budget.pdb else None
        ranked = [(cands[0].key(), i, cands) for i in hot if (cands := self._candidates(arena, i, jobs))]
        ranked.sort(key=lambda r: r[0], reverse=True)  # the budget goes to the largest cuts first
        for n, (_, i, cands) in enumerate(ranked):
            if len(self._recent) >= self.budget.per_window:
                self.budget_blocked += len(ranked) - n
                return
            done = 0
            for c in cands:
                if done >= self.budget.per_node_tick or len(self._recent) >= self.budget.per_window:
                    break
                a = c.task.arrival
                pod = pod_of(a)
                target = self.policy.target_cost(pod, arena.resources, i)
                if target is None or target[0] > 0:  # nowhere to go without pushing a latency-sensitive task over
                    self.no_target += 1
                    continue
                # the existing mechanism: Arena.evict (work lost) and back to the end of the pending queue,
                # exactly as the orchestrator's evict action does
                pending.append(arena.evict(i, c.task))
                self.policy.observed.add(a.task_id)
                self.policy.avoid[a.task_id] = i
                self._moved.add(a.task_id)
                self._recent.append(t_s)
                self.moves += 1
                self.moved_latency_sensitive += int(a.latency_sensitive)
                self.lost_work_s += c.lost_s
                self.lost_cpu_s += c.lost_s * pod.milli_cpu / NODE_MILLI_CPU
                done += 1
                if jobs is not None:
                    jobs[a.job_id] -= 1

    def _candidates(self, arena: Arena, i: int, jobs: Counter[int] | None) -> list[_Candidate]:
        """Tasks on hot node ``i`` worth moving, best first: estimated violation-seconds cut (time the relieved
        latency-sensitive tasks would otherwise stay over the SLO at today's rates), batch, least work lost."""
        tasks = arena.residents[i]
        slow = arena.view.slowdown[i]
        over = arena.view.latency_sensitive[i] & (slow > self.slo)
        left = [t.remaining_s * t.slowdown for t in tasks]  # wall-clock left at the current slowdown
        classes = [t.arrival.workload_class for t in tasks]
        pressures = np.array([t.arrival.pressure for t in tasks], dtype=np.float64).reshape(-1, 4)
        out: list[_Candidate] = []
        for k, t in enumerate(tasks):
            if self.budget.once_per_task and t.arrival.task_id in self._moved:
                continue
            if self.budget.batch_only and t.arrival.latency_sensitive:
                continue
            keep = [j for j in range(len(tasks)) if j != k]
            after = task_slowdowns([classes[j] for j in keep], pressures[keep])
            # a relieved co-runner stays over the SLO until the moved task would have finished anyway
            cut = sum(min(left[j], left[k]) for j, s in zip(keep, after.tolist(), strict=True)
                      if over[j] and s <= self.slo)
            if over[k]:  # the victim itself leaves: it would have suffered while its co-runners ran
                cut += min(left[k], max((left[j] for j in keep), default=0.0))
            if cut < self.budget.min_cut_s:
                continue
            if jobs is not None and jobs[t.arrival.job_id] <= 1:
                self.pdb_refused += 1
                continue
            out.append(_Candidate(cut, not t.arrival.latency_sensitive, t.arrival.work_s - t.remaining_s, t))
        out.sort(key=_Candidate.key, reverse=True)
        return out


def run_variants(arrivals: Sequence[Arrival], nodes: int, horizon_s: float, seed: int, variants: Sequence[str],
                 train_kinds: Sequence[str], progress: bool = True) -> dict[str, dict[str, object]]:
    """Each variant on the same arrivals (the arena loop, tick 10 s); its metrics row by name."""
    means = class_means(train_kinds)
    rows: dict[str, dict[str, object]] = {}
    with job_pods():
        for name in variants:
            view = ArenaView(nodes)
            policy: PlacementPolicy
            mover: MoveController | None = None
            if name == "oracle":
                policy = OraclePolicy(seed, view)
            elif name in VARIANTS:
                policy = BeliefOracle(name, seed, view, *VARIANTS[name], means)
            elif name in MOVE_VARIANTS:
                belief, budget = MOVE_VARIANTS[name]
                policy = BeliefOracle(name, seed, view, *VARIANTS[belief], means)
                mover = MoveController(policy, budget)
            else:
                policy = make_policy(name, seed)
            w0, c0 = time.perf_counter(), time.process_time()
            arena = Arena(list(arrivals), nodes, policy, view, horizon_s=horizon_s, tick_s=10.0, controller=mover)
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
            if mover is not None:
                row |= {k: m[k] for k in ("finished", "evictions", *mover.extra(0, 10.0))}
                # useful utilisation counts the progress a move later throws away; net of it, over the same window
                lost = mover.lost_cpu_s / (nodes * horizon_s)
                useful = row["useful_cpu_utilisation"]
                row["lost_cpu_utilisation"] = lost
                row["useful_cpu_utilisation_net"] = useful - lost if isinstance(useful, float) else None
                total = sum(a.work_s for a in arrivals)
                row["lost_work_fraction"] = mover.lost_work_s / total if total else 0.0
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
    unknown = [v for v in variants
               if v not in VARIANTS and v not in MOVE_VARIANTS and v not in ("kube-default", "oracle", "random")]
    if unknown:
        print(f"arena_knowledge: unknown variant(s) {unknown}; choose from kube-default, oracle, random, "
              f"{', '.join([*VARIANTS, *MOVE_VARIANTS])}", file=sys.stderr)
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
