"""Tabular Q-learning of placement in the offline arena, on the regime model's TRAINING kinds only.

One episode = one arena run (:class:`simulator.arena.loop.Arena`) under the ``learned`` policy with
ε-greedy exploration, on arrivals with the training kinds (``to_arrivals``; a new arrival seed per
episode) from either one Google 2011 ``task_events`` part (episode ``e`` uses part ``e mod n`` of the parts
given: the trace's own request and duration shapes; ``borgctl eval arena --quick`` reads parts 0–1, so
training reads later parts) or generated tasks (:func:`simulator.arena.arrivals.synthetic_tasks`).
The nodes' counters go through the live regime path (:class:`~simulator.arena.world.RegimeObserver`),
so the states are the ones the policy meets at evaluation time.

Reward of one placement (credited when the episode ends): minus the slowdown-weighted SLO-violation
seconds the placement caused, divided by ``cost_scale`` s, plus ``util_weight`` × the chosen node's requested
CPU fraction before the pod (packing is rewarded a little, so "spread everything" is not free). A
latency-sensitive task over the SLO in a tick is slowed by one co-runner (the simulator's slowdown is the
worst co-runner, never summed); those seconds × its slowdown are charged to whichever of the two was
placed later: that placement created the pair. So a placement pays for what it does to its co-runners
and for what they do to it, over its whole lifetime.

The discount is 0 (each placement's consequences are credited to it directly; the next pod's state is
not a consequence of this choice in any way the table could learn from): Q(s) is the expected
reward of a placement in state s, learned with a visit-count step size (1/n, floored).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from services.regime.model import RegimeModel
from simulator.arena.arrivals import Arrival, TraceTask, synthetic_tasks, tasks_from_events, to_arrivals
from simulator.arena.aware import ArenaView, TaskPod
from simulator.arena.learned import LearnedPolicy, PlacementModel
from simulator.arena.loop import Arena, Finished
from simulator.arena.world import ArenaCluster, RegimeObserver
from simulator.workloads import SENSITIVITY_MATRIX

COST_SCALE_S: Final = 100.0


@dataclass(frozen=True)
class TrainConfig:
    episodes: int = 60
    seed: int = 1
    features: str = "extender+pods"
    nodes: int = 20
    horizon_s: float = 1800.0
    jobs: int = 400
    """Synthetic jobs generated per episode (then sampled to ``target_load``)."""
    target_load: float = 0.6
    tick_s: float = 10.0
    epsilon_start: float = 0.3
    epsilon_end: float = 0.02
    alpha_min: float = 0.02
    cost_scale_s: float = COST_SCALE_S
    util_weight: float = 0.1


@dataclass
class EpisodeResult:
    episode: int
    epsilon: float
    decisions: int
    mean_reward: float
    slo_violation_task_s: float
    useful_cpu_utilisation: float
    states: int
    wall_s: float


class CreditArena(Arena):
    """The arena loop, plus who caused each latency-sensitive violation (see the module docstring)."""

    cost: dict[int, float]

    def _advance(self, t_s: float, finished: list[Finished]) -> float:
        dt = self.tick_s
        for i, tasks in enumerate(self.residents):
            if len(tasks) < 2:
                continue
            ex = self.view.excess[i]
            classes = self.view.classes[i]
            for k, t in enumerate(tasks):
                if not (t.arrival.latency_sensitive and t.slowdown > self.slo):
                    continue
                per = 1.0 + SENSITIVITY_MATRIX[classes[k]] @ ex.T
                per[k] = 0.0
                j = int(per.argmax())
                ran = min(dt, t.remaining_s * t.slowdown)
                later = tasks[max(k, j)]  # residents keep placement order
                self.cost[id(later.pod)] = self.cost.get(id(later.pod), 0.0) + ran * t.slowdown
        return super()._advance(t_s, finished)


def trace_parts(directory: Path, first: int, count: int, max_duration_s: float = 6 * 3600.0) -> list[list[TraceTask]]:
    """Tasks of each of the part files ``first .. first + count - 1`` (name order) of a 2011 task_events dir."""
    import polars as pl

    from training.ingest import TASK_EVENTS_2011, part_files

    fmt, files = part_files(directory)
    if fmt != "csv" or len(files) < first + count:
        raise ValueError(f"{directory}: need {first + count} CSV task_events parts, found {len(files)} {fmt}")
    cols = ["time_us", "job_id", "task_index", "event_type", "scheduling_class", "priority", "cpu_request",
            "memory_request"]
    return [tasks_from_events(pl.read_csv(p, has_header=False, schema=TASK_EVENTS_2011).select(cols).rows(),
                              max_duration_s) for p in files[first:first + count]]


def episode_arrivals(cfg: TrainConfig, kinds: Sequence[str], seed: int,
                     tasks: Sequence[TraceTask] | None = None) -> list[Arrival]:
    """Arrivals of one episode: ``tasks`` (one trace part) sampled with ``seed``, else generated ones."""
    source = "trace" if tasks is not None else f"synthetic:{cfg.jobs}"
    if tasks is None:
        tasks = synthetic_tasks(cfg.jobs, seed=seed, span_s=cfg.horizon_s)
    arrivals, _ = to_arrivals(tasks, kinds=kinds, nodes=cfg.nodes, seed=seed, horizon_s=cfg.horizon_s,
                              target_load=cfg.target_load, source=source)
    return arrivals


@dataclass
class _Decisions:
    rows: list[tuple[TaskPod, str, float]] = field(default_factory=list)

    def __call__(self, pod: TaskPod, key: str, util: float) -> None:
        self.rows.append((pod, key, util))


def run_episode(model: PlacementModel, regime: RegimeModel | None, cfg: TrainConfig, kinds: Sequence[str],
                seed: int, epsilon: float, *, learn: bool,
                tasks: Sequence[TraceTask] | None = None) -> tuple[float, int, float, float]:
    """One arena run; returns (mean reward per placement, placements, SLO-violation task-s, useful util).
    With ``learn`` the table is updated with every placement's reward. ``regime=None`` skips the regime
    path (every label absent): only for tests that must run in seconds."""
    arrivals = episode_arrivals(cfg, kinds, seed, tasks)
    view = ArenaView(cfg.nodes)
    cluster = observer = None
    if regime is not None:
        cluster = ArenaCluster(cfg.nodes, seed, interval_ms=int(cfg.tick_s * 1000))
        observer = RegimeObserver(regime, [s.name for s in cluster.specs])
    decisions = _Decisions()
    policy = LearnedPolicy(seed, view, model, epsilon=epsilon, record=decisions)
    arena = CreditArena(arrivals, cfg.nodes, policy, view, horizon_s=cfg.horizon_s, tick_s=cfg.tick_s,
                        cluster=cluster, observer=observer)
    arena.cost = {}
    out = arena.run()
    cost = arena.cost
    total = 0.0
    for pod, key, util in decisions.rows:
        r = -cost.get(id(pod), 0.0) / cfg.cost_scale_s + cfg.util_weight * util
        total += r
        if learn:
            model.update(key, r)
    h = out.horizon_ticks
    n = len(decisions.rows)
    return total / max(n, 1), n, float(out.violation_s.sum()), float(out.useful[:h].mean())


def train(cfg: TrainConfig, regime: RegimeModel | None, kinds: Sequence[str],
          progress: Callable[[str], None],
          parts: Sequence[Sequence[TraceTask]] = ()) -> tuple[PlacementModel, list[EpisodeResult]]:
    """ε-greedy tabular Q-learning over ``cfg.episodes`` arena episodes (arrival seeds seed*1000 + e;
    episode e on ``parts[e % len(parts)]``, generated arrivals when ``parts`` is empty)."""
    model = PlacementModel(cfg.features, alpha_min=cfg.alpha_min)
    curve: list[EpisodeResult] = []
    for e in range(cfg.episodes):
        frac = e / max(cfg.episodes - 1, 1)
        eps = cfg.epsilon_start + (cfg.epsilon_end - cfg.epsilon_start) * frac
        started = time.perf_counter()
        tasks = parts[e % len(parts)] if parts else None
        mean_r, n, viol, useful = run_episode(model, regime, cfg, kinds, cfg.seed * 1000 + e, eps, learn=True,
                                              tasks=tasks)
        res = EpisodeResult(e, eps, n, mean_r, viol, useful, len(model.values), time.perf_counter() - started)
        curve.append(res)
        progress(f"episode {e + 1}/{cfg.episodes}: eps {eps:.3f}, reward/placement {mean_r:+.4f}, "
                 f"SLO-violation {viol:.0f} task-s, {n} placements, {res.states} states ({res.wall_s:.1f}s)")
    return model, curve
