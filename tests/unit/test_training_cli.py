"""User mistakes give one clear line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from training.cli import eval_failure, eval_failure_rolling, main, train_failure


def run(fn: object, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = fn(argv)  # type: ignore[operator]
    err = capsys.readouterr().err.strip()
    return code, err


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and "error:" in lines[0]
    for fragment in fragments:
        assert fragment in lines[0]


def test_missing_task_events_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(train_failure, ["--task-events", str(tmp_path / "nope"), "--out", str(tmp_path / "m")], capsys)
    assert_one_line_error(code, err, "nope", "no such directory")


def test_directory_without_part_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(eval_failure, ["--task-events", str(tmp_path), "--out", str(tmp_path / "r.json")], capsys)
    assert_one_line_error(code, err, "no part files")


def test_bad_row_is_named_with_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t").mkdir()
    with gzip.open(tmp_path / "t" / "part-00000-of-00001.csv.gz", "wt") as fh:
        fh.write("1,,2,0,5,0,u,1,2,0.1,0.2,0.3,0\n2,,2,0,5,one,u,1,2,0.1,0.2,0.3,0\n")
    code, err = run(train_failure, ["--task-events", str(tmp_path / "t"), "--out", str(tmp_path / "m")], capsys)
    assert_one_line_error(code, err, "part-00000-of-00001.csv.gz:2", "event_type")


@pytest.mark.parametrize(("argv", "fragment"), [
    (["--horizons", "5m"], "horizons"),
    (["--horizons", "0,300"], "positive"),
    (["--failure-events", "CRASH"], "unknown failure event CRASH"),
    (["--train-fraction", "1.5"], "--train-fraction"),
    (["--bogus"], "unrecognized arguments"),
])
def test_bad_training_arguments(argv: list[str], fragment: str, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(train_failure, [*argv, "--out", str(tmp_path)], capsys)
    assert_one_line_error(code, err, fragment)


@pytest.mark.parametrize(("argv", "fragment"), [
    (["--gaps", "-1"], "gaps"),
    (["--gaps", "2h"], "gaps"),
    (["--origins", "0.5,1.2"], "origins"),
    (["--test-span", "0"], "--test-span"),
])
def test_bad_rolling_arguments(argv: list[str], fragment: str, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(eval_failure_rolling, [*argv, "--out", str(tmp_path / "r.json")], capsys)
    assert_one_line_error(code, err, fragment)
    code, err = run(eval_failure_rolling, ["--task-events", str(tmp_path / "nope"), "--out", str(tmp_path)], capsys)
    assert_one_line_error(code, err, "nope")


def test_eval_requires_out_and_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(eval_failure, ["--task-events", str(tmp_path)], capsys)
    assert_one_line_error(code, err, "--out")
    (tmp_path / "m").mkdir()
    (tmp_path / "t").mkdir()
    with gzip.open(tmp_path / "t" / "part-00000-of-00001.csv.gz", "wt") as fh:
        fh.write("1,,2,0,5,0,u,1,2,0.1,0.2,0.3,0\n")
    code, err = run(eval_failure, ["--task-events", str(tmp_path / "t"), "--model", str(tmp_path / "m"),
                                   "--out", str(tmp_path / "r.json")], capsys)
    assert_one_line_error(code, err, "neither a model version")


def test_help_returns_zero_and_module_entry_needs_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert train_failure(["--help"]) == 0
    assert "--task-events" in capsys.readouterr().out
    assert main([]) == 2
