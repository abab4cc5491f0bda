"""Read trace part files into canonical polars frames, one part at a time with progress.

Two task-event formats share one interface (``load_task_events``):

* Google 2011 ``task_events`` part files: CSV, optionally gzip, no header
  (``*.csv.gz`` / ``*.csv``), scanned lazily with an explicit schema;
* Google 2019 ``instance_events``: JSON lines (``*.json``, ``*.jsonl``,
  ``*.ndjson``, optionally ``.gz``) or parquet (``*.parquet``). Event types are
  mapped onto the 2011 vocabulary (QUEUE and ENABLE become UPDATE_PENDING);
  ``resource_request.cpus/memory`` become the cpu/memory requests; an optional
  ``user`` column is kept (the 2019 table has none: join collection_events
  first if you want user features).

The canonical frame has ``featurelib.task_features.EVENT_COLUMNS`` in input
order (parts sorted by name). Rows at the "after the trace" sentinel time
(2**63 - 1) are dropped. A malformed row raises ``IngestError`` naming the
file and line.
"""

from __future__ import annotations

import gzip
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import orjson
import polars as pl

from featurelib.task_features import EVENT_COLUMNS
from training.errors import IngestError

__all__ = ["IngestError", "load_job_events", "load_task_events", "part_files"]

SENTINEL_END_US: Final = 2**63 - 1

TASK_EVENTS_2011: Final[dict[str, pl.DataType]] = {
    "time_us": pl.Int64(), "missing_info": pl.Int8(), "job_id": pl.Int64(), "task_index": pl.Int64(),
    "machine_id": pl.Int64(), "event_type": pl.Int8(), "user": pl.String(), "scheduling_class": pl.Int8(),
    "priority": pl.Int16(), "cpu_request": pl.Float64(), "memory_request": pl.Float64(),
    "disk_request": pl.Float64(), "different_machines_restriction": pl.Int8(),
}
JOB_EVENTS_2011: Final[dict[str, pl.DataType]] = {
    "time_us": pl.Int64(), "missing_info": pl.Int8(), "job_id": pl.Int64(), "event_type": pl.Int8(),
    "user": pl.String(), "scheduling_class": pl.Int8(), "job_name": pl.String(),
    "logical_job_name": pl.String(),
}
CANONICAL_TASK_SCHEMA: Final[dict[str, pl.DataType]] = {c: TASK_EVENTS_2011[c] for c in EVENT_COLUMNS}
INSTANCE_EVENT_TYPES_2019: Final = {0: 0, 1: 7, 2: 7, 3: 1, 4: 2, 5: 3, 6: 4, 7: 5, 8: 6, 9: 7, 10: 8}
"""2019 type -> 2011 type (SUBMIT, QUEUE, ENABLE, SCHEDULE, EVICT, FAIL, FINISH, KILL, LOST, UPDATE_*)."""

_CSV_SUFFIXES: Final = (".csv", ".csv.gz")
_JSON_SUFFIXES: Final = (".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz", ".ndjson.gz")
_PARQUET_SUFFIXES: Final = (".parquet",)

Reporter = Callable[[str], None]


def _noop(_: str) -> None:
    return None


def part_files(directory: Path) -> tuple[str, list[Path]]:
    """The part files in ``directory`` and their format: ``csv``, ``json`` or ``parquet``."""
    if not directory.exists():
        raise IngestError(f"{directory}: no such directory")
    if not directory.is_dir():
        raise IngestError(f"{directory}: not a directory")
    found: dict[str, list[Path]] = {"csv": [], "json": [], "parquet": []}
    for path in sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith(".")):
        name = path.name.lower()
        for fmt, suffixes in (("csv", _CSV_SUFFIXES), ("json", _JSON_SUFFIXES), ("parquet", _PARQUET_SUFFIXES)):
            if name.endswith(suffixes):
                found[fmt].append(path)
    formats = [fmt for fmt, files in found.items() if files]
    if not formats:
        raise IngestError(f"{directory}: no part files (*.csv.gz, *.csv, *.json[l], *.parquet)")
    if len(formats) > 1:
        raise IngestError(f"{directory}: mixes {' and '.join(formats)} part files; use one format per directory")
    return formats[0], found[formats[0]]


