"""``borgctl eval arena``: the offline arena, every policy on the same arrivals and seed (docs/arena.md).

Writes ``DIR/results.json`` (bench format: ``machine`` + ``results`` rows ``bench: "arena"``,
``case: <policy>``, plus ``details``) and ``DIR/slowdown_cdf.png``, ``DIR/violations_over_time.png``.
Progress on stderr. A missing trace directory is one line on stderr and exit 2 (``--synthetic`` runs
without it).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

if TYPE_CHECKING:
    from services.scheduler_extender.scoring import ScoringConfig

ROOT: Final = Path(__file__).resolve().parents[2]
KNOWN: Final = ("kube-default", "random", "extender", "orchestrator", "oracle")
OPTIONAL: Final = ("learned",)  # needs a trained model (borgctl train placement): not in the default set
TODO: Final[tuple[str, ...]] = ()
QUICK: Final = {"nodes": 30, "parts": 2, "horizon_s": 3600.0}
FULL: Final = {"nodes": 50, "parts": 10, "horizon_s": 4 * 3600.0}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="borgctl eval arena", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="output directory (results.json + PNGs)")
    p.add_argument("--policies", default=",".join(KNOWN), help=f"comma-separated, from {', '.join(KNOWN + OPTIONAL)}")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quick", action="store_true",
                   help=f"{QUICK['nodes']} nodes, {QUICK['parts']} trace parts, "
                   f"{QUICK['horizon_s']:.0f} s of arena time")
    p.add_argument("--task-events", type=Path, default=None,
                   help="Google 2011 task_events directory (default $BORG_DATA_DIR/google2011/task_events)")
    p.add_argument("--synthetic", type=int, default=None, metavar="JOBS",
                   help="use this many synthetic jobs instead of the trace (no data needed)")
    p.add_argument("--nodes", type=int, default=None)
    p.add_argument("--parts", type=int, default=None, help="trace part files to read (in name order)")
    p.add_argument("--horizon-s", type=float, default=None, help="arena seconds the arrivals are compressed into")
    p.add_argument("--target-load", type=float, default=0.6, help="offered requested CPU / cluster CPU")
    p.add_argument("--node-fraction", type=float, default=0.125,
                   help="one arena node as a fraction of the trace's largest machine")
    p.add_argument("--tick-s", type=float, default=10.0)
    p.add_argument("--extender-weight", type=int, default=5,
                   help="the extender's weight in the kube-scheduler config (deploy/scheduler-extender: 5)")
    p.add_argument("--extender-unknown-penalty", type=float, default=None,
                   help="the extender's penalty of a missing/unknown input, 0-1 (EXTENDER_UNKNOWN_PENALTY; "
                        "default: the service's default)")
    p.add_argument("--extender-corunner-weight", type=float, default=0.0,
                   help="weight 0-1 of the extender's co-runner term (EXTENDER_WEIGHT_CORUNNER; 0 = off)")
    p.add_argument("--extender-corunner-slo-slowdown", type=float, default=1.25, metavar="X",
                   help="the load term counts a latency-sensitive pod pushed over X (EXTENDER_CORUNNER_SLO_SLOWDOWN; "
                        "default 1.25 = the arena's SLO; lower = a guard band)")
    p.add_argument("--extender-score-confidence", type=float, default=0.0,
                   help="regime confidence below which the extender scores the slowdown as unknown "
                        "(EXTENDER_SCORE_CONFIDENCE; 0 = trust every answer)")
    p.add_argument("--extender-weight-slowdown", type=float, default=None,
                   help="the extender's weight of the regime slowdown penalty (EXTENDER_WEIGHT_SLOWDOWN; "
                        "default: the service's default)")
    p.add_argument("--extender-inputs", choices=("model", "none"), default="model",
                   help="extender and orchestrator: read the regime model's labels (model) or nothing (none: every "
                        "node's card unknown, as the live extender with regimes.v2 silent; only the co-runner term and "
                        "kube-default's scores decide)")
    p.add_argument("--regime-basis", choices=("node", "pods"), default="node",
                   help="extender and orchestrator with --extender-inputs model: labels from the node model "
                        "(regimes.v2, what the live extender reads) or the pod-relative model (podregimes.v1's "
                        "model, --pod-regime-model; docs/arena.md 'Which label should the extender read?')")
    p.add_argument("--pod-regime-model", type=Path, default=ROOT / "models" / "regime_pods",
                   help="--regime-basis pods: pod-relative regime model root (its CURRENT) or a version directory")
    p.add_argument("--pod-interference", choices=("table", "none"), default="table",
                   help="--regime-basis pods: attach each regime's mean class slowdowns over the training kinds "
                        "to its label (table) or nothing (none: the pod-regime stage's record today)")
    p.add_argument("--kinds", choices=("heldout", "train"), default="heldout",
                   help="workload kinds of the arrivals: the regime model's held-out kinds (the evaluation) "
                        "or its training kinds (for choosing settings without looking at the held-out ones)")
    p.add_argument("--orchestrator-every-ticks", type=int, default=1,
                   help="orchestrator: run the agents and the referee every N ticks")
    p.add_argument("--taint-ttl-s", type=float, default=300.0, help="orchestrator: a taint expires after this")
    p.add_argument("--hold-s", type=float, default=60.0, help="orchestrator: an admission hold lasts this long")
    p.add_argument("--orchestrator-actions", default=None,
                   help="orchestrator: comma-separated action kinds applied (default all; others refused)")
    p.add_argument("--orchestrator-moves", action="store_true",
                   help="orchestrator: corrective moves on per-pod load estimates (services.agents."
                        "interference_policy; docs/arena.md 'Moves in the orchestrator')")
    p.add_argument("--orchestrator-load-term", action="store_true",
                   help="orchestrator: the extender's co-runner term on per-pod load estimates (corunner.load_harm) "
                        "instead of the class table (needs --extender-corunner-weight > 0)")
    p.add_argument("--pod-estimates", choices=("noise", "counters", "rdt"), default="noise",
                   help="orchestrator moves / load term: per-pod estimates = true pressure with log-normal noise "
                        "(--pod-pressure-noise), or a regressor on simulated per-cgroup counters trained on the "
                        "training kinds (training.pod_pressure), or (rdt) the same with llc and membw read from "
                        "per-cgroup resource monitoring (Intel RDT CMT/MBM: --rdt-noise; docs/arena.md)")
    p.add_argument("--rdt-noise", type=float, default=0.1, metavar="S",
                   help="--pod-estimates rdt: log-normal spread of each LLC-occupancy and memory-bandwidth reading "
                        "(default 0.1)")
    p.add_argument("--rdt-reading", choices=("once", "unsaturated", "rescaled", "window"), default="once",
                   help="--pod-estimates rdt: a pod's llc and membw = its first reading, kept (once), or re-read every "
                        "window and taken while its node's readings sum below --rdt-saturated-at, else the larger of "
                        "its highest reading and the counters' estimate (unsaturated; one noise factor per pod), or "
                        "as unsaturated with a share on a saturated node scaled by the oversubscription its calm-read "
                        "co-residents show (rescaled), or the latest window's reading while calm, else the larger of "
                        "it and the counters' estimate (window: what the pod-pressure stage does)")
    p.add_argument("--rdt-saturated-at", type=float, default=0.9, metavar="F",
                   help="--rdt-reading unsaturated, rescaled or window: a node whose readings of a resource sum to "
                        "this or more is taken as saturated in it (default 0.9)")
    p.add_argument("--victims", choices=("predicted", "cpi"), default="predicted",
                   help="orchestrator moves with --pod-estimates counters: find slowed pods from the estimated "
                        "pressures (predicted) or from each pod's IPC against its job's other pods (cpi, as CPI²)")
    p.add_argument("--cpi-window", type=int, default=1,
                   help="--victims cpi: a pod's IPC is the mean of its last this many 10 s windows (default 1)")
    p.add_argument("--cpi-quantile", type=float, default=0.9,
                   help="--victims cpi: the quantile of the job's IPC taken as its undisturbed IPC (default 0.9)")
    p.add_argument("--cpi-reference", choices=("samples", "pods"), default="samples",
                   help="--victims cpi: a job's reference IPC = the --cpi-quantile of its pods' recent samples, or of "
                        "its pods' means (then only jobs with >= 3 measured pods answer)")
    p.add_argument("--pod-estimates-job-prior", action="store_true",
                   help="orchestrator moves / load term: a pod not measured yet is guessed at the mean estimate of "
                        "its job's measured pods (else its class's guess)")
    p.add_argument("--cpi-clearance", type=float, default=None, metavar="LIMIT",
                   help="--victims cpi: blame by history: a co-runner present through a pod's last --cpi-window "
                        "windows while its observed slowdown stayed <= LIMIT is never moved to relieve that pod "
                        "(services.agents.clearance; default off)")
    p.add_argument("--pod-pressure-noise", type=float, default=0.2,
                   help="orchestrator moves: per-pod pressure estimate = true x exp(N(0, sigma)), this sigma")
    p.add_argument("--move-batch-only", action="store_true",
                   help="orchestrator moves: move only pods that are not latency-sensitive")
    p.add_argument("--move-margin", type=float, default=0.0,
                   help="orchestrator moves: act only when an estimated slowdown exceeds --move-slo-slowdown + this")
    p.add_argument("--move-slo-slowdown", type=float, default=1.25, metavar="X",
                   help="orchestrator moves: the rule's threshold, a latency-sensitive pod's estimated slowdown may "
                        "not exceed X (default 1.25 = the arena's SLO; lower = a guard band against estimate error; "
                        "live: AGENT_RELIABILITY_MOVE_SLO_SLOWDOWN)")
    p.add_argument("--referee-max-disruptions", type=int, default=None, metavar="N",
                   help="orchestrator: the referee's disruption budget, disruptive actions per "
                        "--referee-disruption-window-s (default: the live default, REFEREE_MAX_DISRUPTIONS)")
    p.add_argument("--referee-disruption-window-s", type=float, default=None, metavar="S",
                   help="orchestrator: the budget's window (default: the live default, REFEREE_DISRUPTION_WINDOW_S)")
    p.add_argument("--move-min-age-s", type=float, default=10.0,
                   help="orchestrator moves: a pod is moved only after running this long (its counters' window)")
    p.add_argument("--forecast-model", type=Path, default=ROOT / "models" / "forecast",
                   help="load forecaster root (its CURRENT) or a version directory, for the report's forecast "
                        "section (missing or refused: baselines only, and the reason in details.forecast)")
    p.add_argument("--model", type=Path, default=ROOT / "models" / "regime",
                   help="regime model root (its CURRENT) or a version directory")
    p.add_argument("--placement-model", type=Path, default=ROOT / "models" / "placement",
                   help="policy learned: placement Q-table root (its CURRENT) or version (docs/placement.md)")
    p.add_argument("-q", "--quiet", action="store_true")
    return p


def run(args: argparse.Namespace, command: str) -> int:
    from loadtests.bench_format import machine
    from services.agents.interference_policy import MoveSettings
    from services.regime.model import load_regime_model
    from services.runtime.model_watch import resolve
    from simulator.arena.arrivals import load_trace_tasks, synthetic_tasks, to_arrivals
    from simulator.arena.aware import ArenaView, ExtenderPolicy, OraclePolicy
    from simulator.arena.loop import Arena, ArenaOutcome, Controller
    from simulator.arena.orchestrator import NodeControl, Orchestrator, OrchestratorConfig, OrchestratorPolicy
    from simulator.arena.policies import PlacementPolicy, make_policy
    from simulator.arena.report import metrics, plot, rows
    from simulator.arena.world import ArenaCluster, LabelObserver, RegimeObserver

    def progress(msg: str) -> None:
        if not args.quiet:
            print(f"[arena {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    todo = [p for p in policies if p in TODO]
    if todo:
        print(f"eval arena: policy {todo[0]} is not built yet (issue 21: agents + referee acting); "
              f"choose from {', '.join(KNOWN)}", file=sys.stderr)
        return 2
    unknown = [p for p in policies if p not in KNOWN + OPTIONAL]
    if unknown or not policies:
        print(f"eval arena: unknown policy {unknown or policies}; choose from {', '.join(KNOWN)}", file=sys.stderr)
        return 2
    size = QUICK if args.quick else FULL
    nodes = int(args.nodes or size["nodes"])
    parts = int(args.parts or size["parts"])
    horizon_s = float(args.horizon_s or size["horizon_s"])
    if nodes <= 0 or parts <= 0 or horizon_s <= 0 or args.tick_s <= 0 or not 0 < args.node_fraction <= 1:
        print("eval arena: --nodes, --parts, --horizon-s, --tick-s must be positive, --node-fraction in (0, 1]",
              file=sys.stderr)
        return 2

    from training.settings import google2011_dir

    events = args.task_events or google2011_dir() / "task_events"
    if args.synthetic is None and not events.is_dir():
        print(f"eval arena: task_events directory {events} not found (set BORG_DATA_DIR, --task-events, "
              "or --synthetic JOBS)", file=sys.stderr)
        return 2
    if args.extender_unknown_penalty is not None and not 0.0 <= args.extender_unknown_penalty <= 1.0:
        print("eval arena: --extender-unknown-penalty must be in [0, 1]", file=sys.stderr)
        return 2
    try:
        scoring = _scoring_config(args)
    except ValueError as exc:
        print(f"eval arena: extender scoring: {exc}", file=sys.stderr)
        return 2
    if args.victims == "cpi" and args.pod_estimates == "noise":
        print("eval arena: --victims cpi needs --pod-estimates counters or rdt (the IPC comes from the pods' "
              "counters)", file=sys.stderr)
        return 2
    if args.rdt_noise < 0:
        print("eval arena: --rdt-noise must be >= 0", file=sys.stderr)
        return 2
    if not 0.0 < args.rdt_saturated_at <= 1.0:
        print("eval arena: --rdt-saturated-at must be in (0, 1]", file=sys.stderr)
        return 2
    if args.cpi_window < 1:
        print("eval arena: --cpi-window must be >= 1", file=sys.stderr)
        return 2
    if not 0.0 < args.cpi_quantile <= 1.0:
        print("eval arena: --cpi-quantile must be in (0, 1]", file=sys.stderr)
        return 2
    if args.cpi_clearance is not None and (args.victims != "cpi" or args.cpi_clearance < 1.0):
        print("eval arena: --cpi-clearance needs --victims cpi and a LIMIT >= 1", file=sys.stderr)
        return 2
    if args.pod_pressure_noise < 0:
        print("eval arena: --pod-pressure-noise must be >= 0", file=sys.stderr)
        return 2
    try:
        moves = (MoveSettings(slo_slowdown=args.move_slo_slowdown, min_age_s=args.move_min_age_s,
                              batch_only=args.move_batch_only, margin=args.move_margin,
                              attribute=args.cpi_clearance is not None)
                 if args.orchestrator_moves else None)
    except ValueError as exc:
        print(f"eval arena: {exc}", file=sys.stderr)
        return 2
    from pydantic import ValidationError

    from services.referee.settings import RefereeSettings

    budget = {k: v for k, v in (("max_disruptions", args.referee_max_disruptions),
                                ("disruption_window_s", args.referee_disruption_window_s)) if v is not None}
    try:
        referee = RefereeSettings(mode="shadow", **budget)
    except ValidationError as exc:
        err = exc.errors()[0]  # the referee's settings read REFEREE_* too, as the live referee does
        field = str(err["loc"][0]) if err["loc"] else "*"
        print(f"eval arena: --referee-{field.replace('_', '-')} (or REFEREE_{field.upper()}): {err['msg']}",
              file=sys.stderr)
        return 2
    if args.orchestrator_load_term and args.extender_corunner_weight <= 0:
        print("eval arena: --orchestrator-load-term needs --extender-corunner-weight > 0 (the term's weight)",
              file=sys.stderr)
        return 2
    model = load_regime_model(resolve(args.model))
    pod_model = pod_table = None
    if args.regime_basis == "pods":
        from services.regime.pod_model import load_pod_regime_model
        from services.runtime.model_watch import ModelRefusedError
        from simulator.arena.pod_observer import regime_interference_table

        try:
            pod_model = load_pod_regime_model(resolve(args.pod_regime_model))
        except (ModelRefusedError, OSError, ValueError) as exc:
            print(f"eval arena: --pod-regime-model {args.pod_regime_model}: {exc}", file=sys.stderr)
            return 2
        held = sorted(pod_model.card.get("data", {}).get("heldout_kinds") or [])
        if held != sorted(model.card.get("data", {}).get("heldout_kinds") or []):
            print(f"eval arena: pod model {pod_model.version} holds out {held}, the regime model "
                  f"{model.version} other kinds: the arrivals would not be unseen by both", file=sys.stderr)
            return 2
        if args.pod_interference == "table":
            pod_table = regime_interference_table(list(pod_model.card["data"]["train_kinds"]), seed=args.seed)
        progress(f"labels: pod-relative model {pod_model.version} (interference: {args.pod_interference})")
    key = "heldout_kinds" if args.kinds == "heldout" else "train_kinds"
    kinds = list(model.card.get("data", {}).get(key) or [])
    if not kinds:
        print(f"eval arena: model {model.version} names no {args.kinds} kinds (data.{key})", file=sys.stderr)
        return 2
    progress(f"model {model.version}; {args.kinds} kinds {', '.join(kinds)}")
    if args.synthetic is not None:
        tasks = synthetic_tasks(args.synthetic, seed=args.seed)
        source = f"synthetic:{args.synthetic}"
    else:
        progress(f"reading {parts} part(s) of {events}")
        tasks = load_trace_tasks(events, parts)
        source = f"{events} parts[:{parts}]"
    arrivals, stats = to_arrivals(tasks, kinds=kinds, nodes=nodes, seed=args.seed, horizon_s=horizon_s,
                                  node_fraction=args.node_fraction, target_load=args.target_load, source=source)
    progress(f"{len(tasks):,} tasks read; {len(arrivals):,} arrivals over {horizon_s:.0f} s on {nodes} nodes "
             f"(tasks kept {stats.task_sample_fraction:.3f}, compression {stats.compression:.2f}x, "
             f"{stats.dropped_too_large} larger than a node dropped)")
    if not arrivals:
        print("eval arena: no arrivals (no task fits a node?)", file=sys.stderr)
        return 2

    from simulator.arena import forecast as load_forecast

    forecast_cpu = time.process_time()
    forecaster, forecast_skip = load_forecast.load_model(args.forecast_model)
    forecast_cpu = time.process_time() - forecast_cpu
    progress(forecast_skip or f"forecast model {forecaster.version if forecaster else '?'} (report section)")
    # a quick run has 12 buckets of arena time: with the stage's 1 h of history nothing could be scored
    fc_history = 3 if args.quick else load_forecast.MIN_HISTORY
    forecasts: dict[str, Any] = {"skipped_model": forecast_skip, "policies": {}}
    outcomes: list[ArenaOutcome] = []
    results: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}

    def labels_of(cluster: ArenaCluster) -> LabelObserver:
        """The label source of the extender's path (--regime-basis)."""
        if pod_model is None:
            return RegimeObserver(model, [s.name for s in cluster.specs])
        from simulator.arena.pod_observer import PodRegimeObserver

        return PodRegimeObserver(pod_model, cluster, pod_table)

    for name in policies:
        view = ArenaView(nodes)
        cluster: ArenaCluster | None = None
        observer: LabelObserver | None = None
        controller: Controller | None = None
        policy: PlacementPolicy
        if name == "extender":
            policy = ExtenderPolicy(args.seed, view, scoring, weight=args.extender_weight)
            if args.extender_inputs == "model":
                cluster = ArenaCluster(nodes, args.seed, interval_ms=int(args.tick_s * 1000))
                observer = labels_of(cluster)
        elif name == "orchestrator":
            orch = OrchestratorPolicy(args.seed, view, NodeControl(nodes), scoring, weight=args.extender_weight)
            policy = orch
            cluster = ArenaCluster(nodes, args.seed, interval_ms=int(args.tick_s * 1000))
            names = [s.name for s in cluster.specs]
            if args.extender_inputs == "model":
                observer = labels_of(cluster)
            else:  # regimes.v2 silent: no labels, so no counters to simulate (utilisation from requests)
                cluster = None
            counters = None
            if args.pod_estimates != "noise" and (args.orchestrator_moves or args.orchestrator_load_term):
                from simulator.arena.orchestrator import CounterEstimator, MonitoredEstimator

                progress("training the per-pod pressure estimator on the training kinds (training.pod_pressure)")
                train_kinds = list(model.card["data"]["train_kinds"])
                counters = (MonitoredEstimator(train_kinds, args.seed, args.rdt_noise, reading=args.rdt_reading,
                                               saturated_at=args.rdt_saturated_at) if args.pod_estimates == "rdt"
                            else CounterEstimator(train_kinds, args.seed))
            controller = Orchestrator(
                names, orch, model_version=model.version, counters=counters, referee=referee,
                cfg=OrchestratorConfig(every_ticks=max(1, args.orchestrator_every_ticks),
                                       taint_ttl_s=args.taint_ttl_s, hold_s=args.hold_s,
                                       extender_weight=args.extender_weight,
                                       actions=(frozenset(args.orchestrator_actions.split(","))
                                                if args.orchestrator_actions else None),
                                       moves=moves, load_term=args.orchestrator_load_term,
                                       pod_noise=args.pod_pressure_noise, noise_seed=args.seed, victims=args.victims,
                                       cpi_window=args.cpi_window, cpi_reference=args.cpi_reference,
                                       cpi_quantile=args.cpi_quantile, cpi_clearance=args.cpi_clearance,
                                       job_prior=args.pod_estimates_job_prior, min_age_s=args.move_min_age_s))
        elif name == "oracle":
            policy = OraclePolicy(args.seed, view)
        elif name == "learned":  # same regime path as the extender: its state is what the extender sees
            from simulator.arena.learned import LearnedPolicy, load_placement_model

            policy = LearnedPolicy(args.seed, view, load_placement_model(args.placement_model))
            cluster = ArenaCluster(nodes, args.seed, interval_ms=int(args.tick_s * 1000))
            observer = RegimeObserver(model, [s.name for s in cluster.specs])
        else:
            policy = make_policy(name, args.seed)
        started = time.perf_counter()
        out = Arena(arrivals, nodes, policy, view, horizon_s=horizon_s, tick_s=args.tick_s, cluster=cluster,
                    observer=observer, controller=controller).run(progress)
        m = metrics(out)
        if isinstance(policy, ExtenderPolicy):
            m["extender_filtered_decisions"] = float(policy.filtered)
        if isinstance(policy, OrchestratorPolicy):
            m["extender_filtered_decisions"] = float(policy.extender.filtered)
        if observer is not None:
            summary[f"{name}_abstain_reasons"] = {k: v / max(observer.windows, 1)
                                                   for k, v in observer.abstain_reasons.items()}
        fc_started = time.process_time()
        forecasts["policies"][name] = fc = load_forecast.evaluate(out.node_load, args.tick_s, forecaster,
                                                                                min_history=fc_history)
        forecast_cpu += time.process_time() - fc_started
        progress(load_forecast.summary_line(name, fc))
        outcomes.append(out)
        results += rows(name, m)
        summary[name] = m
        progress(f"{name}: SLO-violation {m['slo_violation_task_s']:.0f} task-s, utilisation "
                 f"{m['mean_cpu_utilisation']:.3f}, nodes used {m['nodes_used']:.1f}, "
                 f"{out.placements:,} placements ({time.perf_counter() - started:.1f}s)")
    if "kube-default" in summary:
        base = summary["kube-default"]["slo_violation_task_s"]
        for name in policies:
            v = summary[name]["slo_violation_task_s"]
            ratio = v / base if base else None
            summary[name]["slo_violation_vs_kube_default"] = ratio
            if ratio is not None:
                results.append({"bench": "arena", "case": name, "metric": "slo_violation_vs_kube_default",
                                "value": ratio, "unit": "ratio"})
    args.out.mkdir(parents=True, exist_ok=True)
    details = {"command": command, "seed": args.seed, "model_version": model.version,
               "heldout_kinds": list(model.card.get("data", {}).get("heldout_kinds") or []), "arrival_kinds": kinds,
               "nodes": nodes, "horizon_s": horizon_s, "extender_weight": args.extender_weight,
               "extender_unknown_penalty": args.extender_unknown_penalty,
               "extender_corunner_weight": args.extender_corunner_weight,
               "extender_score_confidence": args.extender_score_confidence,
               "extender_corunner_slo_slowdown": args.extender_corunner_slo_slowdown,
               "extender_weight_slowdown": args.extender_weight_slowdown, "kinds": args.kinds,
               "extender_inputs": args.extender_inputs, "regime_basis": args.regime_basis,
               "pod_regime_model_version": pod_model.version if pod_model is not None else None,
               "pod_interference": (args.pod_interference if pod_model is not None else None),
               "pod_interference_table": pod_table,
               "tick_s": args.tick_s, "arrivals": stats.as_dict(),
               "orchestrator": {"every_ticks": args.orchestrator_every_ticks, "taint_ttl_s": args.taint_ttl_s,
                                "hold_s": args.hold_s, "actions": args.orchestrator_actions,
                                "moves": args.orchestrator_moves, "load_term": args.orchestrator_load_term,
                                "pod_estimates": args.pod_estimates, "victims": args.victims,
                                "rdt_noise": args.rdt_noise if args.pod_estimates == "rdt" else None,
                                "rdt_reading": args.rdt_reading if args.pod_estimates == "rdt" else None,
                                "rdt_saturated_at": (args.rdt_saturated_at if args.pod_estimates == "rdt"
                                                     and args.rdt_reading != "once" else None),
                                "cpi_window": args.cpi_window, "cpi_reference": args.cpi_reference,
                                "cpi_quantile": args.cpi_quantile, "cpi_clearance": args.cpi_clearance,
                                "pod_estimates_job_prior": args.pod_estimates_job_prior,
                                "pod_pressure_noise": args.pod_pressure_noise,
                                "move_min_age_s": args.move_min_age_s, "move_batch_only": args.move_batch_only,
                                "move_margin": args.move_margin, "move_slo_slowdown": args.move_slo_slowdown,
                                "referee_max_disruptions": referee.max_disruptions,
                                "referee_disruption_window_s": referee.disruption_window_s},
               "latency_sensitive": "scheduling class 2-3 (SLO: slowdown <= 1.25)", "summary": summary,
               "forecast": forecasts}
    doc = {"machine": machine(), "results": results, "details": details}
    (args.out / "results.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    pngs = plot(outcomes, args.out, f"arena seed {args.seed}: {nodes} nodes, {len(arrivals):,} tasks")
    first = outcomes[0]
    if first.node_load is not None:
        fc_started = time.process_time()
        fc_png = load_forecast.plot(first.node_load, args.tick_s, forecaster, args.out / "forecast_vs_actual.png",
                                    f"{first.policy}, seed {args.seed}: busiest node, forecast made 15 min earlier",
                                    min_history=fc_history)
        pngs += [fc_png] if fc_png is not None else []
        forecast_cpu += time.process_time() - fc_started
    progress(f"forecast section: {forecast_cpu:.2f} s CPU (model load, scoring, plot)")
    progress(f"wrote {args.out / 'results.json'} and {', '.join(p.name for p in pngs)}")
    return 0


def _scoring_config(args: argparse.Namespace) -> ScoringConfig:
    """The extender's ScoringConfig from the ``--extender-*`` options (defaults: the service's)."""
    from services.scheduler_extender.scoring import ScoringConfig

    default = ScoringConfig()
    return ScoringConfig(
        weight_corunner=args.extender_corunner_weight, score_confidence=args.extender_score_confidence,
        corunner_slo_slowdown=args.extender_corunner_slo_slowdown,
        unknown_penalty=(default.unknown_penalty if args.extender_unknown_penalty is None
                         else args.extender_unknown_penalty),
        weight_slowdown=(default.weight_slowdown if args.extender_weight_slowdown is None
                         else args.extender_weight_slowdown))


def eval_arena(argv: Sequence[str]) -> int:
    """Entry point wired into ``borgctl eval arena``; returns an exit code."""
    try:
        args = build_parser().parse_args(list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    from services.runtime.model_watch import ModelRefusedError

    try:
        return run(args, "borgctl eval arena " + shlex.join(list(argv)))
    except (ModelRefusedError, ValueError) as exc:
        print(f"eval arena: {exc}", file=sys.stderr)
        return 2


def main() -> int:
    return eval_arena(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
