"""`borgctl load soak`: a steady rate for minutes; every produced NodeState accounted for, memory flat.

Phases: warm-up, the soak proper, then a ``flush`` of one window hop plus two intervals
at the same rate, which closes every node's last window (see loadtests/accounting.py for
the exact loss rule). The run then drains until every group has caught up and outputs
went quiet. Memory flatness is the least-squares RSS slope of each service over the
second half of the soak proper, and the growth it implies over that half.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from loadtests.accounting import FLUSH_PHASE, Accounting, StageAccounting, account, account_stage, read_ticks
from loadtests.bench_format import Result, write_results
from loadtests.harness import Harness, KafkaUnreachableError, RunData, rss_points, write_timeline
from loadtests.harness_cli import EXIT_KAFKA, base_config, broker_restarts, finish, plot_lag, say
from loadtests.load_plan import Phase, Thresholds, Window, check_soak, second_half_growth, settle_s
from loadtests.observe import PER_WINDOW_OUTPUTS
from loadtests.run_metrics import BENCH, WindowMetrics

HOP_S = 10
"""The features service's window hop (featurelib.node.schema.HOP_MS): the flush must close one."""
QUICK_SOAK_MIN = 0.75
NOT_CHECKED = ("driver", "runner", "kafka", "system")
"""Processes whose RSS is reported but not held to --max-rss-growth-mb."""


def soak_phases(rate: float, minutes: float, warmup_s: float, interval_ms: int) -> list[Phase]:
    flush_s = HOP_S + 2 * interval_ms / 1000.0
    phases = [Phase("warmup", rate, warmup_s, interval_ms)] if warmup_s > 0 else []
    return [*phases, Phase("soak", rate, minutes * 60.0, interval_ms), Phase(FLUSH_PHASE, rate, flush_s, interval_ms)]


def soak_window(data: RunData, phases: list[Phase], rate: float) -> Window | None:
    start = data.phase_starts.get("soak")
    if start is None:
        return None
    end = data.phase_starts.get(FLUSH_PHASE, data.ended)
    soak = next(p for p in phases if p.name == "soak")
    return Window(0, rate, start + settle_s(soak.seconds), min(end, start + soak.seconds))


def rss_growth(harness: Harness, data: RunData, window: Window) -> dict[str, tuple[float, float]]:
    """Per process: (slope MB/min, growth MB) over the second half of the soak proper."""
    start = data.phase_starts.get("soak", window.start_s)
    out: dict[str, tuple[float, float]] = {}
    for name in harness.procs.names():
        slope_s, growth = second_half_growth(rss_points(harness, name, start, window.end_s))
        out[name] = (slope_s * 60.0, growth)
    return out


