"""The chaos run's verdict: accounting, attribution to faults, results.json, chaos.json, the timeline, exit status."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

from loadtests.accounting import account, read_ticks
from loadtests.bench_format import Result, write_results
from loadtests.chaos_faults import ChaosObserver, Controller, Fault, SupervisedPipeline, progress
from loadtests.chaos_rules import BASELINE_CASE, attribute, duplicate_actions, loss_times, missing_windows
from loadtests.harness import Harness, RunData, write_timeline
from loadtests.harness_cli import finish
from loadtests.observe import PER_WINDOW_OUTPUTS

BENCH = "chaos"


@dataclass
class Findings:
    lost_total: int = 0
    lost_by_case: Counter[str] = field(default_factory=Counter)
    stage_missing: dict[str, int] = field(default_factory=dict)
    duplicates: list[tuple[str, float, int]] = field(default_factory=list)
    duplicates_by_case: Counter[str] = field(default_factory=Counter)
    accounting: dict[str, int] = field(default_factory=dict)
    accounted: bool = False
    final_lag: dict[str, int] = field(default_factory=dict)
    """Per consumer group, its lag in the last sampling round (0 everywhere = drained)."""


def final_lag(f: Findings) -> dict[str, int]:
    return {g: n for g, n in f.final_lag.items() if n > 0}


def findings(harness: Harness, data: RunData, faults: list[Fault], ticks_path: Path) -> Findings:
    obs = harness.observer
    assert isinstance(obs, ChaosObserver)
    out = Findings()
    injected = [(f.name, f.t_inject) for f in faults if f.t_inject is not None]
    if ticks_path.exists() and not data.error:
        with ticks_path.open("rb") as fh:
            ticks = read_ticks(fh)
        acc = account(ticks, obs.windows, obs.dead_nodestates)
        out.accounting = acc.summary()
        events = loss_times(ticks, obs.windows, obs.dead_nodestates)
        for topic, stage in PER_WINDOW_OUTPUTS.items():
            missing = missing_windows(obs.windows, obs.window_outputs.get(topic, set()),
                                      obs.dead_windows.get(stage, set()))
            out.stage_missing[stage] = len(missing)
            events += missing
        out.lost_by_case = attribute(events, injected)
        out.lost_total = acc.lost + sum(out.stage_missing.values())
        out.accounted = True
    out.duplicates = duplicate_actions(obs.actions)
    for (group, _), sample in harness.lag.latest().items():
        name = group[len(harness.prefix):]
        out.final_lag[name] = out.final_lag.get(name, 0) + sample.lag
    out.duplicates_by_case = attribute([(t, 1) for _, t, _ in out.duplicates], injected)
    return out


def report(out: Path, rate: float, recovery_bound_s: float, harness: Harness, data: RunData, faults: list[Fault],
           controller: Controller, pipeline: SupervisedPipeline) -> int:
    f = findings(harness, data, faults, out / "ticks.jsonl")
    obs = harness.observer
    assert isinstance(obs, ChaosObserver)
    rows: list[Result] = []
    injected = [(x.name, x.t_inject) for x in faults if x.t_inject is not None]
    crashes_by_case = attribute([(t, 1) for t, _, _ in pipeline.crashes], injected, lookback_s=0.0)
    for fault in faults:
        case = f"chaos:{fault.name}"
        crashes = crashes_by_case.get(fault.name, 0)
        rec = fault.recovery_s
        rows += [
            Result(BENCH, case, "lost", float(f.lost_by_case.get(fault.name, 0)), "messages", offered=rate),
            Result(BENCH, case, "duplicate_actions", float(f.duplicates_by_case.get(fault.name, 0)), "decisions",
                   offered=rate),
            Result(BENCH, case, "recovery_s", round(rec, 2) if rec is not None else float("nan"), "s",
                   offered=rate),
            Result(BENCH, case, "back_s", round(fault.back_s, 2) if fault.back_s is not None else float("nan"), "s",
                   offered=rate),
            Result(BENCH, case, "crashes", float(crashes), "count", offered=rate),
        ]
    rows += [
        Result(BENCH, f"chaos:{BASELINE_CASE}", "lost", float(f.lost_by_case.get(BASELINE_CASE, 0)), "messages",
               offered=rate),
        Result(BENCH, f"chaos:{BASELINE_CASE}", "duplicate_actions",
               float(f.duplicates_by_case.get(BASELINE_CASE, 0)), "decisions", offered=rate),
        Result(BENCH, "chaos:total", "lost", float(f.lost_total), "messages", offered=rate),
        Result(BENCH, "chaos:total", "duplicate_actions", float(len(f.duplicates)), "decisions", offered=rate),
    ]
    for key, value in f.accounting.items():
        rows.append(Result(BENCH, "chaos:accounting", key, float(value), "messages", offered=rate))
    for stage, n in f.stage_missing.items():
        rows.append(Result(BENCH, f"chaos:accounting:{stage}", "lost", float(n), "windows", offered=rate))
    outcomes = Counter(x.outcome for x in obs.actions)
    for outcome, n in sorted(outcomes.items()):
        rows.append(Result(BENCH, "chaos:actions", outcome, float(n), "results", offered=rate))
    rows.append(Result(BENCH, "chaos:total", "crashes", float(len(pipeline.crashes)), "count", offered=rate))

    violations = check(recovery_bound_s, data, faults, f)
    write_results(out / "results.json", [r.row() for r in rows])
    detail = {
        "rate": rate,
        "recovery_bound_s": recovery_bound_s,
        "faults": [asdict(x) | {"recovery_s": x.recovery_s, "back_s": x.back_s} for x in faults],
        "lag_bounds": controller.bounds,
        "accounting": f.accounting,
        "lost_by_case": dict(f.lost_by_case),
        "stage_missing": f.stage_missing,
        "duplicates": [{"decision_id": d, "second_at": t, "applied": n} for d, t, n in f.duplicates],
        "crashes": [{"t": t, "service": s, "code": c} for t, s, c in pipeline.crashes],
        "final_lag": f.final_lag,
        "action_outcomes": dict(outcomes),
        "observer_poll_errors": obs.poll_errors,
        "violations": violations,
    }
    (out / "chaos.json").write_bytes(orjson.dumps(detail, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
    write_timeline(out / "timeline.json", harness, data, {"mode": "chaos", "violations": violations})
    try:
        from loadtests.chaos_plot import timeline

        timeline(harness, data, faults, out / "timeline.png")
    except Exception as exc:  # a plot is a by-product: its failure must not hide the verdict
        progress(f"timeline plot failed: {type(exc).__name__}: {exc}")
    print_report(faults, f, outcomes)
    return finish(data, violations)


def check(recovery_bound_s: float, data: RunData, faults: list[Fault], f: Findings) -> list[str]:
    out: list[str] = []
    for fault in faults:
        if fault.skipped:
            out.append(f"{fault.name}: not injected ({fault.skipped})")
        elif fault.recovery_s is None:
            why = "; ".join(fault.notes) or f"not within {recovery_bound_s:.0f}s"
            out.append(f"{fault.name}: did not recover ({why})")
    if not f.accounted:
        out.append("accounting: not done (no ticks, or the run failed)")
    if f.lost_total:
        by_case = ", ".join(f"{k} {v}" for k, v in sorted(f.lost_by_case.items()))
        out.append(f"lost {f.lost_total} messages ({by_case})")
    if f.duplicates:
        out.append(f"{len(f.duplicates)} decision(s) applied more than once: "
                   + ", ".join(d for d, _, _ in f.duplicates[:5]))
    behind = final_lag(f)
    if behind:
        out.append("not drained: " + ", ".join(f"{g} {n:,} behind" for g, n in sorted(behind.items()))
                   + " at the end (the pipeline did not keep up; losses counted include that backlog)")
    if data.aborted:
        out.append(f"stopped early: {data.aborted}")
    return out


def print_report(faults: list[Fault], f: Findings, outcomes: Counter[str]) -> None:
    print(f"{'case':<34} {'back_s':>7} {'recovery_s':>10} {'lost':>6} {'dup':>4}")
    for fault in faults:
        back = f"{fault.back_s:.1f}" if fault.back_s is not None else "-"
        rec = f"{fault.recovery_s:.1f}" if fault.recovery_s is not None else ("skipped" if fault.skipped else "-")
        lost = str(f.lost_by_case.get(fault.name, 0)) if f.accounted else "?"
        dup = f.duplicates_by_case.get(fault.name, 0)
        print(f"{'chaos:' + fault.name:<34} {back:>7} {rec:>10} {lost:>6} {dup:>4}")
    if not f.accounted:
        print("accounting: not done (the run failed before it ended; see the FAILED line)")
    if f.accounting:
        s = f.accounting
        print(f"accounting: produced {s['produced']:,}, dead-lettered {s['dead_lettered']:,}, windows "
              f"{s['windows']:,}, lost {s['lost']:,}, unexpected {s['unexpected']:,}; stage windows missing "
              + ", ".join(f"{k} {v}" for k, v in f.stage_missing.items()))
    print("actions: " + (", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())) or "none"))
