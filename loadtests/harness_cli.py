"""What the load runs (``borgctl load ramp|soak|chaos``) share: exit codes, the run config
from the command line, the broker-restart record, the lag plot and the final verdict.

Kept apart from ``loadtests.scenario`` so that soak and chaos use it without importing
the ramp's entry point (which imports them).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtests.bench_format import Result
from loadtests.harness import Harness, RunConfig, RunData
from loadtests.run_metrics import BENCH, group_lag_series

EXIT_OK, EXIT_MISSED, EXIT_USAGE, EXIT_KAFKA, EXIT_FAILED = 0, 1, 2, 3, 4


def say(message: str) -> None:
    print(f"load: {message}", file=sys.stderr, flush=True)


def parse_env(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--env {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def base_config(args: argparse.Namespace, phases: list[Any], services: list[str]) -> RunConfig:
    return RunConfig(
        bootstrap=args.bootstrap,
        out_dir=args.out,
        services=services,
        phases=phases,
        keys=args.keys,
        zipf_s=args.zipf_s,
        seed=args.seed,
        task_rate=args.task_rate if args.task_rate is not None else (30.0 if "risk" in services else 0.0),
        ready_timeout_s=args.ready_timeout,
        keep_topics=args.keep_topics,
        extra_env=parse_env(args.env),
        otel=args.otel,
        optional_services=args.services in ("all", "stream"),
    )


def plot_lag(harness: Harness, data: RunData, path: Path, t0: float) -> None:
    from loadtests import plots

    lag = {
        g[len(data.prefix) :]: [(t, float(v)) for t, v in group_lag_series(harness.lag.samples, g)]
        for g in sorted(harness.lag.known_groups)
    }
    plots.series_over_time(
        lag, path, title="Consumer lag per group", ylabel="messages behind", t0=t0, marks=data.phase_starts
    )


def broker_restarts(harness: Harness, mode: str) -> list[Result]:
    """A restarted broker (a shared machine) explains latency spikes: say so, and record it."""
    times = harness.procs.restarts.get("kafka", [])
    if times:
        say(f"WARNING: the broker restarted {len(times)} time(s) during the run; latency and lag include the outage")
    return [Result(BENCH, f"{mode}:kafka", "restarts", float(len(times)), "count")]


def finish(data: RunData, violations: list[str]) -> int:
    if data.error:
        say(f"FAILED: {data.error}")
        return EXIT_FAILED
    for v in violations:
        say(f"MISSED {v}")
    if violations:
        return EXIT_MISSED
    say("all thresholds met")
    return EXIT_OK