def run_soak(args: argparse.Namespace, services: list[str], th: Thresholds) -> int:
    minutes = min(args.minutes, QUICK_SOAK_MIN) if args.quick else args.minutes
    warmup = args.warmup if args.warmup is not None else 12.0
    phases = soak_phases(args.rate, minutes, warmup, args.interval_ms)
    config = base_config(args, phases, services)
    config.keep_windows = True
    config.ticks_out = args.out / "ticks.jsonl"
    config.drain_s = 30.0 if args.quick else 90.0
    config.quiet_s = 3.0
    harness = Harness(config, say=say)
    say(f"soak {args.rate:,.0f} msg/s for {minutes:g} min (+{warmup:g}s warm-up, flush); out {args.out}")
    try:
        data = asyncio.run(harness.run())
    except KafkaUnreachableError as exc:
        say(str(exc))
        return EXIT_KAFKA
    services = data.running(services)
    window = soak_window(data, phases, args.rate)
    rows: list[Result] = []
    if window is not None:
        rows, _ = WindowMetrics(harness, data, services, "soak").measure(window)
    accounting = soak_accounting(harness, data, services, config.ticks_out)
    stages = stage_accounting(harness, services) if accounting is not None else []
    lost = accounting.lost + sum(s.missing for s in stages) if accounting is not None else None
    if accounting is not None:
        rows.append(Result(BENCH, "soak:pipeline", "lost", float(lost or 0), "messages", offered=args.rate))
        for key, value in accounting.summary().items():
            rows.append(Result(BENCH, "soak:accounting", key, float(value), "messages", offered=args.rate))
        for st in stages:
            for key, value in asdict(st).items():
                if key != "stage":
                    metric = "lost" if key == "missing" else key
                    rows.append(Result(BENCH, f"soak:accounting:{st.stage}", metric, float(value), "messages",
                                       offered=args.rate))
    growth = rss_growth(harness, data, window) if window is not None else {}
    for name, (slope_min, grown) in sorted(growth.items()):
        rows.append(Result(BENCH, f"soak:proc:{name}", "rss_slope", round(slope_min, 3), "MB/min", offered=args.rate))
        rows.append(Result(BENCH, f"soak:proc:{name}", "rss_growth", round(grown, 3), "MB", offered=args.rate))
    checked = {n: g for n, (_, g) in growth.items() if n not in NOT_CHECKED}
    violations = check_soak(lost, checked, harness.observer.dead_letter_count(), th)
    if data.aborted:
        violations.append(f"soak: stopped early ({data.aborted})")
    if window is None:
        violations.append("soak: the soak phase never started")
    rows += broker_restarts(harness, "soak")
    out_rows = [r.row() for r in rows]
    write_results(args.out / "results.json", out_rows)
    extra: dict[str, Any] = {"mode": "soak", "rate": args.rate, "minutes": minutes, "services": services,
                             "violations": violations, "thresholds": th.__dict__}
    if accounting is not None:
        extra["accounting"] = accounting.summary()
        worst = sorted(accounting.lost_by_node.items(), key=lambda kv: -kv[1])[:20]
        extra["stage_accounting"] = [asdict(s) for s in stages]
        doc = {"rule": "loadtests/accounting.py", **accounting.summary(), "worst_nodes": worst,
               "stages": [asdict(s) for s in stages], "lost_total": lost}
        (args.out / "accounting.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    write_timeline(args.out / "timeline.json", harness, data, extra)
    plot_soak(harness, data, args.out)
    print_soak(rows, accounting, stages, growth, data)
    return finish(data, violations)


def soak_accounting(
    harness: Harness, data: RunData, services: list[str], ticks_path: Path | None
) -> Accounting | None:
    if "features" not in services or ticks_path is None or not ticks_path.exists() or data.error:
        return None
    with ticks_path.open("rb") as fh:
        ticks = read_ticks(fh)
    return account(ticks, harness.observer.windows, harness.observer.dead_nodestates)


def stage_accounting(harness: Harness, services: list[str]) -> list[StageAccounting]:
    """Every FeatureVector answered by each per-window stage that ran (or dead-lettered by it)."""
    obs = harness.observer
    out = []
    for topic, stage in PER_WINDOW_OUTPUTS.items():
        if stage in services:
            out.append(account_stage(stage, obs.windows, obs.window_outputs.get(topic, set()),
                                     obs.dead_windows.get(stage, set())))
    return out


def plot_soak(harness: Harness, data: RunData, out: Path) -> None:
    from loadtests import plots

    t0 = min(data.phase_starts.values(), default=data.started)
    plot_lag(harness, data, out / "lag.png", t0)
    shown = [n for n in harness.procs.names() if n not in ("kafka", "system")]
    rss = {n: [(s.t, s.rss_mb) for s in harness.procs.series(n)] for n in shown}
    plots.series_over_time(rss, out / "rss.png", title="RSS per process", ylabel="MB", t0=t0, marks=data.phase_starts)
    rates = {t: [(float(sec), float(n)) for sec, n in sorted(s.per_second.items())]
             for t, s in harness.observer.series.items()}
    sent = data.progress
    rates["nodestate.v1 (sent)"] = [
        (t1, (n1 - n0) / (t1 - t0_)) for (t0_, n0), (t1, n1) in itertools.pairwise(sent) if t1 > t0_
    ]
    plots.series_over_time(rates, out / "throughput.png", title="Messages per second", ylabel="msg/s", t0=t0,
                           marks=data.phase_starts)


def print_soak(rows: list[Result], accounting: Accounting | None, stages: list[StageAccounting],
               growth: dict[str, tuple[float, float]], data: RunData) -> None:
    for r in rows:
        if r.case in ("soak:pipeline", "soak:e2e", "soak:load") or r.metric == "lag_max":
            print(f"{r.case:<28} {r.metric:<12} {r.value:>12,.1f} {r.unit}")
    if accounting is not None:
        s = accounting.summary()
        print(f"accounting: produced {s['produced']:,}, dead-lettered {s['dead_lettered']:,}, windows "
              f"{s['windows']:,}, LOST {s['lost']:,} (short windows {s['lost_short_windows']:,}, uncovered "
              f"{s['lost_uncovered']:,}), unexpected {s['unexpected']:,}")
    else:
        print("accounting: not done (no features stage ran)")
    for st in stages:
        print(f"accounting {st.stage}: {st.expected:,} windows, answered {st.answered:,}, dead-lettered "
              f"{st.dead_lettered:,}, MISSING {st.missing:,}, unexpected {st.unexpected:,}")
    for name, (slope_min, grown) in sorted(growth.items()):
        print(f"rss {name:<20} slope {slope_min:+8.2f} MB/min, second-half growth {grown:+8.1f} MB")
    if data.aborted:
        print(f"stopped early: {data.aborted}")