def load_task_events(directory: Path, progress: Reporter = _noop) -> pl.DataFrame:
    """All task events under ``directory`` as one canonical frame (parts in name order)."""
    fmt, files = part_files(directory)
    frames = []
    for i, path in enumerate(files, 1):
        started = time.perf_counter()
        if fmt == "csv":
            frame = _read_2011_task_part(path)
        elif fmt == "json":
            frame = _instance_events_2019(_read_json_part(path), path)
        else:
            frame = _instance_events_2019(pl.read_parquet(path), path)
        dropped = frame.filter(pl.col("time_us") == SENTINEL_END_US).height
        frame = frame.filter(pl.col("time_us") != SENTINEL_END_US)
        note = f", {dropped} after-trace rows dropped" if dropped else ""
        progress(f"ingest {directory.name} {i}/{len(files)} {path.name}: {frame.height:,} rows "
                 f"({time.perf_counter() - started:.2f}s{note})")
        frames.append(frame)
    return pl.concat(frames, how="vertical")


def load_job_events(directory: Path, progress: Reporter = _noop) -> pl.DataFrame:
    """Google 2011 ``job_events`` part files (CSV, no header) as one frame."""
    fmt, files = part_files(directory)
    if fmt != "csv":
        raise IngestError(f"{directory}: job events must be Google 2011 CSV part files, found {fmt}")
    frames = []
    for i, path in enumerate(files, 1):
        started = time.perf_counter()
        frame = _read_csv_part(path, JOB_EVENTS_2011, required=("time_us", "job_id", "event_type"))
        progress(f"ingest {directory.name} {i}/{len(files)} {path.name}: {frame.height:,} rows "
                 f"({time.perf_counter() - started:.2f}s)")
        frames.append(frame)
    return pl.concat(frames, how="vertical")


def _read_2011_task_part(path: Path) -> pl.DataFrame:
    frame = _read_csv_part(path, TASK_EVENTS_2011, required=("time_us", "job_id", "task_index", "event_type"))
    return frame.select(EVENT_COLUMNS)


def _read_csv_part(path: Path, schema: dict[str, pl.DataType], required: tuple[str, ...]) -> pl.DataFrame:
    n_fields = len(schema)
    try:
        frame = pl.scan_csv(path, schema=schema, has_header=False).collect()
        commas = (
            pl.scan_csv(path, has_header=False, separator="\x1f", quote_char=None, schema={"line": pl.String()})
            .select(pl.col("line").str.count_matches(",", literal=True).alias("n"))
            .with_row_index("row")
            .filter(pl.col("n") != n_fields - 1)
            .head(1)
            .collect()
        )
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as exc:
        raise _locate_csv_error(path, schema, exc) from None
    if commas.height:
        row, n = commas.row(0)
        raise IngestError(f"{path}:{row + 1}: expected {n_fields} comma-separated fields, found {n + 1}")
    _check_required(frame, path, required)
    return frame


def _check_required(frame: pl.DataFrame, path: Path, required: tuple[str, ...]) -> None:
    et = pl.col("event_type")
    max_type = 8
    bad = (
        frame.with_row_index("row")
        .filter(pl.any_horizontal(pl.col(c).is_null() for c in required) | (pl.col("time_us") < 0)
                | (et < 0) | (et > max_type))
        .head(1)
    )
    if bad.height:
        row = bad.row(0, named=True)
        missing = [c for c in required if row[c] is None]
        if missing:
            why = f"missing required field {missing[0]}"
        elif row["time_us"] < 0:
            why = f"negative time {row['time_us']}"
        else:
            why = f"event_type {row['event_type']} is not 0..{max_type}"
        raise IngestError(f"{path}:{row['row'] + 1}: {why}")


def _open_text(path: Path) -> io.TextIOWrapper:
    if path.name.lower().endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return io.TextIOWrapper(open(path, "rb"), encoding="utf-8")


