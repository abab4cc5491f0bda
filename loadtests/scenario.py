"""`borgctl load {ramp,soak}`: start the pipeline, drive NodeState load, measure it, check thresholds.

    borgctl load ramp --steps 1000,5000,10000,20000 --hold 30 --out DIR
                      [--max-p99-ms 250] [--min-throughput-ratio 0.9] [--quick]
    borgctl load soak --rate 2000 --minutes 10 --out DIR [--max-lost 0] [--max-rss-growth-mb 50]
    borgctl load chaos [--quick] --out DIR   (faults in turn under steady load: loadtests/chaos.py)

Each run starts the stream and decision services that exist in this build (``--services``)
as subprocesses in a fresh topic namespace, drives synthetic NodeState in real time
(``loadtests.driver``), reads every output topic with a group-less consumer, samples the
lag of every consumer group and the CPU/RSS of every process, stops by itself
(schedule end, ``--abort-lag-s``, or a hard deadline) and always tears everything down.
Output in DIR: ``results.json`` (the one benchmark format), ``timeline.json``, PNG plots
and ``logs/``. See docs/loadtests.md.

Exit status: 0 every threshold met, 1 a threshold missed, 2 usage, 3 Kafka unreachable,
4 the pipeline failed (a service did not start or died, or the driver failed).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from loadtests.bench_format import Result, write_results
from loadtests.harness import Harness, KafkaUnreachableError, RunData, write_timeline
from loadtests.harness_cli import (
    EXIT_KAFKA,
    EXIT_USAGE,
    base_config,
    broker_restarts,
    finish,
    parse_env,
    plot_lag,
    say,
)
from loadtests.load_plan import (
    QUICK_HOLD_S,
    QUICK_WARMUP_S,
    StepOutcome,
    Thresholds,
    Window,
    check_step,
    max_sustained,
    parse_steps,
    ramp_phases,
    settle_s,
    step_windows,
)
from loadtests.procs import select_services
from loadtests.profiling import ProfileRequest, start_record, summarise
from loadtests.run_metrics import BENCH, WindowMetrics


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, required=True, help="output directory (results.json, PNGs, logs/)")
    p.add_argument("--quick", action="store_true", help="a run under two minutes")
    p.add_argument("--services", default="all",
                   help="all (stream + decision plane, default) | stream | none | comma list of service names")
    p.add_argument("--keys", choices=["uniform", "zipf"], default="uniform", help="NodeState key distribution")
    p.add_argument("--zipf-s", type=float, default=1.1, help="--keys zipf exponent")
    p.add_argument("--interval-ms", type=int, default=1000, help="sampling interval of every simulated node")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--task-rate", type=float, default=None,
                   help="TaskEvents/s alongside the NodeState (default 30 when risk runs, else 0)")
    p.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    p.add_argument("--ready-timeout", type=float, default=120.0, help="seconds for the services to become ready")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra env for every service")
    p.add_argument("--otel", action="store_true", help="keep OTEL_EXPORTER_OTLP_ENDPOINT for the services")
    p.add_argument("--keep-topics", action="store_true", help="leave the run's topics on the broker")
    p.add_argument("--max-dead-letters", type=int, default=None, help="threshold: dead letters per step / soak")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="borgctl load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    ramp = sub.add_parser("ramp", help="ramp the offered load in steps and hold each")
    ramp.add_argument("--steps", default="1000,5000,10000,20000", help="offered NodeState/s per step (1k = 1000)")
    ramp.add_argument("--hold", type=float, default=30.0, help="seconds per step")
    ramp.add_argument("--warmup", type=float, default=None, help="seconds at the first step's rate before step 1")
    ramp.add_argument("--abort-lag-s", type=float, default=30.0,
                      help="stop the ramp when a stage is this many seconds of offered load behind")
    ramp.add_argument("--max-p99-ms", type=float, default=None, help="threshold: end-to-end p99 per step")
    ramp.add_argument("--max-decision-p99-ms", type=float, default=None, help="threshold: decision p99 per step")
    ramp.add_argument("--min-throughput-ratio", type=float, default=None,
                      help="threshold: achieved / offered per step (e.g. 0.9)")
    ramp.add_argument("--profile", action="append", default=[], metavar="SERVICE@RATE",
                      help="py-spy profile of SERVICE during step RATE (repeatable; needs py-spy installed)")
    ramp.add_argument("--reference", action="store_true",
                      help="first measure the raw aiokafka pass-through rate (loadtests.bench_reference)")
    _common(ramp)
    soak = sub.add_parser("soak", help="a steady rate for minutes; no lost messages, flat memory")
    soak.add_argument("--rate", type=float, required=True, help="NodeState/s")
    soak.add_argument("--minutes", type=float, default=10.0)
    soak.add_argument("--warmup", type=float, default=None, help="seconds at the rate before the soak proper")
    soak.add_argument("--max-lost", type=int, default=0, help="threshold: lost messages (default 0)")
    soak.add_argument("--max-rss-growth-mb", type=float, default=None,
                      help="threshold: RSS growth of any service over the second half (MB)")
    _common(soak)
    from loadtests.chaos import add_parser as add_chaos

    add_chaos(sub)
    return parser


# --- ramp ----------------------------------------------------------------------------------


def lag_abort(abort_lag_s: float, phases: list[Any]) -> Any:
    """should_abort for the harness: a group further behind than abort_lag_s of the current offered rate."""

    def check(harness: Harness, data: RunData) -> str | None:
        current = [p for p in phases if p.name in data.phase_starts]
        if not current:
            return None
        rate = current[-1].rate
        behind: dict[str, int] = defaultdict(int)
        for (group, _topic), sample in harness.lag.latest().items():
            behind[group] += sample.lag
        for group, lag in sorted(behind.items()):
            if lag > abort_lag_s * rate:
                name = group[len(data.prefix):]
                return f"{name} is {lag:,} messages behind (> {abort_lag_s:g}s of {rate:,.0f}/s)"
        return None

    return check


def clip_windows(windows: list[Window], data: RunData) -> list[Window]:
    """Windows of the steps that ran, cut where the load stopped (an aborted step is measured as far as it ran)."""
    end = float(data.done["t"]) if data.done else data.ended
    out = []
    for w in windows:
        if f"step-{round(w.offered)}" not in data.phase_starts or w.start_s >= end:
            continue
        out.append(Window(w.step, w.offered, w.start_s, min(w.end_s, end)))
    return out


class Profiler:
    """Starts py-spy on a service when its requested step starts; collects the summaries afterwards."""

    def __init__(self, requests: list[ProfileRequest], hold_s: float, out: Path) -> None:
        self.requests = requests
        self.hold_s = hold_s
        self.out = out
        self.running: list[tuple[ProfileRequest, subprocess.Popen[bytes], Path]] = []
        self.tasks: list[asyncio.Task[None]] = []

    def on_phase(self, harness: Harness, data: RunData, phase: str) -> None:
        for req in self.requests:
            if phase == f"step-{req.rate}":
                self.tasks.append(asyncio.get_running_loop().create_task(self._start(req, data)))

    async def _start(self, req: ProfileRequest, data: RunData) -> None:
        await asyncio.sleep(settle_s(self.hold_s))
        pid = data.pids.get(req.service)
        if pid is None:
            say(f"profile: {req.service} is not running; not profiled")
            return
        raw = self.out / f"profile-{req.service}-{req.rate}.raw"
        proc = start_record(pid, self.hold_s - settle_s(self.hold_s), raw)
        if proc is None:
            say("profile: py-spy not found (pip install py-spy==0.4.3 into the venv)")
            return
        say(f"profile: py-spy on {req.service} (pid {pid}) during step {req.rate:,}")
        self.running.append((req, proc, raw))

    def collect(self) -> None:
        for task in self.tasks:
            task.cancel()
        for req, proc, raw in self.running:
            try:
                _, err = proc.communicate(timeout=self.hold_s + 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate(timeout=5)
            text = raw.read_text(errors="replace") if raw.exists() else ""
            summary = self.out / f"profile-{req.service}-{req.rate}.txt"
            summary.write_text(summarise(text) + ("\npy-spy: " + err.decode(errors="replace") if not text else ""))
            say(f"profile: {summary}")


def run_ramp(args: argparse.Namespace, services: list[str], th: Thresholds) -> int:
    steps = parse_steps(args.steps)
    hold = min(args.hold, QUICK_HOLD_S) if args.quick else args.hold
    warmup = args.warmup if args.warmup is not None else (QUICK_WARMUP_S if args.quick else 12.0)
    phases = ramp_phases(steps, hold, warmup_s=warmup, interval_ms=args.interval_ms)
    config = base_config(args, phases, services)
    config.drain_s = 8.0 if args.quick else 20.0
    config.ready_timeout_s = args.ready_timeout
    profiler = Profiler([ProfileRequest.parse(p) for p in args.profile], hold, args.out)
    harness = Harness(config, should_abort=lag_abort(args.abort_lag_s, phases), on_phase=profiler.on_phase, say=say)
    reference: list[Result] = []
    if args.reference:
        reference = reference_rows(args.bootstrap, args.quick)
    say(f"ramp {', '.join(f'{s:,}' for s in steps)} msg/s, {hold:g}s each (+{warmup:g}s warm-up); out {args.out}")
    try:
        data = asyncio.run(harness.run())
    except KafkaUnreachableError as exc:
        say(str(exc))
        return EXIT_KAFKA
    finally:
        profiler.collect()
    windows = clip_windows(step_windows(phases, data.phase_starts), data)
    services = data.running(services)
    metrics = WindowMetrics(harness, data, services, "ramp")
    rows: list[Result] = []
    outcomes: list[StepOutcome] = []
    for w in windows:
        w_rows, outcome = metrics.measure(w)
        rows += w_rows
        outcomes.append(outcome)
    violations = [v for o in outcomes for v in check_step(o, th)]
    skipped = [s for s in steps if f"step-{s}" not in data.phase_starts]
    if skipped and th.any():
        violations.append(f"steps not run: {', '.join(f'{s:,}' for s in skipped)} ({data.aborted or 'aborted'})")
    best = max_sustained(outcomes, th) if th.any() else None
    if best is not None:
        rows.append(Result(BENCH, "ramp:pipeline", "max_sustained", best, "msg/s"))
    rows += reference + versus_reference(rows, reference) + broker_restarts(harness, "ramp")
    out_rows = [r.row() for r in rows]
    write_results(args.out / "results.json", out_rows)
    write_timeline(args.out / "timeline.json", harness, data, {
        "mode": "ramp", "steps": steps, "hold_s": hold, "services": services,
        "windows": [[w.offered, w.start_s, w.end_s] for w in windows],
        "violations": violations, "thresholds": th.__dict__,
    })
    plot_ramp(harness, data, out_rows, args.out, th)
    print_summary(outcomes, out_rows, data)
    return finish(data, violations)


def reference_rows(bootstrap: str, quick: bool) -> list[Result]:
    from loadtests.bench_reference import passthrough

    say("reference: raw aiokafka pass-through (consume → produce, no processing)")
    try:
        return passthrough(bootstrap, quick)
    except Exception as exc:  # the reference is context, not the run
        say(f"reference failed: {type(exc).__name__}: {exc}")
        return []


def versus_reference(rows: list[Result], reference: list[Result]) -> list[Result]:
    """Each saturated stage's capacity as a fraction of the raw pass-through rate."""
    ceiling = next((r.value for r in reference if r.case == "aiokafka-passthrough"), None)
    if not ceiling:
        return []
    out = []
    for r in rows:
        if r.metric == "capacity":
            out.append(Result(BENCH, r.case, "capacity_vs_passthrough", round(r.value / ceiling, 3), "ratio",
                              offered=r.offered))
    return out


