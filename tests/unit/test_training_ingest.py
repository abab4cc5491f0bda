"""Both trace formats read to the same canonical frame; bad input names file and line."""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest

from training.errors import IngestError
from training.ingest import load_job_events, load_task_events, part_files
from training.synthetic_trace import (
    SyntheticConfig,
    SyntheticTrace,
    events_frame,
    generate,
    write_google2011,
    write_google2019,
)

COMMON = ["time_us", "job_id", "task_index", "machine_id", "event_type", "scheduling_class", "priority",
          "cpu_request", "memory_request"]
GOOD_ROW = "5000000,,42,0,7,1,user,2,9,0.125,0.07446,0.0004244,0"


@pytest.fixture(scope="module")
def trace_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[SyntheticTrace, Path]:
    trace = generate(SyntheticConfig(seed=5, duration_s=2 * 3600, n_jobs=60))
    root = tmp_path_factory.mktemp("trace")
    write_google2011(trace, root / "g2011")
    write_google2019(trace, root / "jsonl", "jsonl")
    write_google2019(trace, root / "parquet", "parquet")
    return trace, root


def write_gz(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        fh.write("".join(line + "\n" for line in lines))
    return path


def test_2011_csv_parts_read_back_exactly(trace_dirs: tuple[SyntheticTrace, Path]) -> None:
    trace, root = trace_dirs
    messages: list[str] = []
    loaded = load_task_events(root / "g2011" / "task_events", messages.append)
    assert loaded.equals(events_frame(trace.task_events))
    assert len(messages) == 3 and all("rows" in m for m in messages)  # progress per part file
    jobs = load_job_events(root / "g2011" / "job_events")
    assert jobs.height == len(trace.job_events) and jobs["job_id"].null_count() == 0


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_2019_instance_events_map_onto_the_same_frame(trace_dirs: tuple[SyntheticTrace, Path], fmt: str) -> None:
    _, root = trace_dirs
    reference = load_task_events(root / "g2011" / "task_events")
    loaded = load_task_events(root / fmt / "instance_events")
    assert loaded.select(COMMON).equals(reference.select(COMMON))
    assert loaded["user"].null_count() == loaded.height  # the 2019 table has no user column


def test_after_trace_sentinel_rows_are_dropped(tmp_path: Path) -> None:
    write_gz(tmp_path / "t" / "part-00000.csv.gz", [GOOD_ROW, GOOD_ROW.replace("5000000", str(2**63 - 1), 1)])
    assert load_task_events(tmp_path / "t").height == 1


@pytest.mark.parametrize(("line", "message"), [
    (GOOD_ROW.replace(",1,user", ",x,user"), r"part-00000.csv.gz:2: column event_type: 'x' is not an integer"),
    (GOOD_ROW.replace("0.125", "lots"), r"part-00000.csv.gz:2: column cpu_request: 'lots' is not a number"),
    ("5000000,,42,0,7,1", r"part-00000.csv.gz:2: expected 13 comma-separated fields, found 6"),
    (GOOD_ROW + ",extra", r"part-00000.csv.gz:2: expected 13 comma-separated fields, found 14"),
    (GOOD_ROW.replace(",42,", ",,"), r"part-00000.csv.gz:2: missing required field job_id"),
    (GOOD_ROW.replace(",1,user", ",11,user"), r"part-00000.csv.gz:2: event_type 11 is not 0..8"),
])
def test_a_bad_row_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    write_gz(tmp_path / "t" / "part-00000.csv.gz", [GOOD_ROW, line, GOOD_ROW])
    with pytest.raises(IngestError, match=message):
        load_task_events(tmp_path / "t")


def test_a_bad_json_line_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "i").mkdir()
    good = '{"time": "1", "type": 0, "collection_id": "4", "instance_index": 0}'
    (tmp_path / "i" / "part-0.json").write_text(good + "\n{not json\n")
    with pytest.raises(IngestError, match=r"part-0.json:2: invalid JSON"):
        load_task_events(tmp_path / "i")


def test_directory_problems_are_reported(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="no such directory"):
        part_files(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(IngestError, match="no part files"):
        part_files(tmp_path / "empty")
    write_gz(tmp_path / "mixed" / "a.csv.gz", [GOOD_ROW])
    (tmp_path / "mixed" / "b.parquet").write_bytes(b"")
    with pytest.raises(IngestError, match="mixes"):
        part_files(tmp_path / "mixed")


def test_a_corrupt_gzip_part_is_reported(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "part-00000.csv.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(IngestError, match=r"part-00000.csv.gz"):
        load_task_events(tmp_path / "t")


def test_canonical_types() -> None:
    frame = events_frame([])
    assert frame.schema["time_us"] == pl.Int64 and frame.schema["event_type"] == pl.Int8
