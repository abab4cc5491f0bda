"""Argument handling shared by the training and evaluation CLIs (``borgctl train|eval <model>``).

The options every trainer spells the same way (model root, version, CURRENT, seed, quick, quiet),
the parser whose mistakes are one line (exit 2), and the exit codes: 0 ok, 2 a mistake the user can
fix (one line on stderr, no traceback), 1 the run itself failed (an ONNX parity check), 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn, Protocol

from training import export_onnx
from training.errors import UserFacingError
from training.progress import Progress
from training.regime import artifacts

REPO_ROOT = Path(__file__).resolve().parent.parent
VERSION_HELP = "version name (default: UTC time + data fingerprint)"
PARITY_ERRORS: tuple[type[Exception], ...] = (export_onnx.ParityError, artifacts.ParityError)
TRAINER_ERRORS: tuple[type[Exception], ...] = (UserFacingError, FileExistsError, ValueError)
"""A simulator trainer's user mistakes: an existing --version, a size the simulator refuses."""


def comma_ints(text: str, minimum: int | None = None) -> list[int]:
    """An argparse ``type``: comma-separated integers, at least one, each ``>= minimum`` when given."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one integer, got {text!r}")
    if minimum is not None and min(values) < minimum:
        raise argparse.ArgumentTypeError(f"expected integers >= {minimum}, got {text!r}")
    return values


class UsageError(UserFacingError):
    """Bad command-line arguments."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose mistakes raise ``UsageError`` (one line) instead of printing the usage."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def add_model_root(p: argparse.ArgumentParser, model: str) -> None:
    """``--out``: the model root a new version is written under (default ``models/<model>``)."""
    p.add_argument("--out", type=Path, default=REPO_ROOT / "models" / model,
                   help=f"model root (default models/{model})")


def add_version(p: argparse.ArgumentParser, help: str | None = VERSION_HELP) -> None:
    """``--version``: the new version's directory name under the model root."""
    p.add_argument("--version", default=None, help=help)


def add_no_set_current(p: argparse.ArgumentParser,
                       help: str | None = "do not point CURRENT at the new version") -> None:
    """``--no-set-current``: write the version but leave ``CURRENT`` (what the services load) where it is."""
    p.add_argument("--no-set-current", action="store_true", help=help)


def add_seed(p: argparse.ArgumentParser, default: int, help: str | None = None) -> None:
    p.add_argument("--seed", type=int, default=default, help=help)


def add_quick(p: argparse.ArgumentParser, help: str | None = None) -> None:
    p.add_argument("--quick", action="store_true", help=help)


def add_quiet(p: argparse.ArgumentParser, *, short: bool = False) -> None:
    """``--quiet`` (and ``-q`` where the CLI has always taken it): no progress lines on stderr."""
    p.add_argument(*(("-q", "--quiet") if short else ("--quiet",)), action="store_true")


def command_line(prog: str, argv: Sequence[str]) -> str:
    """The command as typed, for the model card and reports (re-runnable in a shell)."""
    return " ".join([prog, *map(shlex.quote, argv)])


def run_cli(prog: str, body: Callable[[], int], *, error_prefix: str = "error: ",
            user_errors: tuple[type[Exception], ...] = (UserFacingError,)) -> int:
    """Run ``body`` and map what it raises to an exit code; a message is ``<prog>: <error_prefix><error>``."""
    try:
        return body()
    except (*user_errors, *PARITY_ERRORS) as exc:
        print(f"{prog}: {error_prefix}{exc}", file=sys.stderr)
        return 1 if isinstance(exc, PARITY_ERRORS) else 2
    except SystemExit as exc:  # --help (0), or argparse's own usage error (2, already printed)
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(f"{prog}: {error_prefix}{exc.code}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


class Trainer(Protocol):
    def __call__(self, args: argparse.Namespace, progress: Progress, *, command: str) -> Path: ...


def run_trainer(prog: str, argv: Sequence[str], parse: Callable[[list[str]], argparse.Namespace],
                train: Trainer) -> int:
    """A simulator trainer's entry point: parse, train with progress on stderr, exit code as ``run_cli``.

    Messages are ``train <model>: <error>`` (``prog`` without ``borgctl``), as these trainers always printed.
    """
    args_list = list(argv)

    def body() -> int:
        args = parse(args_list)
        progress = Progress(enabled=not args.quiet)
        path = train(args, progress, command=command_line(prog, args_list))
        progress(f"wrote {path}")
        return 0

    return run_cli(prog.removeprefix("borgctl "), body, error_prefix="", user_errors=TRAINER_ERRORS)
