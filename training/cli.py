"""Command-line entry points (wired into ``borgctl`` by the lead).

``train_failure(argv)``, ``eval_failure(argv)`` and ``eval_failure_rolling(argv)`` return an exit code: 0 ok,
2 for a user mistake (one line on stderr, no traceback), 1 when the run itself
fails (e.g. the ONNX parity check). Also ``python -m training.cli
{train-failure,eval-failure,eval-failure-rolling} ...``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from training import cli_args, settings
from training.labels import parse_failure_events
from training.progress import Progress


def _horizons(text: str) -> tuple[int, ...]:
    try:
        seconds = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"horizons must be whole seconds, e.g. 300,900,3600 (got {text!r})") from None
    if not seconds or seconds[0] <= 0:
        raise argparse.ArgumentTypeError(f"horizons must be positive seconds (got {text!r})")
    return tuple(s * 1_000_000 for s in seconds)


def _failure_events(text: str) -> tuple[int, ...]:
    try:
        return parse_failure_events(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _task_events(p: cli_args.Parser) -> None:
    p.add_argument("--task-events", type=Path, default=settings.google2011_dir() / "task_events",
                   help="directory of task_events part files (default: $BORG_DATA_DIR/google2011/task_events)")


def _labels(p: cli_args.Parser) -> None:
    """What is predicted: the horizons and which terminal events count as a failure."""
    p.add_argument("--horizons", type=_horizons, default=_horizons("300,900,3600"), help="seconds, e.g. 300,900,3600")
    p.add_argument("--failure-events", type=_failure_events, default=_failure_events("FAIL"),
                   help="terminal events counted as failure: FAIL[,EVICT,KILL,LOST]")


def _train_parser(prog: str) -> cli_args.Parser:
    p = cli_args.Parser(prog=prog, description="Train XGBoost failure-risk models (one per horizon) and export ONNX.")
    _task_events(p)
    p.add_argument("--job-events", type=Path, default=None,
                   help="directory of job_events part files (validated and described in the card)")
    cli_args.add_model_root(p, "failure")
    _labels(p)
    cli_args.add_seed(p, 0)
    p.add_argument("--train-fraction", type=float, default=0.7, help="time fraction used for training")
    cli_args.add_version(p)
    cli_args.add_no_set_current(p)
    p.add_argument("--rolling-report", type=Path, default=None,
                   help="a `borgctl eval failure-rolling` report whose figures go into the model card")
    cli_args.add_quiet(p)
    return p


def _gaps(text: str) -> tuple[int, ...]:
    try:
        hours = sorted({float(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"gaps must be hours, e.g. 0,2,4 (got {text!r})") from None
    if not hours or hours[0] < 0:
        raise argparse.ArgumentTypeError(f"gaps must be hours >= 0 (got {text!r})")
    return tuple(int(h * 3_600_000_000) for h in hours)


def _origins(text: str) -> tuple[float, ...]:
    try:
        values = sorted({float(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"origins must be fractions, e.g. 0.4,0.55,0.7 (got {text!r})") from None
    if not values or values[0] <= 0 or values[-1] >= 1:
        raise argparse.ArgumentTypeError(f"origins must be fractions in (0, 1) (got {text!r})")
    return tuple(values)


def _rolling_parser(prog: str) -> cli_args.Parser:
    p = cli_args.Parser(prog=prog, description="Rolling-origin evaluation of the failure-model training recipe: "
                        "retrain on earlier hours, test on later ones (cold history, as later part files), per gap "
                        "and horizon.")
    _task_events(p)
    p.add_argument("--out", type=Path, required=True, help="report JSON (bench format + per-fold figures)")
    _labels(p)
    p.add_argument("--origins", type=_origins, default=_origins("0.4,0.55,0.7"),
                   help="fold origins as fractions of the prediction-point time range")
    p.add_argument("--gaps", type=_gaps, default=_gaps("0,2,4"),
                   help="hours between the origin (every training label settled) and the test window")
    p.add_argument("--test-span", type=float, default=2.0, help="hours per test window")
    cli_args.add_seed(p, 0)
    cli_args.add_quiet(p)
    return p


def _eval_parser(prog: str) -> cli_args.Parser:
    p = cli_args.Parser(prog=prog, description="Evaluate a failure-risk model and its baselines on part files.")
    p.add_argument("--task-events", type=Path, required=True, help="directory of task_events part files")
    p.add_argument("--job-events", type=Path, default=None, help="directory of job_events part files")
    p.add_argument("--model", type=Path, default=settings.DEFAULT_MODEL_DIR,
                   help="model version dir, or a model root with CURRENT (default: the shipped models/failure)")
    p.add_argument("--out", type=Path, required=True, help="report JSON path (PR-curve PNG is written beside it)")
    p.add_argument("--window", choices=("auto", "heldout", "all"), default="auto",
                   help="auto: held-out window if the files overlap the training data, else all points")
    cli_args.add_quiet(p)
    return p


def _run(prog: str, action: str, argv: Sequence[str] | None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    run = {"train": _train, "rolling": _rolling}.get(action, _eval)
    return cli_args.run_cli(prog, lambda: run(prog, args_list))


def _train(prog: str, argv: list[str]) -> int:
    from training.train import TrainConfig, train_failure_models

    args = _train_parser(prog).parse_args(argv)
    if not 0.0 < args.train_fraction < 1.0:
        raise cli_args.UsageError("--train-fraction must be between 0 and 1")
    progress = Progress(enabled=not args.quiet)
    cfg = TrainConfig(task_events=args.task_events, job_events=args.job_events, out=args.out,
                      horizons_us=args.horizons, failure_types=args.failure_events, seed=args.seed,
                      train_fraction=args.train_fraction, version=args.version, rolling_report=args.rolling_report,
                      command=cli_args.command_line(prog, argv), set_current=not args.no_set_current)
    out = train_failure_models(cfg, progress)
    progress(f"done: {out}")
    print(out)
    return 0


def _eval(prog: str, argv: list[str]) -> int:
    from training.evaluate import evaluate_failure, pr_png_path

    args = _eval_parser(prog).parse_args(argv)
    progress = Progress(enabled=not args.quiet)
    report = evaluate_failure(args.task_events, args.job_events, args.model, args.out, args.window, progress)
    progress(f"wrote {args.out} and {pr_png_path(args.out)}")
    print(f"model beats every baseline on AUCPR at every horizon: "
          f"{report['model_beats_every_baseline_aucpr_at_every_horizon']}")
    return 0


def _rolling(prog: str, argv: list[str]) -> int:
    from training import ingest
    from training.errors import DataError
    from training.recipe import Recipe
    from training.rolling import RollingConfig, rolling_evaluation, write_report

    args = _rolling_parser(prog).parse_args(argv)
    if args.test_span <= 0:
        raise cli_args.UsageError("--test-span must be positive hours")
    progress = Progress(enabled=not args.quiet)
    events = ingest.load_task_events(args.task_events, progress)
    if events.height == 0:
        raise DataError(f"{args.task_events}: no task events")
    cfg = RollingConfig(horizons_us=args.horizons, failure_types=args.failure_events, origins=args.origins,
                        gaps_us=args.gaps, test_span_us=int(args.test_span * 3_600_000_000), seed=args.seed)
    report = rolling_evaluation(events, Recipe(), cfg, progress)
    write_report(args.out, report, _machine(), cli_args.command_line(prog, argv))
    progress(f"wrote {args.out}")
    for key, gaps in report["summary"].items():
        print(f"horizon {key}: " + "; ".join(
            f"gap {gap}: AUCPR {_f(s['model_aucpr'])} vs best baseline {_f(s['best_baseline_aucpr'])} "
            f"(ratio mean {_f(s['ratio_mean'])}, min {_f(s['ratio_min'])}, {s['folds']} folds; "
            f"ceiling if crash loops were timed perfectly {_f(s.get('ceiling_ratio_mean'))})"
            for gap, s in gaps.items()))
    return 0


def _machine() -> dict[str, object]:
    from loadtests.bench_format import machine

    return machine()


def _f(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def train_failure(argv: Sequence[str] | None = None) -> int:
    """``borgctl train failure [--task-events DIR] [--job-events DIR] [--out MODELDIR] ...``"""
    return _run("borgctl train failure", "train", argv)


def eval_failure(argv: Sequence[str] | None = None) -> int:
    """``borgctl eval failure --task-events DIR [--job-events DIR] [--model M] --out FILE``"""
    return _run("borgctl eval failure", "eval", argv)


def eval_failure_rolling(argv: Sequence[str] | None = None) -> int:
    """``borgctl eval failure-rolling [--task-events DIR] --out FILE [--origins F,..] [--gaps H,..] ...``"""
    return _run("borgctl eval failure-rolling", "rolling", argv)


def train_regime(argv: Sequence[str] | None = None) -> int:
    """``borgctl train regime``: delegated to ``training.regime.cli``."""
    from training.regime.cli import train_regime as run_regime

    return run_regime(list(sys.argv[1:] if argv is None else argv))


def train_anomaly(argv: Sequence[str] | None = None) -> int:
    """``borgctl train anomaly``: delegated to ``training.anomaly.cli``."""
    from training.anomaly.cli import train_anomaly as run_anomaly

    return run_anomaly(list(sys.argv[1:] if argv is None else argv))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    commands = {"train-failure": train_failure, "eval-failure": eval_failure,
                "eval-failure-rolling": eval_failure_rolling}
    if not args or args[0] not in commands:
        print(f"usage: python -m training.cli {{{','.join(commands)}}} [options]", file=sys.stderr)
        return 2
    return commands[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
