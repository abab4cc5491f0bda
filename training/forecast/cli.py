"""``borgctl train forecast`` and ``borgctl eval forecast``: exit 0 ok, 2 user mistake (one line), 1 parity failure."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from training import cli_args, settings
from training.errors import UserFacingError
from training.progress import Progress

DEFAULT_OUT = settings.REPO_ROOT / "models" / "forecast"
USER_ERRORS = (UserFacingError, ValueError)  # a bad --train-end / --from time is a ValueError from parse_time


def _train_parser() -> cli_args.Parser:
    p = cli_args.Parser(prog="borgctl train forecast", description="Train the node load forecaster (CPU and memory "
                        "% 5/15/30 min ahead, p50 and p90) on Bitbrains-layout per-VM series.")
    p.add_argument("--data", type=Path, default=settings.data_dir() / "bitbrains_rnd",
                   help="directory of <vm>.csv[.gz] files, any depth (default $BORG_DATA_DIR/bitbrains_rnd)")
    cli_args.add_model_root(p, "forecast")
    cli_args.add_seed(p, 0, "VM split and sampling seed")
    p.add_argument("--train-end", default="2013-09-01T00:00:00Z",
                   help="targets up to this time train; later ones early-stop (training VMs) and score (held out)")
    p.add_argument("--holdout-fraction", type=float, default=0.2, help="fraction of VMs never trained on")
    cli_args.add_quick(p, "at most 60 VMs, fewer rows and rounds (< 1 min)")
    cli_args.add_version(p)
    cli_args.add_no_set_current(p)
    cli_args.add_quiet(p)
    return p


def _eval_parser() -> cli_args.Parser:
    p = cli_args.Parser(prog="borgctl eval forecast",
                        description="Score a forecast model and the baselines (bench format).")
    p.add_argument("--data", type=Path, default=settings.data_dir() / "bitbrains_rnd",
                   help="directory of <vm>.csv[.gz] files (default $BORG_DATA_DIR/bitbrains_rnd)")
    p.add_argument("--model", type=Path, default=DEFAULT_OUT, help="version dir or model root with CURRENT")
    p.add_argument("--from", dest="from_", default=None,
                   help="score targets after this ISO time (default: the end of the model's training window)")
    p.add_argument("--include-training-vms", action="store_true",
                   help="also score VMs the model trained on (recognised by content)")
    p.add_argument("--out", type=Path, required=True, help="report JSON (bench format)")
    cli_args.add_quiet(p)
    return p


def train_forecast(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    prog = "borgctl train forecast"

    def body() -> int:
        from training.forecast.evaluate import parse_time
        from training.forecast.model import Params
        from training.forecast.train import ForecastConfig
        from training.forecast.train import train_forecast as run

        args = _train_parser().parse_args(args_list)
        if not 0.0 < args.holdout_fraction < 1.0:
            raise cli_args.UsageError("--holdout-fraction must be between 0 and 1")
        quick = {"max_vms": 60, "train_rows_per_vm": 300, "val_rows_per_vm": 60,
                 "params": Params(rounds=60, patience=15)} if args.quick else {}
        cfg = ForecastConfig(data=args.data, out=args.out, seed=args.seed, train_end_s=parse_time(args.train_end),
                             holdout_fraction=args.holdout_fraction, version=args.version,
                             command=cli_args.command_line(prog, args_list),
                             set_current=not args.no_set_current, **quick)  # type: ignore[arg-type]
        progress = Progress(enabled=not args.quiet)
        out = run(cfg, progress)
        print(out)
        return 0

    return cli_args.run_cli(prog, body, user_errors=USER_ERRORS)


def eval_forecast(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    prog = "borgctl eval forecast"

    def body() -> int:
        from training.forecast.evaluate import evaluate_forecast, parse_time, write_doc
        from training.forecast.metrics import table

        args = _eval_parser().parse_args(args_list)
        after = None if args.from_ is None else parse_time(args.from_)
        progress = Progress(enabled=not args.quiet)
        report = evaluate_forecast(args.data, args.model, after, args.include_training_vms, progress)
        write_doc(args.out, report, cli_args.command_line(prog, args_list))
        print(table(report["cases"]))
        progress(f"wrote {args.out}")
        return 0

    return cli_args.run_cli(prog, body, user_errors=USER_ERRORS)
