"""Task arrivals for the arena: Google 2011 ``task_events`` SUBMITs, or a seeded synthetic generator.

From the trace (``load_trace_tasks``): one task per (job, task index) whose first SUBMIT is after the
trace start (rows at time 0 are tasks already running when the trace began: censored, dropped). Its
duration runs from its first SCHEDULE to the first FINISH/FAIL/KILL/EVICT/LOST after it; a task
still running when the parts end is censored and capped (``max_duration_s``). A task never scheduled
in the parts gets the median duration of the scheduled ones (it was submitted; the arena places it).

``to_arrivals`` turns those rows into arena tasks:

* requests are the trace's normalised values (1.0 = the largest 2011 machine) scaled to an arena node
  that is ``node_fraction`` of that machine (default 1/8: a few tasks per node, so co-location choices
  matter); a task larger than a node is dropped (counted);
* time is compressed so the arrivals span ``horizon_s`` of arena time; durations are compressed by
  the same factor and capped at ``max_work_s`` (default horizon / 12: the trace's hours-long and
  censored tasks would otherwise hold the few arena nodes for the whole run, so nothing would be
  placed after the first minutes);
* tasks are sampled (seeded, independently) so the requested CPU offered to the cluster is
  ``target_load`` of it (a job keeps its kind for all its sampled tasks);
* latency-sensitive = scheduling class 2 or 3 (the trace's classes for latency-sensitive serving,
  2011 schema doc: "3 representing a more latency-sensitive task"); classes 0–1 are batch;
* workload class per job: latency-sensitive jobs draw ``frontend_bound`` or ``llc_sensitive``
  (serving-like), batch jobs ``cpu_bound`` or ``memory_bound``; the kind is the job's class's kind
  among ``kinds`` (the regime model's HELD-OUT kinds in an evaluation); intensity per task uniform in
  ``intensity`` (its pressure = kind pressure × intensity).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from simulator.workloads import KINDS

SUBMIT, SCHEDULE, EVICT, FAIL, FINISH, KILL, LOST = 0, 1, 2, 3, 4, 5, 6
END_EVENTS: Final = (EVICT, FAIL, FINISH, KILL, LOST)
LATENCY_SENSITIVE_SCHED_CLASSES: Final = (2, 3)
LS_CLASSES: Final = ("frontend_bound", "llc_sensitive")
BATCH_CLASSES: Final = ("cpu_bound", "memory_bound")


@dataclass(frozen=True, slots=True)
class TraceTask:
    """One trace task: times in seconds from the trace start, requests normalised 0–1."""

    job_id: int
    task_index: int
    submit_s: float
    duration_s: float
    censored: bool
    cpu: float
    memory: float
    priority: int
    scheduling_class: int


@dataclass(frozen=True, slots=True)
class Arrival:
    """One arena task: arena seconds, requests in node units (0–1 of one arena node)."""

    task_id: int
    job_id: int
    submit_s: float
    work_s: float
    """Run time when never slowed down."""
    cpu: float
    memory: float
    latency_sensitive: bool
    kind: str
    workload_class: str
    intensity: float

    @property
    def pressure(self) -> tuple[float, float, float, float]:
        p = KINDS[self.kind].pressure
        return (p[0] * self.intensity, p[1] * self.intensity, p[2] * self.intensity, p[3] * self.intensity)


@dataclass(frozen=True, slots=True)
class ArrivalStats:
    source: str
    tasks_read: int
    jobs_read: int
    dropped_too_large: int
    jobs_kept: int
    tasks_kept: int
    task_sample_fraction: float
    compression: float
    censored: int

    def as_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__slots__}


def load_trace_tasks(directory: Path, parts: int, max_duration_s: float = 6 * 3600.0) -> list[TraceTask]:
    """Tasks of the first ``parts`` part files of a Google 2011 ``task_events`` directory."""
    import polars as pl

    from training.ingest import TASK_EVENTS_2011, part_files

    fmt, files = part_files(directory)
    if fmt != "csv":
        raise ValueError(f"{directory}: the arena reads Google 2011 CSV task_events parts, found {fmt}")
    cols = ["time_us", "job_id", "task_index", "event_type", "scheduling_class", "priority", "cpu_request",
            "memory_request"]
    frame = pl.concat([pl.read_csv(p, has_header=False, schema=TASK_EVENTS_2011).select(cols)
                       for p in files[:parts]], how="vertical")
    return tasks_from_events(frame.rows(), max_duration_s)


def tasks_from_events(rows: Sequence[tuple[int, int, int, int, int, int, float | None, float | None]],
                      max_duration_s: float) -> list[TraceTask]:
    """Tasks from (time_us, job_id, task_index, event_type, scheduling_class, priority, cpu, memory) rows."""
    submit: dict[tuple[int, int], tuple[int, int, int, float, float]] = {}
    scheduled: dict[tuple[int, int], int] = {}
    ended: dict[tuple[int, int], int] = {}
    last_us = 0
    for time_us, job, index, event, sched, prio, cpu, mem in rows:
        key = (job, index)
        last_us = max(last_us, time_us)
        if event == SUBMIT and key not in submit:
            if time_us > 0 and cpu is not None and mem is not None:
                submit[key] = (time_us, sched, prio, float(cpu), float(mem))
        elif event == SCHEDULE and key in submit and key not in scheduled:
            scheduled[key] = time_us
        elif event in END_EVENTS and key in scheduled and key not in ended:
            ended[key] = time_us
    durations = [(ended[k] - scheduled[k]) / 1e6 for k in ended]
    fallback = float(np.median(durations)) if durations else 60.0
    out: list[TraceTask] = []
    for key, (t_us, sched, prio, cpu, mem) in submit.items():
        if key in ended:
            dur, censored = (ended[key] - scheduled[key]) / 1e6, False
        elif key in scheduled:
            dur, censored = (last_us - scheduled[key]) / 1e6, True
        else:
            dur, censored = fallback, True
        if dur > max_duration_s:
            dur, censored = max_duration_s, True
        out.append(TraceTask(key[0], key[1], t_us / 1e6, max(dur, 1.0), censored, cpu, mem, prio, sched))
    out.sort(key=lambda t: (t.submit_s, t.job_id, t.task_index))
    return out


def synthetic_tasks(n_jobs: int, seed: int, span_s: float = 3600.0) -> list[TraceTask]:
    """Trace-like tasks for tests and runs without the shared data (request and duration shapes
    roughly those of the 2011 parts: small CPU requests, log-normal durations, ~30 % latency-sensitive)."""
    rng = np.random.default_rng(seed)
    out: list[TraceTask] = []
    for job in range(n_jobs):
        t0 = float(rng.uniform(1.0, span_s))
        sched = int(rng.choice(4, p=[0.45, 0.25, 0.2, 0.1]))
        prio = int(rng.choice([0, 2, 4, 9]))
        cpu = float(rng.choice([0.0125, 0.025, 0.05, 0.0625]))
        mem = float(rng.uniform(0.005, 0.04))
        for index in range(int(rng.integers(1, 6))):
            dur = float(np.clip(rng.lognormal(np.log(600.0), 1.0), 10.0, 6 * 3600.0))
            out.append(TraceTask(job, index, t0 + index * 0.5, dur, False, cpu, mem, prio, sched))
    out.sort(key=lambda t: (t.submit_s, t.job_id, t.task_index))
    return out


def _kind_of_class(kinds: Sequence[str], workload_class: str) -> tuple[str, ...]:
    return tuple(k for k in kinds if KINDS[k].workload_class == workload_class)


def to_arrivals(
    tasks: Sequence[TraceTask],
    *,
    kinds: Sequence[str],
    nodes: int,
    seed: int,
    horizon_s: float,
    node_fraction: float = 0.125,
    target_load: float = 0.7,
    intensity: tuple[float, float] = (0.5, 1.0),
    max_work_s: float | None = None,
    source: str = "trace",
) -> tuple[list[Arrival], ArrivalStats]:
    """Arena arrivals (sorted by submit time) from trace tasks; see the module docstring."""
    for group in (LS_CLASSES, BATCH_CLASSES):
        if not any(_kind_of_class(kinds, c) for c in group):
            raise ValueError(f"kinds {list(kinds)} include none of the classes {group}")
    rng = np.random.default_rng(seed)
    fitting = [t for t in tasks if 0 < t.cpu <= node_fraction and t.memory <= node_fraction]
    dropped = len(tasks) - len(fitting)
    if not fitting:
        return [], ArrivalStats(source, len(tasks), 0, dropped, 0, 0, 0.0, 1.0, 0)
    t0 = min(t.submit_s for t in fitting)
    span = max(max(t.submit_s for t in fitting) - t0, 1.0)
    compression = span / horizon_s
    cap = max_work_s if max_work_s is not None else horizon_s / 12.0

    def work(t: TraceTask) -> float:
        return min(max(t.duration_s / compression, 1.0), cap)

    # offered requested CPU (node units, averaged over the horizon) if every task were kept
    offered = sum(t.cpu / node_fraction * work(t) for t in fitting) / horizon_s
    fraction = min(1.0, target_load * nodes / offered) if offered > 0 else 1.0
    keep_task = rng.random(len(fitting)) < fraction
    keep = {t.job_id for t, k in zip(fitting, keep_task, strict=True) if k}
    job_class: dict[int, str] = {}
    out: list[Arrival] = []
    for t, kept in zip(fitting, keep_task.tolist(), strict=True):
        if not kept:
            continue
        ls = t.scheduling_class in LATENCY_SENSITIVE_SCHED_CLASSES
        if t.job_id not in job_class:
            pool = [c for c in (LS_CLASSES if ls else BATCH_CLASSES) if _kind_of_class(kinds, c)]
            job_class[t.job_id] = pool[int(rng.integers(len(pool)))]
        cls = job_class[t.job_id]
        members = _kind_of_class(kinds, cls)
        kind = members[t.job_id % len(members)]
        out.append(Arrival(len(out), t.job_id, (t.submit_s - t0) / compression,
                           work(t), t.cpu / node_fraction, t.memory / node_fraction,
                           ls, kind, cls, float(rng.uniform(*intensity))))
    censored = sum(1 for t, k in zip(fitting, keep_task.tolist(), strict=True) if k and t.censored)
    stats = ArrivalStats(source, len(tasks), len({t.job_id for t in tasks}), dropped, len(keep), len(out),
                         fraction, compression, censored)
    return out, stats
