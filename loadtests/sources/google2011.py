"""Google cluster trace 2011 task_events part files → TaskEvent (taskevents.v1), in file order.

Columns (schema v2.1, no header): time_us, missing_info, job_id, task_index, machine_id,
event_type, user, scheduling_class, priority, cpu_request, memory_request, disk_request,
different_machines_restriction. ``task_id = f"{job_id}-{task_index}"``, ``machine = f"m{machine_id}"``,
``ts_ms = start + time_us / 1000 / speedup``; event types map to the Borg names in
contracts.models.BORG_EVENT_TYPES (0 SUBMIT … 8 UPDATE_RUNNING).
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from contracts.models import BORG_EVENT_TYPES
from contracts.topics import Topic
from loadtests.sources import Chunk, Clock
from services.node_agent.errors import InputLineError

COLUMNS = 13
# The trace marks events after its end with 2^63 - 1; anything this large is "after the end".
_AFTER_END_US = 2**62


def task_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no such file or directory: {path}")
    base = path / "task_events" if (path / "task_events").is_dir() else path
    files = sorted(p for p in base.iterdir() if p.is_file() and ".csv" in p.name)
    if not files:
        raise FileNotFoundError(f"no task_events part files (*.csv or *.csv.gz) in {base}")
    return files


def _open(file: Path) -> IO[str]:
    if file.suffix == ".gz":
        return gzip.open(file, "rt", encoding="utf-8", newline="")
    return file.open(encoding="utf-8", newline="")


def _optional_int(text: str, column: str, file: str, line: int, raw: str) -> int | None:
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise InputLineError(file, line, f"{column}: not an integer ({text!r})", raw) from None


def _int(text: str, column: str, file: str, line: int, raw: str) -> int:
    value = _optional_int(text, column, file, line, raw)
    if value is None:
        raise InputLineError(file, line, f"{column} is empty", raw)
    return value


def _float(text: str, column: str, file: str, line: int, raw: str) -> float | None:
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputLineError(file, line, f"{column}: not a number ({text!r})", raw) from None
    if not math.isfinite(value) or value < 0:
        raise InputLineError(file, line, f"{column}: must be a finite number >= 0", raw)
    return value


def task_event(raw: str, file: str, line: int, clock: Clock) -> dict[str, Any]:
    """One task_events row → a TaskEvent-shaped dict (raises InputLineError naming file:line)."""
    f = raw.rstrip("\r\n").split(",")
    if len(f) != COLUMNS:
        raise InputLineError(file, line, f"expected {COLUMNS} columns, got {len(f)}", raw)
    time_us = _int(f[0], "time", file, line, raw)
    job = _int(f[2], "job_id", file, line, raw)
    index = _int(f[3], "task_index", file, line, raw)
    kind = _int(f[5], "event_type", file, line, raw)
    if time_us < 0 or job < 0 or index < 0:
        raise InputLineError(file, line, "time, job_id and task_index must be >= 0", raw)
    if not 0 <= kind < len(BORG_EVENT_TYPES):
        raise InputLineError(file, line, f"event_type {kind} is not one of 0..{len(BORG_EVENT_TYPES) - 1}", raw)
    machine = _optional_int(f[4], "machine_id", file, line, raw)
    sched = _optional_int(f[7], "scheduling_class", file, line, raw)
    if sched is not None and not 0 <= sched <= 3:
        raise InputLineError(file, line, f"scheduling_class {sched} is not 0..3", raw)
    restriction = _optional_int(f[12], "different_machines_restriction", file, line, raw)
    trace_us = min(time_us, _AFTER_END_US)
    return {
        "task_id": f"{job}-{index}",
        "job_id": str(job),
        "task_index": index,
        "ts_ms": clock.ts_ms(trace_us / 1e6),
        "event": BORG_EVENT_TYPES[kind],
        "source": "google2011",
        "trace_time_us": time_us,
        "machine": None if machine is None else f"m{machine}",
        "user": f[6] or None,
        "scheduling_class": sched,
        "priority": _optional_int(f[8], "priority", file, line, raw),
        "cpu_request": _float(f[9], "cpu_request", file, line, raw),
        "memory_request": _float(f[10], "memory_request", file, line, raw),
        "disk_request": _float(f[11], "disk_request", file, line, raw),
        "different_machines_restriction": None if restriction is None else bool(restriction),
        "missing_info": f[1] != "",
    }


class Google2011Replay:
    base_topic = Topic.TASKEVENTS
    what = "TaskEvent"

    def __init__(self, path: Path) -> None:
        self.files = task_files(path)
        self.after_end = 0
        """Rows stamped after the trace window (2^63-1 in the trace): skipped, counted."""

    def chunks(self, clock: Clock) -> Iterator[Chunk]:
        chunk: Chunk | None = None
        for file in self.files:
            with _open(file) as fh:
                for number, raw in enumerate(fh, start=1):
                    if not raw.strip():
                        continue
                    event = task_event(raw, str(file), number, clock)
                    if event["trace_time_us"] >= _AFTER_END_US:
                        self.after_end += 1
                        continue
                    due = clock.due_s(event["trace_time_us"] / 1e6)
                    if chunk is None or chunk.due_s != due or len(chunk.records) >= 500:
                        if chunk is not None:
                            yield chunk
                        chunk = Chunk(due)
                    chunk.records.append((event["task_id"].encode(), orjson.dumps(event)))
        if chunk is not None:
            yield chunk
