"""The chaos run's timeline PNG: consumer lag and throughput over time, each fault shaded until it recovered."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

from contracts.topics import Topic

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from contracts.topics import REGIMES_TOPIC
from loadtests.run_metrics import group_lag_series

if TYPE_CHECKING:
    from loadtests.chaos_faults import Fault
    from loadtests.harness import Harness, RunData


def rates(progress: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """(t, cumulative count) → (t, per-second rate between consecutive points)."""
    return [(t1, (n1 - n0) / (t1 - t0)) for (t0, n0), (t1, n1) in itertools.pairwise(progress) if t1 > t0]


def timeline(harness: Harness, data: RunData, faults: Sequence[Fault], path: Path) -> None:
    t0 = min(data.phase_starts.values(), default=data.started)
    fig, (lag_ax, rate_ax) = plt.subplots(2, 1, figsize=(13, 7), sharex=True)
    for group in sorted(harness.lag.known_groups):
        lags = group_lag_series(harness.lag.samples, group)
        if lags:
            lag_ax.plot([t - t0 for t, _ in lags], [v for _, v in lags], label=group[len(data.prefix):], lw=1)
    lag_ax.set_ylabel("consumer lag (messages)")
    lag_ax.set_yscale("symlog", linthresh=100)
    series: dict[str, list[tuple[float, float]]] = {"nodestate.v1 sent": rates(data.progress)}
    for topic in (Topic.FEATURES, REGIMES_TOPIC, Topic.ACTIONS):
        per_second = harness.observer.series[topic].per_second
        if per_second:  # a second without output is a 0, not a gap to draw a line across
            first, last = min(per_second), max(per_second)
            series[f"{topic} out"] = [(float(s), float(per_second.get(s, 0))) for s in range(first, last + 1)]
    for label, pts in series.items():
        if pts:
            rate_ax.plot([t - t0 for t, _ in pts], [v for _, v in pts], label=label, lw=1)
    rate_ax.set_ylabel("messages / s")
    rate_ax.set_yscale("symlog", linthresh=10)
    rate_ax.set_xlabel("seconds since the load started")
    for fault in faults:
        if fault.t_inject is None:
            continue
        start = fault.t_inject - t0
        end = (fault.t_recovered if fault.t_recovered is not None else data.ended) - t0
        color = "tab:green" if fault.t_recovered is not None else "tab:red"
        for ax in (lag_ax, rate_ax):
            ax.axvspan(start, end, color=color, alpha=0.12)
            ax.axvline(start, color=color, lw=0.8)
        lag_ax.annotate(fault.name, (start, 1), xycoords=("data", "axes fraction"), rotation=90, va="top",
                        fontsize=7)
    for name, t in data.phase_starts.items():
        rate_ax.axvline(t - t0, color="grey", linestyle=":", alpha=0.6)
        rate_ax.annotate(name, (t - t0, 0.02), xycoords=("data", "axes fraction"), rotation=90, fontsize=7)
    for ax in (lag_ax, rate_ax):
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    lag_ax.set_title("Chaos run: faults (shaded until recovered; red = not recovered)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
