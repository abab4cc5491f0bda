"""Arena metrics in the bench result format (``bench: "arena"``, ``case: <policy>``) and the plots."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from contracts.models import WORKLOAD_CLASSES
from simulator.arena.loop import ArenaOutcome

BENCH: Final = "arena"


def _mean_p95(values: Sequence[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()), float(np.quantile(arr, 0.95))


def metrics(out: ArenaOutcome) -> dict[str, float | None]:
    """Every metric of one policy run (None when there is nothing to measure)."""
    h = out.horizon_ticks
    m: dict[str, float | None] = {
        "slo_violation_task_s": float(out.violation_s.sum()),
        "mean_cpu_utilisation": float(out.util[:h].mean()) if len(out.util) else None,
        "useful_cpu_utilisation": float(out.useful[:h].mean()) if len(out.useful) else None,
        "nodes_used": float(out.nodes_used[:h].mean()) if len(out.nodes_used) else None,
        "evictions": out.extra.get("evictions", 0.0),
        "referee_decisions_per_min": 0.0,
        "actions_per_min": 0.0,
        "placements": float(out.placements),
        "finished": float(len(out.finished)),
        "unfinished": float(out.unfinished),
        "unplaced": float(out.unplaced),
        "decisions_per_min": out.decisions / (out.ticks * out.tick_s / 60.0) if out.ticks else None,
        "policy_cpu_us_per_decision": out.policy_cpu_s / out.decisions * 1e6 if out.decisions else None,
        "model_cpu_us_per_decision": out.model_cpu_s / out.decisions * 1e6 if out.decisions else 0.0,
    }
    by_class: dict[str, list[float]] = {c: [] for c in WORKLOAD_CLASSES}
    ls: list[float] = []
    batch: list[float] = []
    batch_elapsed = batch_work = 0.0
    wait: list[float] = []
    for f in out.finished:
        s = f.slowdown
        by_class[f.arrival.workload_class].append(s)
        wait.append(f.start_s - f.arrival.submit_s)
        if f.arrival.latency_sensitive:
            ls.append(s)
        else:
            batch.append(s)
            batch_elapsed += f.finish_s - f.arrival.submit_s
            batch_work += f.arrival.work_s
    for name, values in (*by_class.items(), ("latency_sensitive", ls), ("batch", batch)):
        mean, p95 = _mean_p95(values)
        m[f"slowdown_mean_{name}"] = mean
        m[f"slowdown_p95_{name}"] = p95
    m["completion_inflation"] = batch_elapsed / batch_work if batch_work else None
    m["mean_wait_s"] = float(np.mean(wait)) if wait else None
    m["ls_tasks_violating_fraction"] = (float(np.mean([f.violation_s > 0 for f in out.finished
                                                        if f.arrival.latency_sensitive]))
                                        if ls else None)
    m |= out.extra  # the orchestrator's counts (evictions, actions per kind, its CPU per referee decision)
    if out.observer is not None:
        m["model_coverage"] = out.observer.coverage()
        m["model_interference_mae"] = out.observer.interference_mae()
        m["model_missed_slo_fraction"] = out.observer.missed_slo_fraction()
        m["model_selective_accuracy"] = out.observer.selective_accuracy()
    return m


UNITS: Final = {"slo_violation_task_s": "task_s", "mean_cpu_utilisation": "fraction",
                "useful_cpu_utilisation": "fraction", "nodes_used": "nodes",
                "evictions": "count", "referee_decisions_per_min": "per_min_simulated",
                "actions_per_min": "per_min_simulated", "orchestrator_cpu_us_per_decision": "us",
                "placements": "count", "finished": "count", "unfinished": "count",
                "unplaced": "count", "decisions_per_min": "per_min_simulated",
                "policy_cpu_us_per_decision": "us", "model_cpu_us_per_decision": "us",
                "completion_inflation": "ratio", "mean_wait_s": "s", "ls_tasks_violating_fraction": "fraction",
                "model_coverage": "fraction", "model_interference_mae": "slowdown",
                "model_missed_slo_fraction": "fraction", "model_selective_accuracy": "fraction",
                "violation_attributed_task_s": "task_s"}


def rows(case: str, m: dict[str, float | None]) -> list[dict[str, Any]]:
    return [{"bench": BENCH, "case": case, "metric": k, "value": float(v),
             "unit": UNITS.get(k, "fraction" if k.startswith("violation_share_") else "ratio")}
            for k, v in m.items() if v is not None]


def plot(outcomes: Sequence[ArenaOutcome], out_dir: Path, title: str) -> list[Path]:
    """CDF of per-task slowdown and SLO-violation task-seconds over time, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    fig, ax = plt.subplots(figsize=(6, 4))
    for out in outcomes:
        s = np.sort([f.slowdown for f in out.finished])
        if len(s):
            ax.plot(s, np.arange(1, len(s) + 1) / len(s), label=out.policy)
    ax.axvline(1.25, color="grey", linestyle=":", linewidth=1, label="SLO 1.25x")
    ax.set_xlabel("task slowdown (running time / work)")
    ax.set_ylabel("fraction of finished tasks")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    cdf = out_dir / "slowdown_cdf.png"
    fig.savefig(cdf, dpi=110)
    plt.close(fig)
    written.append(cdf)

    fig, ax = plt.subplots(figsize=(6, 4))
    for out in outcomes:
        minutes = np.arange(len(out.violation_s)) * out.tick_s / 60.0
        ax.plot(minutes, np.cumsum(out.violation_s), label=out.policy)
    ax.set_xlabel("arena time (min)")
    ax.set_ylabel("cumulative SLO-violation task-seconds")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    over = out_dir / "violations_over_time.png"
    fig.savefig(over, dpi=110)
    plt.close(fig)
    written.append(over)
    return written