def _locate_csv_error(path: Path, schema: dict[str, pl.DataType], exc: Exception) -> IngestError:
    """Re-read a part that polars rejected, line by line, to name the first bad line."""
    names = list(schema)
    try:
        with _open_text(path) as fh:
            for lineno, line in enumerate(fh, 1):
                fields = line.rstrip("\r\n").split(",")
                if len(fields) != len(names):
                    return IngestError(f"{path}:{lineno}: expected {len(names)} comma-separated fields, "
                                       f"found {len(fields)}")
                for name, value in zip(names, fields, strict=True):
                    dtype = schema[name]
                    if value == "" or dtype == pl.String():
                        continue
                    try:
                        float(value) if dtype.is_float() else int(value)
                    except ValueError:
                        kind = "a number" if dtype.is_float() else "an integer"
                        return IngestError(f"{path}:{lineno}: column {name}: {value[:40]!r} is not {kind}")
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile) as read_exc:
        return IngestError(f"{path}: unreadable ({read_exc})")
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return IngestError(f"{path}: {first_line}")


def _read_json_part(path: Path) -> pl.DataFrame:
    try:
        if path.name.lower().endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                data = fh.read()
        else:
            data = path.read_bytes()
    except (OSError, EOFError) as exc:
        raise IngestError(f"{path}: unreadable ({exc})") from None
    for lineno, line in enumerate(data.splitlines(), 1):
        if line.strip():
            try:
                if not isinstance(orjson.loads(line), dict):
                    raise IngestError(f"{path}:{lineno}: not a JSON object")
            except orjson.JSONDecodeError as exc:
                raise IngestError(f"{path}:{lineno}: invalid JSON ({exc})") from None
    if not data.strip():
        return pl.DataFrame()
    return pl.read_ndjson(io.BytesIO(data), infer_schema_length=None)


def _instance_events_2019(raw: pl.DataFrame, path: Path) -> pl.DataFrame:
    """Map a 2019 ``instance_events`` frame onto the canonical task-event columns."""
    required = ("time", "type", "collection_id", "instance_index")
    missing = [c for c in required if c not in raw.columns]
    if missing:
        raise IngestError(f"{path}: not a 2019 instance_events file (missing {', '.join(missing)})")
    if "resource_request" in raw.columns and isinstance(raw.schema["resource_request"], pl.Struct):
        fields = {f.name for f in raw.schema["resource_request"].fields}
        cpus = pl.col("resource_request").struct.field("cpus") if "cpus" in fields else pl.lit(None)
        memory = pl.col("resource_request").struct.field("memory") if "memory" in fields else pl.lit(None)
    else:
        cpus = memory = pl.lit(None)

    def opt(name: str) -> pl.Expr:
        return pl.col(name) if name in raw.columns else pl.lit(None)

    mapped = raw.with_row_index("_row").select(
        "_row",
        pl.col("time").cast(pl.Int64, strict=False).alias("time_us"),
        pl.col("collection_id").cast(pl.Int64, strict=False).alias("job_id"),
        pl.col("instance_index").cast(pl.Int64, strict=False).alias("task_index"),
        opt("machine_id").cast(pl.Int64, strict=False).alias("machine_id"),
        pl.col("type").cast(pl.Int64, strict=False).alias("_type"),
        opt("user").cast(pl.String).alias("user"),
        opt("scheduling_class").cast(pl.Int8, strict=False).alias("scheduling_class"),
        opt("priority").cast(pl.Int16, strict=False).alias("priority"),
        cpus.cast(pl.Float64, strict=False).alias("cpu_request"),
        memory.cast(pl.Float64, strict=False).alias("memory_request"),
        pl.lit(None, pl.Float64).alias("disk_request"),
        pl.lit(None, pl.Int8).alias("different_machines_restriction"),
    )
    bad = mapped.filter(
        pl.any_horizontal(pl.col(c).is_null() for c in ("time_us", "job_id", "task_index", "_type"))
        | ~pl.col("_type").is_in(list(INSTANCE_EVENT_TYPES_2019))
    ).head(1)
    if bad.height:
        row = bad.row(0, named=True)
        raise IngestError(f"{path}:{row['_row'] + 1}: missing or invalid time/type/collection_id/instance_index")
    mapped = mapped.with_columns(
        pl.col("_type").replace_strict(INSTANCE_EVENT_TYPES_2019, return_dtype=pl.Int8).alias("event_type")
    )
    return mapped.select(pl.col(c).cast(t) for c, t in CANONICAL_TASK_SCHEMA.items())
