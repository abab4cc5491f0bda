"""borgctl entry point: parses the command line and dispatches to one module per command."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time

from borgctl import stack
from borgctl.errors import UserError
from borgctl.paths import bootstrap
from borgctl.registry import SERVICES, service

INFRA_NAMES = [i.name for i in stack.INFRA]

# Commands whose arguments are owned by another package. Each entry is imported when its command
# runs (training pulls in xgboost, loadtests matplotlib), with plain imports so that import-linter
# sees borgctl's edges like any other.


def _delegated(name: str, argv: list[str]) -> int:
    if name == "replay":
        from loadtests.replay import main as entry
    elif name == "bench":
        from loadtests.bench import main as entry
    elif name == "trace":
        from borgctl.trace import main as entry
    elif name == "model":
        from borgctl.model import main as entry
    elif name == "trainer":
        from training.trainer import main as entry
    else:
        from loadtests.scenario import main as entry
    return entry(argv)


DELEGATED: dict[str, str] = {
    "replay": "replay recorded or synthetic traffic onto the topics",
    "bench": "benchmarks: pipeline, inference, agent, referee, extender",
    "trace": "print a decision's trace from Jaeger as a tree",
    "model": "model versions: status, promote, rollback",
    "load": "ramped load scenario and soak runs",
    "trainer": "retrain from the topics on a schedule or on drift.v1 (one run at a time)",
}
STOP_ON_SIGTERM = frozenset({"replay", "bench", "load"})
"""Long-running commands that start processes or topics: SIGTERM stops them as Ctrl-C does (exit 130)."""


def _train(model: str, argv: list[str]) -> int:
    if any(a == "--from-topics" or a.startswith("--from-topics=") for a in argv):
        from training.from_topics import main as from_topics

        return from_topics(model, argv)
    if model == "forecast":
        from training.forecast.cli import train_forecast

        return train_forecast(argv)
    if model == "pod-pressure":
        from training.pod_pressure import train_pod_pressure

        return train_pod_pressure(argv)
    if model == "regime-pods":
        from training.regime.pod_model import main as train_regime_pods

        return train_regime_pods(argv)
    if model == "placement":
        from training.placement.cli import train_placement

        return train_placement(argv)
    from training import cli

    return {"failure": cli.train_failure, "regime": cli.train_regime, "anomaly": cli.train_anomaly}[model](argv)


def _eval(model: str, argv: list[str]) -> int:
    if model in ("failure", "failure-rolling"):
        from training import cli

        return (cli.eval_failure if model == "failure" else cli.eval_failure_rolling)(argv)
    if model == "regime":
        from training.regime.evaluate import eval_regime

        return eval_regime(argv)
    if model == "forecast":
        from training.forecast.cli import eval_forecast

        return eval_forecast(argv)
    if model == "drift":  # the continuous-learning loop on the real broker (docs/drift.md)
        from loadtests.eval_drift import main as eval_drift

        return eval_drift(argv)
    from borgctl.arena import eval_arena  # placement policies (docs/arena.md); --live: loadtests/arena_live

    return eval_arena(argv)


TRAIN = ("failure", "regime", "regime-pods", "anomaly", "forecast", "placement", "pod-pressure")
EVAL = ("failure", "failure-rolling", "regime", "forecast", "arena", "drift")


def cmd_up(args: argparse.Namespace) -> int:
    names = args.only.split(",") if args.only else INFRA_NAMES
    unknown = [n for n in names if n not in [*INFRA_NAMES, "services"]]
    if unknown:
        raise UserError(f"unknown component(s) {', '.join(unknown)}; choose from {', '.join(INFRA_NAMES)}, services")
    stack.infra_up([n for n in names if n in INFRA_NAMES])
    if "kafka" in names:
        from services.runtime.admin import create_topics

        created = asyncio.run(create_topics(bootstrap()))
        print(f"topics: {len(created)} created" + (f" ({', '.join(created)})" if created else " (all present)"))
    if not args.no_services and (not args.only or "services" in names):
        wired, notes = stack.local_service_env()
        for note in notes:
            print(note)
        for entry in stack.local_services():
            print(stack.service_up(entry, wired))
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    for entry in reversed(SERVICES):
        message = stack.service_down(entry)
        if message:
            print(message)
    if not args.services_only:
        stack.infra_down(INFRA_NAMES)
    return 0


def cmd_status(_: argparse.Namespace) -> int:
    rows = stack.infra_status() + stack.services_status()
    for _name, _ok, line in rows:
        print(line)
    kafka_ok = any(name == "kafka" and ok for name, ok, _ in rows)
    return 0 if kafka_ok else 3


def cmd_topics(args: argparse.Namespace) -> int:
    from contracts.topics import TOPICS
    from services.runtime.admin import create_topics, describe_topics
    from services.runtime.settings import RuntimeSettings, load_settings

    settings = load_settings(RuntimeSettings)
    if args.replication is None:
        args.replication = settings.topic_replication
    elif not 1 <= args.replication <= 5:
        raise UserError(f"--replication {args.replication}: must be 1..5")
    try:
        if args.action == "create":
            counts = {spec.name: settings.partitions_of(spec.name) for spec in TOPICS}
            created = asyncio.run(create_topics(bootstrap(), prefix=args.prefix, replication=args.replication,
                                                partitions=counts))
            print(f"created {len(created)}: {', '.join(created) or '(all present)'}")
        names = [f"{args.prefix}{t.name}" for t in TOPICS]
        states = asyncio.run(describe_topics(bootstrap(), names))
        # the broker's metadata can lag topics created a moment ago: ask again for a few seconds
        for _ in range(20 if args.action == "create" else 0):
            if all(name in states for name in names):
                break
            time.sleep(0.5)
            states = asyncio.run(describe_topics(bootstrap(), names))
    except Exception as exc:
        if isinstance(exc, RuntimeError) and "refused" in str(exc):  # the broker answered: say what it refused
            raise UserError(f"Kafka at {bootstrap()}: {exc}", 1) from None
        raise UserError(f"cannot reach Kafka at {bootstrap()}: {exc}", 1) from None
    print(f"{'topic':<22}{'partitions':>11}  {'cleanup':<9} {'registry':<10} {'key'}")
    ok = True
    for spec in TOPICS:
        name = f"{args.prefix}{spec.name}"
        state = states.get(name)
        if state is None:
            ok = False
            print(f"{name:<22}{'-':>11}  {'-':<9} {'MISSING':<10} {spec.key}")
            continue
        match = state.partitions == settings.partitions_of(spec.name) and state.cleanup_policy == spec.cleanup_policy
        ok &= match
        print(
            f"{name:<22}{state.partitions:>11}  {state.cleanup_policy:<9} {'ok' if match else 'DIFFERS':<10} {spec.key}"
        )
    return 0 if ok else 1


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        entry = service(args.service)
    except KeyError:
        names = ", ".join(s.name for s in SERVICES if s.available())
        raise UserError(f"unknown service {args.service!r}; available: {names}") from None
    if not entry.available():
        raise UserError(f"service {entry.name!r} is not available in this build ({entry.module} is missing)")
    return entry.main()(args.rest)


def cmd_tail(args: argparse.Namespace) -> int:
    from borgctl.tail import run

    return run(bootstrap(), args.topic, args.from_beginning, args.limit, args.headers, args.summary, args.seconds)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="borgctl", description="borg-orchestrator control")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", help="start the local stack (Kafka, Jaeger, Kubernetes API, services)")
    up.add_argument("--only", help=f"comma list of: {', '.join(INFRA_NAMES)}, services")
    up.add_argument("--no-services", action="store_true", help="infrastructure only")
    up.set_defaults(fn=cmd_up)

    down = sub.add_parser("down", help="stop the local stack")
    down.add_argument("--services-only", action="store_true")
    down.set_defaults(fn=cmd_down)

    sub.add_parser("status", help="each component with its address and health").set_defaults(fn=cmd_status)

    topics = sub.add_parser("topics", help="create or list the registry's topics")
    topics.add_argument("action", choices=["create", "list"], nargs="?", default="list")
    topics.add_argument("--prefix", default="", help="topic name prefix (tests)")
    topics.add_argument("--replication", type=int, default=None,
                        help="replication factor of created topics (default $BORG_TOPIC_REPLICATION or 1)")
    topics.set_defaults(fn=cmd_topics)

    tail = sub.add_parser("tail", help="pretty-print a topic with headers and trace ids")
    tail.add_argument("topic", nargs="+", help="one or more registry topics")
    tail.add_argument("--from-beginning", action="store_true")
    tail.add_argument("-n", "--limit", type=int, default=None, help="stop after N messages")
    tail.add_argument("--headers", action="store_true", help="print every header")
    tail.add_argument("--summary", action="store_true", help="one line per message (decisions, actions, dead letters)")
    tail.add_argument("--seconds", type=float, default=None, help="stop after this many seconds")
    tail.set_defaults(fn=cmd_tail)

    serve = sub.add_parser("serve", help="run one service in the foreground")
    serve.add_argument("service", help=", ".join(s.name for s in SERVICES))
    serve.add_argument("rest", nargs=argparse.REMAINDER)
    serve.set_defaults(fn=cmd_serve)

    for name, help_text in DELEGATED.items():
        p = sub.add_parser(name, help=help_text, add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(fn=lambda a, n=name: _delegated(n, a.rest))

    train = sub.add_parser("train", help="train a model: failure, regime, regime-pods, anomaly, forecast, placement, "
                           "pod-pressure",
                           add_help=False)
    train.add_argument("model", choices=sorted(TRAIN))
    train.add_argument("rest", nargs=argparse.REMAINDER)
    train.set_defaults(fn=lambda a: _train(a.model, a.rest))

    ev = sub.add_parser("eval", help="evaluate: failure, failure-rolling, regime, forecast, arena, drift",
                        add_help=False)
    ev.add_argument("model", choices=sorted(EVAL))
    ev.add_argument("rest", nargs=argparse.REMAINDER)
    ev.set_defaults(fn=lambda a: _eval(a.model, a.rest))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    try:
        # Delegated commands own their arguments (argparse's REMAINDER drops leading options).
        if argv and argv[0] in DELEGATED:
            if argv[0] in STOP_ON_SIGTERM:
                # as Ctrl-C: the command's clean-up runs (child processes stopped, scratch topics deleted)
                signal.signal(signal.SIGTERM, signal.default_int_handler)
            return _delegated(argv[0], argv[1:])
        if len(argv) >= 2 and argv[0] == "train" and argv[1] in TRAIN:
            return _train(argv[1], argv[2:])
        if len(argv) >= 2 and argv[0] == "eval" and argv[1] in EVAL:
            return _eval(argv[1], argv[2:])
        args = parser.parse_args(argv)
        code: int = args.fn(args)
        return code
    except UserError as exc:
        print(f"borgctl: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