def plot_ramp(harness: Harness, data: RunData, rows: list[dict[str, Any]], out: Path, th: Thresholds) -> None:
    from loadtests import plots

    t0 = min(data.phase_starts.values(), default=data.started)
    plots.throughput_vs_offered(rows, "ramp", out / "throughput.png")
    plots.p99_vs_offered(rows, "ramp", out / "latency_p99.png", th.max_p99_ms)
    plot_lag(harness, data, out / "lag.png", t0)


def print_summary(outcomes: list[StepOutcome], rows: list[dict[str, Any]], data: RunData) -> None:
    print(f"{'offered':>9} {'sent':>9} {'achieved':>9} {'p50 ms':>8} {'p99 ms':>8} {'dead':>5}")
    for o in outcomes:
        def val(case: str, metric: str, offered: float = o.offered) -> str:
            hit = [r["value"] for r in rows
                   if r["case"] == case and r["metric"] == metric and r.get("offered") == offered]
            return f"{hit[0]:,.1f}" if hit else "-"
        print(f"{o.offered:>9,.0f} {val('ramp:load', 'sent'):>9} {val('ramp:pipeline', 'throughput'):>9} "
              f"{val('ramp:e2e', 'latency_p50'):>8} {val('ramp:e2e', 'latency_p99'):>8} {o.dead_letters:>5}")
    if data.aborted:
        print(f"stopped early: {data.aborted}")


