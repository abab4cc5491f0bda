"""PNG plots of a load run (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def _rows(rows: Sequence[dict[str, Any]], case: str, metric: str) -> list[tuple[float, float]]:
    return sorted((float(r["offered"]), float(r["value"])) for r in rows
                  if r["case"] == case and r["metric"] == metric and "offered" in r)


def throughput_vs_offered(rows: Sequence[dict[str, Any]], mode: str, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    offered = sorted({float(r["offered"]) for r in rows if "offered" in r})
    if offered:
        ax.plot(offered, offered, "k:", label="offered")
    for case, label, style in ((f"{mode}:load", "sent (driver)", "s--"), (f"{mode}:pipeline", "achieved", "o-")):
        pts = _rows(rows, case, "sent" if case.endswith(":load") else "throughput")
        if pts:
            ax.plot(*zip(*pts, strict=True), style, label=label)
    stages = sorted({r["case"] for r in rows if r["case"].startswith(f"{mode}:stage:") and r["metric"] == "throughput"})
    for case in stages:
        if case.endswith(":features"):
            continue
        pts = _rows(rows, case, "throughput")
        if pts:
            ax.plot(*zip(*pts, strict=True), ".-", alpha=0.7, label=case.split(":", 2)[2] + " (its input)")
    ax.set_xlabel("offered NodeState/s")
    ax.set_ylabel("msg/s")
    ax.set_title("Throughput vs offered load")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def p99_vs_offered(rows: Sequence[dict[str, Any]], mode: str, path: Path, threshold_ms: float | None) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    cases = sorted({r["case"] for r in rows if r["case"].startswith(f"{mode}:e2e:") and r["metric"] == "latency_p99"})
    for case in cases:
        pts = _rows(rows, case, "latency_p99")
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", label=case.split(":", 2)[2])
    if threshold_ms is not None:
        ax.axhline(threshold_ms, color="r", linestyle="--", label=f"threshold {threshold_ms:g} ms")
    ax.set_xlabel("offered NodeState/s")
    ax.set_ylabel("p99 end-to-end latency (ms)")
    ax.set_yscale("log")
    ax.set_title("p99 latency (output produced − input_ts_ms) vs offered load")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def series_over_time(
    series: dict[str, list[tuple[float, float]]],
    path: Path,
    *,
    title: str,
    ylabel: str,
    t0: float,
    marks: dict[str, float] | None = None,
) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, pts in sorted(series.items()):
        if pts:
            ax.plot([t - t0 for t, _ in pts], [v for _, v in pts], label=label)
    for name, t in (marks or {}).items():
        ax.axvline(t - t0, color="grey", linestyle=":", alpha=0.6)
        ax.annotate(name, (t - t0, 1), xycoords=("data", "axes fraction"), rotation=90, va="top", fontsize=7)
    ax.set_xlabel("seconds since the load started")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
