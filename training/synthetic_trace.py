"""A small synthetic Borg-like trace, written in the 2011 and 2019 formats, for tests.

The generator is deterministic for a seed and has learnable structure: some
logical programs crash-loop (their tasks FAIL soon after SCHEDULE and are
resubmitted), some users are sloppy, some machines are flaky, low-priority
tasks get evicted. Tasks already running at time 0 mimic the 2011 trace's
censored start.
"""

from __future__ import annotations

import csv
import gzip
import random
from dataclasses import dataclass, replace
from pathlib import Path

import orjson
import polars as pl

from featurelib.task_features import EVENT_COLUMNS, TaskEvent

JOB_EVENT_COLUMNS = ("time_us", "missing_info", "job_id", "event_type", "user", "scheduling_class",
                     "job_name", "logical_job_name")
_TO_2019 = {0: 0, 1: 3, 2: 4, 3: 5, 4: 6, 5: 7, 6: 8, 7: 9, 8: 10}
_SECOND = 1_000_000
TRACE_START_US = 600 * _SECOND
"""Like the 2011 trace: time 0 holds the tasks already present, real events start at 600 s."""


@dataclass(frozen=True, slots=True)
class SyntheticConfig:
    seed: int = 0
    duration_s: int = 6 * 3600
    n_machines: int = 40
    n_users: int = 10
    n_programs: int = 40
    n_jobs: int = 220
    n_initial_jobs: int = 15
    max_tasks_per_job: int = 10


@dataclass(frozen=True, slots=True)
class SyntheticTrace:
    task_events: list[TaskEvent]
    job_events: list[tuple[int, int | None, int, int, str, int, str, str]]
    end_us: int


def _b64ish(rng: random.Random) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    return "".join(rng.choice(alphabet) for _ in range(43)) + "="


def generate(config: SyntheticConfig = SyntheticConfig()) -> SyntheticTrace:
    """Simulate independent task lifecycles; events sorted by time (stable)."""
    rng = random.Random(config.seed)
    end_us = TRACE_START_US + config.duration_s * _SECOND
    machines = [rng.randrange(1, 2**32) for _ in range(config.n_machines)]
    flaky = {m for m in machines if rng.random() < 0.1}
    users = [_b64ish(rng) for _ in range(config.n_users)]
    sloppy = {u for u in users if rng.random() < 0.3}
    programs = [(_b64ish(rng), rng.random() < 0.15) for _ in range(config.n_programs)]
    events: list[TaskEvent] = []
    jobs: list[tuple[int, int | None, int, int, str, int, str, str]] = []
    for j in range(config.n_jobs):
        job_id = 3_000_000 + 7 * j + rng.randrange(7)
        initial = j < config.n_initial_jobs
        arrival = 0 if initial else rng.randrange(TRACE_START_US, end_us - 10 * _SECOND)
        user = rng.choice(users)
        logical, crashy = rng.choice(programs)
        priority = rng.choice([0, 0, 1, 2, 4, 4, 8, 9, 10, 11])
        sclass = rng.choice([0, 1, 1, 2, 3])
        p_fail = 0.6 if crashy else (0.12 if user in sloppy else 0.02)
        cpu, memory = round(rng.uniform(0.01, 0.3), 4), round(rng.uniform(0.005, 0.2), 5)
        disk = round(rng.uniform(0.0001, 0.01), 6)
        restriction = int(rng.random() < 0.1)
        jobs.append((arrival, None, job_id, 0, user, sclass, _b64ish(rng), logical))
        last_end = arrival
        for task_index in range(rng.randint(1, config.max_tasks_per_job)):
            base = TaskEvent(time_us=0, job_id=job_id, task_index=task_index, event_type=0, user=user,
                             scheduling_class=sclass, priority=priority,
                             different_machines_restriction=restriction)
            t_end = _task_lifecycle(rng, events, base, arrival, end_us, machines, flaky, p_fail, crashy,
                                    (cpu, memory, disk))
            last_end = max(last_end, t_end)
        if last_end < end_us:
            jobs.append((last_end, None, job_id, 4, user, sclass, "", logical))
    events.sort(key=lambda e: e.time_us)
    jobs.sort(key=lambda r: r[0])
    return SyntheticTrace(events, jobs, end_us)