def setup_logging(out: Path) -> None:
    """The runner's own and its libraries' logs (aiokafka retries etc.) to <out>/logs/runner.log, not the terminal."""
    (out / "logs").mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(out / "logs" / "runner.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.mode == "chaos":
        from loadtests.chaos import main as chaos_main

        setup_logging(args.out)
        return chaos_main(args)
    try:
        services = select_services(args.services)
        parse_env(args.env)
        if args.mode == "ramp":
            parse_steps(args.steps)
            for text in args.profile:
                ProfileRequest.parse(text)
            if args.hold <= 0:
                raise ValueError("--hold must be > 0")
        elif args.rate <= 0 or args.minutes <= 0:
            raise ValueError("--rate and --minutes must be > 0")
        elif args.keys != "uniform":
            raise ValueError("soak: loss accounting needs --keys uniform")
    except ValueError as exc:
        print(f"borgctl load: {exc}", file=sys.stderr)
        return EXIT_USAGE
    setup_logging(args.out)
    if args.mode == "ramp":
        th = Thresholds(max_p99_ms=args.max_p99_ms, max_decision_p99_ms=args.max_decision_p99_ms,
                        min_throughput_ratio=args.min_throughput_ratio, max_dead_letters=args.max_dead_letters)
        return run_ramp(args, services, th)
    from loadtests.soak import run_soak

    th = Thresholds(max_lost=args.max_lost, max_rss_growth_mb=args.max_rss_growth_mb,
                    max_dead_letters=args.max_dead_letters)
    return run_soak(args, services, th)
