"""The trainers' shared exit codes and options (training/cli_args.py)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest

from training import cli_args, export_onnx
from training.progress import Progress
from training.regime import artifacts


def _raises(error: BaseException) -> Callable[[], int]:
    def body() -> int:
        raise error

    return body


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (cli_args.UsageError("--x must be positive"), 2, "prog: error: --x must be positive"),
        (export_onnx.ParityError("parity 1e-3"), 1, "prog: error: parity 1e-3"),
        (artifacts.ParityError("parity 2e-3"), 1, "prog: error: parity 2e-3"),
        (SystemExit("--nodes must be positive"), 2, "prog: error: --nodes must be positive"),
        (KeyboardInterrupt(), 130, "prog: interrupted"),
    ],
)
def test_errors_become_one_line_and_an_exit_code(error: BaseException, code: int, line: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_args.run_cli("prog", _raises(error)) == code
    assert capsys.readouterr().err.strip().splitlines() == [line]


def test_help_exits_zero_and_other_errors_propagate() -> None:
    assert cli_args.run_cli("prog", _raises(SystemExit(0))) == 0
    with pytest.raises(ValueError, match="a bug"):
        cli_args.run_cli("prog", _raises(ValueError("a bug")))
    assert cli_args.run_cli("prog", _raises(ValueError("bad size")), user_errors=cli_args.TRAINER_ERRORS) == 2


def test_parser_mistakes_are_usage_errors() -> None:
    p = cli_args.Parser(prog="prog")
    cli_args.add_seed(p, 3)
    with pytest.raises(cli_args.UsageError, match="--seed"):
        p.parse_args(["--seed", "x"])


def test_run_trainer_passes_the_command_and_names_the_model(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    seen: dict[str, object] = {}

    def parse(argv: list[str]) -> argparse.Namespace:
        p = argparse.ArgumentParser()
        cli_args.add_model_root(p, "demo")
        cli_args.add_quiet(p, short=True)
        return p.parse_args(argv)

    def train(args: argparse.Namespace, progress: Progress, *, command: str) -> Path:
        seen.update(out=args.out, command=command)
        return tmp_path

    assert cli_args.run_trainer("borgctl train demo", ["-q", "--out", "my dir"], parse, train) == 0
    assert seen == {"out": Path("my dir"), "command": "borgctl train demo -q --out 'my dir'"}

    def refuse(args: argparse.Namespace, progress: Progress, *, command: str) -> Path:
        raise FileExistsError("version v1 exists")

    assert cli_args.run_trainer("borgctl train demo", ["-q"], parse, refuse) == 2
    assert capsys.readouterr().err.strip() == "train demo: version v1 exists"


def test_comma_ints_reads_a_list_and_names_what_is_wrong() -> None:
    comma_ints = cli_args.comma_ints
    assert comma_ints("1, 3,4,") == [1, 3, 4]
    assert comma_ints("0,-2") == [0, -2]  # no bound unless asked
    for text, minimum, said in (("1,x", None, "comma-separated integers"), (" , ", None, "at least one"),
                                ("2,0", 1, ">= 1")):
        with pytest.raises(argparse.ArgumentTypeError, match=said):
            comma_ints(text, minimum)