def _task_lifecycle(rng: random.Random, events: list[TaskEvent], base: TaskEvent, arrival: int,
                    end_us: int, machines: list[int], flaky: set[int], p_fail: float, crashy: bool,
                    requests: tuple[float, float, float]) -> int:
    cpu, memory, disk = requests
    t = arrival if arrival == 0 else arrival + rng.randrange(0, 5 * _SECOND)
    present = arrival == 0
    for attempt in range(8):
        missing = rng.random() < 0.01
        req = replace(base, cpu_request=None if missing else cpu, memory_request=None if missing else memory,
                      disk_request=None if missing else disk)
        events.append(replace(req, time_us=t, event_type=0))
        if not present or attempt > 0:
            t += int(rng.expovariate(1 / 20) * _SECOND) + 1
        if t >= end_us:
            return t
        machine = rng.choice(machines)
        events.append(replace(req, time_us=t, event_type=1, machine_id=machine))
        present = False
        fail_p = min(0.95, p_fail + (0.3 if machine in flaky else 0.0))
        low_priority = (base.priority or 0) < 2
        u = rng.random()
        if u < fail_p:
            kind, mean_s = 3, (90 if crashy else 900)
        elif u < fail_p + (0.25 if low_priority else 0.02):
            kind, mean_s = 2, 1500
        elif u < fail_p + 0.3:
            kind, mean_s = 5, 1800
        elif machine in flaky and rng.random() < 0.05:
            kind, mean_s = 6, 1200
        else:
            kind, mean_s = 4, 2400
        t_end = t + int(rng.expovariate(1 / mean_s) * _SECOND) + 1
        if rng.random() < 0.05 and t_end - t > 2:
            t_up = t + (t_end - t) // 2
            cpu = round(cpu * 1.5, 4)
            events.append(replace(base, time_us=t_up, event_type=8, machine_id=machine, cpu_request=cpu,
                                  memory_request=memory, disk_request=disk))
        if t_end >= end_us:
            return end_us
        events.append(replace(base, time_us=t_end, event_type=kind, machine_id=machine))
        t = t_end
        if kind not in (2, 3) or rng.random() > 0.85:
            return t
    return t


def events_frame(events: list[TaskEvent]) -> pl.DataFrame:
    """Task events as a canonical frame (same columns and types as ``training.ingest``)."""
    from training.ingest import CANONICAL_TASK_SCHEMA

    return pl.DataFrame([[getattr(e, c) for c in EVENT_COLUMNS] for e in events],
                        schema=CANONICAL_TASK_SCHEMA, orient="row")


def _fmt(value: object) -> str:
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def _time_parts(times: list[int], end_us: int, n_parts: int) -> list[int]:
    step = max(1, end_us // n_parts)
    return [min(t // step, n_parts - 1) for t in times]


def write_google2011(trace: SyntheticTrace, out_dir: Path, n_parts: int = 3) -> tuple[Path, Path]:
    """``out_dir/task_events`` and ``out_dir/job_events`` gzip CSV part files, no header."""
    task_dir, job_dir = out_dir / "task_events", out_dir / "job_events"
    task_dir.mkdir(parents=True, exist_ok=True)
    job_dir.mkdir(parents=True, exist_ok=True)
    task_rows = [
        (e.time_us, "", e.job_id, e.task_index, e.machine_id, e.event_type, e.user, e.scheduling_class,
         e.priority, e.cpu_request, e.memory_request, e.disk_request, e.different_machines_restriction)
        for e in trace.task_events
    ]
    for directory, rows in ((task_dir, task_rows), (job_dir, trace.job_events)):
        parts = _time_parts([int(str(r[0])) for r in rows], trace.end_us, n_parts)
        for k in range(n_parts):
            with gzip.open(directory / f"part-{k:05d}-of-{n_parts:05d}.csv.gz", "wt", newline="") as fh:
                writer = csv.writer(fh, lineterminator="\n")
                writer.writerows([_fmt(v) for v in row] for row, p in zip(rows, parts, strict=True) if p == k)
    return task_dir, job_dir


def write_google2019(trace: SyntheticTrace, out_dir: Path, fmt: str = "jsonl", n_parts: int = 2) -> Path:
    """``out_dir/instance_events`` in the 2019 schema: JSON lines (BigQuery style) or parquet."""
    directory = out_dir / "instance_events"
    directory.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, object]] = [
        {"time": str(e.time_us), "type": _TO_2019[e.event_type], "collection_id": str(e.job_id),
         "scheduling_class": e.scheduling_class, "missing_type": None, "collection_type": 0,
         "priority": e.priority, "alloc_collection_id": "0", "instance_index": e.task_index,
         "machine_id": None if e.machine_id is None else str(e.machine_id), "alloc_instance_index": -1,
         "resource_request": {"cpus": e.cpu_request, "memory": e.memory_request}, "constraint": []}
        for e in trace.task_events
    ]
    parts = _time_parts([e.time_us for e in trace.task_events], trace.end_us, n_parts)
    for k in range(n_parts):
        chunk = [r for r, p in zip(records, parts, strict=True) if p == k]
        if fmt == "jsonl":
            (directory / f"part-{k:05d}.json").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in chunk))
        elif fmt == "parquet":
            frame = pl.DataFrame(chunk, infer_schema_length=None).with_columns(
                pl.col("time", "collection_id", "machine_id", "alloc_collection_id").cast(pl.Int64))
            frame.write_parquet(directory / f"part-{k:05d}.parquet")
        else:
            raise ValueError(f"unknown format {fmt!r}")
    return directory
