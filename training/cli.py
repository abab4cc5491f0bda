"""Command-line entry points (wired into ``borgctl`` by the lead).

``train_failure(argv)`` and ``eval_failure(argv)`` return an exit code: 0 ok,
2 for a user mistake (one line on stderr, no traceback), 1 when the run itself
fails (e.g. the ONNX parity check). Also ``python -m training.cli
{train-failure,eval-failure} ...``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from training import settings
from training.errors import UserFacingError
from training.export_onnx import ParityError
from training.labels import parse_failure_events
from training.progress import Progress


class UsageError(UserFacingError):
    """Bad command-line arguments."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


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


def _train_parser(prog: str) -> _Parser:
    default = settings.google2011_dir()
    p = _Parser(prog=prog, description="Train XGBoost failure-risk models (one per horizon) and export ONNX.")
    p.add_argument("--task-events", type=Path, default=default / "task_events",
                   help="directory of task_events part files (default: $BORG_DATA_DIR/google2011/task_events)")
    p.add_argument("--job-events", type=Path, default=None,
                   help="directory of job_events part files (validated and described in the card)")
    p.add_argument("--out", type=Path, default=settings.DEFAULT_MODEL_DIR, help="model root (default models/failure)")
    p.add_argument("--horizons", type=_horizons, default=_horizons("300,900,3600"), help="seconds, e.g. 300,900,3600")
    p.add_argument("--failure-events", type=_failure_events, default=_failure_events("FAIL"),
                   help="terminal events counted as failure: FAIL[,EVICT,KILL,LOST]")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-fraction", type=float, default=0.7, help="time fraction used for training")
    p.add_argument("--version", default=None, help="version name (default: UTC time + data fingerprint)")
    p.add_argument("--no-set-current", action="store_true", help="do not point CURRENT at the new version")
    p.add_argument("--quiet", action="store_true")
    return p


def _eval_parser(prog: str) -> _Parser:
    p = _Parser(prog=prog, description="Evaluate a failure-risk model and its baselines on part files.")
    p.add_argument("--task-events", type=Path, required=True, help="directory of task_events part files")
    p.add_argument("--job-events", type=Path, default=None, help="directory of job_events part files")
    p.add_argument("--model", type=Path, default=settings.DEFAULT_MODEL_DIR,
                   help="model version dir, or a model root with CURRENT (default: the shipped models/failure)")
    p.add_argument("--out", type=Path, required=True, help="report JSON path (PR-curve PNG is written beside it)")
    p.add_argument("--window", choices=("auto", "heldout", "all"), default="auto",
                   help="auto: held-out window if the files overlap the training data, else all points")
    p.add_argument("--quiet", action="store_true")
    return p


def _run(prog: str, action: str, argv: Sequence[str] | None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        if action == "train":
            return _train(prog, args_list)
        return _eval(prog, args_list)
    except UserFacingError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except ParityError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def _train(prog: str, argv: list[str]) -> int:
    from training.train import TrainConfig, train_failure_models

    args = _train_parser(prog).parse_args(argv)
    if not 0.0 < args.train_fraction < 1.0:
        raise UsageError("--train-fraction must be between 0 and 1")
    progress = Progress(enabled=not args.quiet)
    cfg = TrainConfig(task_events=args.task_events, job_events=args.job_events, out=args.out,
                      horizons_us=args.horizons, failure_types=args.failure_events, seed=args.seed,
                      train_fraction=args.train_fraction, version=args.version,
                      command=" ".join([prog, *map(shlex.quote, argv)]), set_current=not args.no_set_current)
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


def train_failure(argv: Sequence[str] | None = None) -> int:
    """``borgctl train failure [--task-events DIR] [--job-events DIR] [--out MODELDIR] ...``"""
    return _run("borgctl train failure", "train", argv)


def eval_failure(argv: Sequence[str] | None = None) -> int:
    """``borgctl eval failure --task-events DIR [--job-events DIR] [--model M] --out FILE``"""
    return _run("borgctl eval failure", "eval", argv)


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
    commands = {"train-failure": train_failure, "eval-failure": eval_failure}
    if not args or args[0] not in commands:
        print(f"usage: python -m training.cli {{{','.join(commands)}}} [options]", file=sys.stderr)
        return 2
    return commands[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
