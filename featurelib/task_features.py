"""Task failure-risk features: the ONE definition, used offline and online.

Three parts, one meaning:

* ``TASK_FEATURE_NAMES`` / ``task_feature_schema_hash()`` name the vector;
* ``TaskHistory`` is the incremental, pure-Python state machine the online
  risk service drives event by event (``observe`` then ``features``);
* ``task_features_frame`` is the vectorised polars twin used for training.
  A unit test proves both give identical numbers on synthetic traces.

Semantics (both implementations)
--------------------------------
Events are processed in stream order: ascending ``time_us``, ties in input
order. ``features(task, now_us)`` describes the state after every event with
``time_us <= now_us`` and nothing later, so no feature can read the future.
Online, ``now_us`` must not be earlier than an event already observed.

* Static fields (requests, priority, class, restriction, user) are the latest
  non-null values seen for the task.
* A task is running after SCHEDULE (on that event's machine) until its next
  SUBMIT/EVICT/FAIL/FINISH/KILL/LOST; UPDATE_* events leave that unchanged.
* ``*_1h`` counts are events in the window ``(now - 1 h, now]``; a machine
  window counts events whose row names that machine, a user window counts
  events of tasks owned by that user.
* Machine features describe the machine the task is running on (NaN when not
  running); resource sums are exact integers in millionths, times 1e-6.
* Unknown values are NaN; counts of unknown keys are 0.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Final, NamedTuple

if TYPE_CHECKING:
    import polars as pl

FEATURE_SCHEMA_VERSION: Final = "task-features-v1"
WINDOW_US: Final = 3_600_000_000
"""Length of the sliding ``*_1h`` windows in microseconds."""
_QUANTUM: Final = 1e6
"""Resource requests are summed as integers in units of 1/_QUANTUM."""
_MICRO: Final = 1e-6
"""Scale from micro-units; both implementations MULTIPLY by it (bit-identical results)."""


class EventType(IntEnum):
    """Borg 2011 task event types."""

    SUBMIT = 0
    SCHEDULE = 1
    EVICT = 2
    FAIL = 3
    FINISH = 4
    KILL = 5
    LOST = 6
    UPDATE_PENDING = 7
    UPDATE_RUNNING = 8


TERMINAL_EVENTS: Final = (2, 3, 4, 5, 6)
"""EVICT, FAIL, FINISH, KILL, LOST end a run."""
_STOPS_RUNNING: Final = (0, 2, 3, 4, 5, 6)

TASK_FEATURE_NAMES: Final[tuple[str, ...]] = (
    # the task's own (latest known) request
    "cpu_request",
    "memory_request",
    "disk_request",
    "priority",
    "scheduling_class",
    "different_machines_restriction",
    # the task's event history
    "task_submits",
    "task_schedules",
    "task_evicts",
    "task_fails",
    "task_kills",
    "task_losts",
    "task_updates",
    "task_fails_per_run",
    "task_age_s",
    "secs_since_submit",
    "secs_since_schedule",
    "last_wait_s",
    "secs_since_fail",
    "secs_since_evict",
    "prev_run_s",
    "last_end_type",
    "is_running",
    # its job
    "job_tasks_seen",
    "job_tasks_running",
    "job_submits",
    "job_evicts",
    "job_fails",
    "job_finishes",
    "job_kills",
    "job_fails_per_task",
    "job_fails_1h",
    "job_evicts_1h",
    "job_age_s",
    # the machine it runs on
    "machine_running_tasks",
    "machine_cpu_requested",
    "machine_memory_requested",
    "machine_fails_1h",
    "machine_evicts_1h",
    "machine_schedules_1h",
    # its user
    "user_running_tasks",
    "user_fails_1h",
    "user_evicts_1h",
    "user_kills_1h",
    "user_schedules_1h",
    "user_fails_per_schedule_1h",
)

_JOB_WINDOW_TYPES: Final = (3, 2)  # fails, evicts
_MACHINE_WINDOW_TYPES: Final = (3, 2, 1)  # fails, evicts, schedules
_USER_WINDOW_TYPES: Final = (3, 2, 5, 1)  # fails, evicts, kills, schedules
_NAN: Final = math.nan


def task_feature_schema_hash() -> str:
    """sha256 over the schema version, the window and the ordered feature names."""
    text = f"{FEATURE_SCHEMA_VERSION}\nwindow_us={WINDOW_US}\n" + "\n".join(TASK_FEATURE_NAMES)
    return hashlib.sha256(text.encode()).hexdigest()


Key = int | str
TaskKey = tuple[Key, int]


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """One task event with the Borg 2011 ``task_events`` fields."""

    time_us: int
    job_id: Key
    task_index: int
    event_type: int
    machine_id: Key | None = None
    user: str | None = None
    scheduling_class: int | None = None
    priority: int | None = None
    cpu_request: float | None = None
    memory_request: float | None = None
    disk_request: float | None = None
    different_machines_restriction: int | None = None


def quantize(value: float | None) -> int:
    """A request in exact integer millionths (0 when unknown)."""
    return 0 if value is None else math.floor(value * _QUANTUM + 0.5)


def _clean(value: float | None) -> float | None:
    return None if value is None or value != value else value


@dataclass(slots=True)
class _Task:
    first_us: int
    user: str | None = None
    priority: int | None = None
    scheduling_class: int | None = None
    restriction: int | None = None
    cpu: float | None = None
    memory: float | None = None
    disk: float | None = None
    counts: list[int] = field(default_factory=lambda: [0] * 9)
    last_submit_us: int | None = None
    last_schedule_us: int | None = None
    last_fail_us: int | None = None
    last_evict_us: int | None = None
    prev_run_us: int | None = None
    last_end_type: int | None = None
    running: bool = False
    machine: Key | None = None


@dataclass(slots=True)
class _Job:
    first_us: int
    tasks_seen: int = 0
    running: int = 0
    counts: list[int] = field(default_factory=lambda: [0] * 9)


@dataclass(slots=True)
class _Machine:
    running: int = 0
    cpu_q: int = 0
    memory_q: int = 0


class _Share(NamedTuple):
    """What a task contributes to its machine's and user's running totals."""

    running: bool
    machine: Key | None
    user: str | None
    cpu_q: int
    memory_q: int


def _share(task: _Task) -> _Share:
    return _Share(task.running, task.machine, task.user, quantize(task.cpu), quantize(task.memory))


class _Windows:
    """Sorted event times per key, for ``(now - window, now]`` counts."""

    __slots__ = ("_times", "_window_us")

    def __init__(self, window_us: int) -> None:
        self._times: dict[Key, list[int]] = {}
        self._window_us = window_us

    def add(self, key: Key, time_us: int) -> None:
        times = self._times.setdefault(key, [])
        bisect.insort_right(times, time_us)
        if len(times) > 64 and times[0] <= times[-1] - self._window_us:
            del times[: bisect.bisect_right(times, times[-1] - self._window_us)]

    def count(self, key: Key, now_us: int) -> int:
        times = self._times.get(key)
        if not times:
            return 0
        return bisect.bisect_right(times, now_us) - bisect.bisect_right(times, now_us - self._window_us)


class TaskHistory:
    """Incremental per-task/job/machine/user state; ``features`` follows ``TASK_FEATURE_NAMES``."""

    def __init__(self, window_us: int = WINDOW_US) -> None:
        self.window_us = window_us
        self._tasks: dict[TaskKey, _Task] = {}
        self._jobs: dict[Key, _Job] = {}
        self._machines: dict[Key, _Machine] = {}
        self._user_running: dict[str, int] = {}
        self._job_win = {t: _Windows(window_us) for t in _JOB_WINDOW_TYPES}
        self._machine_win = {t: _Windows(window_us) for t in _MACHINE_WINDOW_TYPES}
        self._user_win = {t: _Windows(window_us) for t in _USER_WINDOW_TYPES}

    def __len__(self) -> int:
        return len(self._tasks)

    def observe(self, event: TaskEvent) -> None:
        """Apply one event (events must arrive in stream order)."""
        et = int(event.event_type)
        if not 0 <= et <= 8:
            raise ValueError(f"event_type must be 0..8, got {et}")
        key = (event.job_id, event.task_index)
        job = self._jobs.get(event.job_id)
        if job is None:
            job = self._jobs[event.job_id] = _Job(first_us=event.time_us)
        task = self._tasks.get(key)
        if task is None:
            task = self._tasks[key] = _Task(first_us=event.time_us)
            job.tasks_seen += 1
        before = _share(task)
        self._update_task(task, event, et)
        after = _share(task)
        job.counts[et] += 1
        job.running += int(after.running) - int(before.running)
        if before != after:
            self._move_share(before, -1)
            self._move_share(after, +1)
        t = event.time_us
        if et in self._job_win:
            self._job_win[et].add(event.job_id, t)
        if event.machine_id is not None and et in self._machine_win:
            self._machine_win[et].add(event.machine_id, t)
        if task.user is not None and et in self._user_win:
            self._user_win[et].add(task.user, t)

    @staticmethod
    def _update_task(task: _Task, ev: TaskEvent, et: int) -> None:
        if ev.user:
            task.user = ev.user
        if ev.priority is not None:
            task.priority = ev.priority
        if ev.scheduling_class is not None:
            task.scheduling_class = ev.scheduling_class
        if ev.different_machines_restriction is not None:
            task.restriction = int(ev.different_machines_restriction)
        cpu, memory, disk = _clean(ev.cpu_request), _clean(ev.memory_request), _clean(ev.disk_request)
        if cpu is not None:
            task.cpu = cpu
        if memory is not None:
            task.memory = memory
        if disk is not None:
            task.disk = disk
        task.counts[et] += 1
        if et == EventType.SUBMIT:
            task.last_submit_us = ev.time_us
        elif et == EventType.SCHEDULE:
            task.last_schedule_us = ev.time_us
        elif et == EventType.FAIL:
            task.last_fail_us = ev.time_us
        elif et == EventType.EVICT:
            task.last_evict_us = ev.time_us
        if et in TERMINAL_EVENTS:
            if task.running and task.last_schedule_us is not None:
                task.prev_run_us = ev.time_us - task.last_schedule_us
            task.last_end_type = et
        if et == EventType.SCHEDULE:
            task.running, task.machine = True, ev.machine_id
        elif et in _STOPS_RUNNING:
            task.running, task.machine = False, None

    def _move_share(self, share: _Share, sign: int) -> None:
        if not share.running:
            return
        if share.user is not None:
            self._user_running[share.user] = self._user_running.get(share.user, 0) + sign
        if share.machine is not None:
            m = self._machines.get(share.machine)
            if m is None:
                m = self._machines[share.machine] = _Machine()
            m.running += sign
            m.cpu_q += sign * share.cpu_q
            m.memory_q += sign * share.memory_q

    def features(self, key: TaskKey, now_us: int) -> list[float]:
        """The feature vector of ``key`` at ``now_us``, in ``TASK_FEATURE_NAMES`` order."""
        task = self._tasks.get(key)
        job = self._jobs.get(key[0])
        return [*_task_part(task, now_us), *self._job_part(key[0], job, now_us),
                *self._machine_part(task, now_us), *self._user_part(task, now_us)]

    def _job_part(self, job_id: Key, job: _Job | None, now_us: int) -> list[float]:
        if job is None:
            return [0.0] * 7 + [_NAN, 0.0, 0.0, _NAN]
        c = job.counts
        return [float(job.tasks_seen), float(job.running), float(c[0]), float(c[2]), float(c[3]),
                float(c[4]), float(c[5]), c[3] / job.tasks_seen,
                float(self._job_win[3].count(job_id, now_us)),
                float(self._job_win[2].count(job_id, now_us)), (now_us - job.first_us) * _MICRO]

    def _machine_part(self, task: _Task | None, now_us: int) -> list[float]:
        if task is None or not task.running or task.machine is None:
            return [_NAN] * 6
        m = self._machines[task.machine]
        wins = [float(self._machine_win[t].count(task.machine, now_us)) for t in _MACHINE_WINDOW_TYPES]
        return [float(m.running), m.cpu_q * _MICRO, m.memory_q * _MICRO, *wins]

    def _user_part(self, task: _Task | None, now_us: int) -> list[float]:
        if task is None or task.user is None:
            return [_NAN] * 6
        fails, evicts, kills, schedules = (self._user_win[t].count(task.user, now_us) for t in _USER_WINDOW_TYPES)
        return [float(self._user_running.get(task.user, 0)), float(fails), float(evicts), float(kills),
                float(schedules), fails / max(schedules, 1)]


def _opt(value: float | None) -> float:
    return _NAN if value is None else float(value)


def _since(now_us: int, then_us: int | None) -> float:
    return _NAN if then_us is None else (now_us - then_us) * _MICRO


def _task_part(task: _Task | None, now_us: int) -> list[float]:
    if task is None:
        return [_NAN] * 6 + [0.0] * 8 + [_NAN] * 8 + [0.0]
    c = task.counts
    submitted, scheduled = task.last_submit_us, task.last_schedule_us
    wait = _NAN
    if submitted is not None and scheduled is not None and submitted <= scheduled:
        wait = (scheduled - submitted) * _MICRO
    return [
        _opt(task.cpu), _opt(task.memory), _opt(task.disk), _opt(task.priority),
        _opt(task.scheduling_class), _opt(task.restriction),
        float(c[0]), float(c[1]), float(c[2]), float(c[3]), float(c[5]), float(c[6]), float(c[7] + c[8]),
        c[3] / max(c[1], 1),
        (now_us - task.first_us) * _MICRO, _since(now_us, task.last_submit_us),
        _since(now_us, task.last_schedule_us), wait, _since(now_us, task.last_fail_us),
        _since(now_us, task.last_evict_us),
        _NAN if task.prev_run_us is None else task.prev_run_us * _MICRO, _opt(task.last_end_type),
        1.0 if task.running else 0.0,
    ]


# --------------------------------------------------------------------------- polars twin

EVENT_COLUMNS: Final = (
    "time_us", "job_id", "task_index", "machine_id", "event_type", "user", "scheduling_class",
    "priority", "cpu_request", "memory_request", "disk_request", "different_machines_restriction",
)
_TASK: Final = ["job_id", "task_index"]
_NO_MACHINE: Final = -(2**63)


def task_features_frame(events: pl.DataFrame, queries: pl.DataFrame, window_us: int = WINDOW_US) -> pl.DataFrame:
    """Features for every query row (``job_id, task_index, now_us``), vectorised.

    Returns ``queries`` (same rows, same order) with one Float64 column per
    name in ``TASK_FEATURE_NAMES``. ``events`` needs ``EVENT_COLUMNS``; rows
    are taken in stream order (stable sort by ``time_us``).
    """
    import polars as pl

    ev = _event_states(events)
    q = queries.with_row_index("_qid").sort("now_us", maintain_order=True)
    q = q.with_columns((pl.col("now_us") - window_us).alias("_then_us"))
    q = _asof(q, _last_per(ev.select(_TASK_STATE_COLUMNS), _TASK), "now_us", _TASK, _TASK)
    job = _last_per(ev.select(_JOB_STATE_COLUMNS), ["job_id"])
    q = _asof(q, job, "now_us", ["job_id"], ["job_id"])
    job_then = job.select("job_id", "time_us", pl.col("j_n3").alias("j_then3"), pl.col("j_n2").alias("j_then2"))
    q = _asof(q, job_then, "_then_us", ["job_id"], ["job_id"])
    mwin = _window_table(ev, "machine_id", "mw", _MACHINE_WINDOW_TYPES)
    uwin = _window_table(ev, "user_a", "uw", _USER_WINDOW_TYPES)
    for table, key, prefix in ((mwin, "mach_a", "mw"), (uwin, "user_a", "uw")):
        q = _asof(q, table, "now_us", [key], ["_key"])
        then = table.rename({c: c.replace(f"{prefix}_", f"{prefix}then_")
                             for c in table.columns if c.startswith(prefix)})
        q = _asof(q, then, "_then_us", [key], ["_key"])
    q = _asof(q, _running_table(ev), "now_us", ["mach_a"], ["_key"])
    q = _asof(q, _user_running_table(ev), "now_us", ["user_a"], ["_key"])
    out = q.with_columns(_feature_exprs()).sort("_qid")
    return out.select(*queries.columns, *(pl.col(n).fill_null(math.nan) for n in TASK_FEATURE_NAMES))


_TASK_STATE_COLUMNS: Final = (
    "job_id", "task_index", "time_us", "cpu_ff", "memory_ff", "disk_ff", "priority_ff", "class_ff",
    "restriction_ff", *(f"t_n{k}" for k in range(9)), "t_first", "t_last0", "t_last1", "t_last3",
    "t_last2", "prev_run", "last_end", "run_a", "mach_a", "user_a",
)
_JOB_STATE_COLUMNS: Final = (
    "job_id", "time_us", "j_tasks", "j_running", "j_first", *(f"j_n{k}" for k in (0, 2, 3, 4, 5)),
)


def _event_states(events: pl.DataFrame) -> pl.DataFrame:
    """Per event: the task's and job's state right after it (and the task's share before)."""
    import polars as pl

    et = pl.col("event_type")
    ev = (
        events.select(EVENT_COLUMNS)
        .with_columns(
            pl.col("cpu_request", "memory_request", "disk_request").cast(pl.Float64).fill_nan(None),
            pl.when(pl.col("user") == "").then(None).otherwise(pl.col("user")).alias("user"),
            et.cast(pl.Int64),
        )
        .with_row_index("_seq")
        .sort("time_us", maintain_order=True)
    )
    ev = ev.with_columns(
        *(pl.col(src).forward_fill().over(_TASK).alias(dst) for src, dst in (
            ("cpu_request", "cpu_ff"), ("memory_request", "memory_ff"), ("disk_request", "disk_ff"),
            ("priority", "priority_ff"), ("scheduling_class", "class_ff"),
            ("different_machines_restriction", "restriction_ff"), ("user", "user_a"))),
        *((et == k).cast(pl.Int64).cum_sum().over(_TASK).alias(f"t_n{k}") for k in range(9)),
        pl.col("time_us").cum_min().over(_TASK).alias("t_first"),
        *(pl.when(et == k).then(pl.col("time_us")).forward_fill().over(_TASK).alias(f"t_last{k}")
          for k in (0, 1, 3, 2)),
        pl.when(et == 1).then(True).when(et.is_in(_STOPS_RUNNING)).then(False)
        .forward_fill().over(_TASK).fill_null(False).cast(pl.Int64).alias("run_a"),
        pl.when(et == 1).then(pl.col("machine_id").fill_null(_NO_MACHINE))
        .when(et.is_in(_STOPS_RUNNING)).then(_NO_MACHINE)
        .forward_fill().over(_TASK).alias("mach_a"),
        (pl.int_range(pl.len()).over(_TASK) == 0).cast(pl.Int64).alias("new_task"),
    )
    ev = ev.with_columns(
        pl.when(pl.col("mach_a") == _NO_MACHINE).then(None).otherwise(pl.col("mach_a")).alias("mach_a"),
        *((pl.col(f"{c}_ff") * _QUANTUM + 0.5).floor().cast(pl.Int64).fill_null(0).alias(f"{c}_q")
          for c in ("cpu", "memory")),
    )
    ev = ev.with_columns(
        *(pl.col(c).shift(1).over(_TASK).alias(c.replace("_a", "_b")) for c in ("mach_a", "user_a")),
        pl.col("run_a").shift(1, fill_value=0).over(_TASK).alias("run_b"),
        *(pl.col(f"{c}_q").shift(1, fill_value=0).over(_TASK).alias(f"{c}_qb") for c in ("cpu", "memory")),
    )
    ended = et.is_in(TERMINAL_EVENTS)
    ev = ev.with_columns(
        pl.when(ended & (pl.col("run_b") == 1)).then(pl.col("time_us") - pl.col("t_last1"))
        .forward_fill().over(_TASK).alias("prev_run"),
        pl.when(ended).then(et).forward_fill().over(_TASK).alias("last_end"),
    )
    return ev.with_columns(
        pl.col("new_task").cum_sum().over("job_id").alias("j_tasks"),
        (pl.col("run_a") - pl.col("run_b")).cum_sum().over("job_id").alias("j_running"),
        pl.col("time_us").cum_min().over("job_id").alias("j_first"),
        *((et == k).cast(pl.Int64).cum_sum().over("job_id").alias(f"j_n{k}") for k in (0, 2, 3, 4, 5)),
    )


def _last_per(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The last row per key and timestamp: the state after all events at that time."""
    return frame.unique(subset=[*keys, "time_us"], keep="last", maintain_order=True)


def _asof(left: pl.DataFrame, right: pl.DataFrame, on: str, by_left: list[str], by_right: list[str]) -> pl.DataFrame:
    right = right.rename({"time_us": "_rt"})
    joined = left.join_asof(
        right, left_on=on, right_on="_rt", by_left=by_left, by_right=by_right,
        strategy="backward", check_sortedness=False,
    )
    return joined.drop("_rt", *(c for c in joined.columns if c.startswith("_key")))


def _window_table(ev: pl.DataFrame, key: str, prefix: str, types: tuple[int, ...]) -> pl.DataFrame:
    """Cumulative counts of ``types`` per key (the key is on the event row)."""
    import polars as pl

    et = pl.col("event_type")
    table = ev.filter(pl.col(key).is_not_null()).select(
        pl.col(key).alias("_key"), "time_us",
        *((et == k).cast(pl.Int64).cum_sum().over(key).alias(f"{prefix}_{k}") for k in types),
    )
    return _last_per(table, ["_key"])


def _running_table(ev: pl.DataFrame) -> pl.DataFrame:
    """Running tasks and requested resources per machine, as cumulative sums of share moves."""
    import polars as pl

    moved = ev.filter(
        pl.col("mach_a").ne_missing(pl.col("mach_b")) | pl.col("run_a").ne(pl.col("run_b"))
        | pl.col("cpu_q").ne(pl.col("cpu_qb")) | pl.col("memory_q").ne(pl.col("memory_qb"))
    )
    out = pl.concat([
        moved.select("_seq", "time_us", pl.col("mach_b").alias("_key"), pl.lit(0).alias("_sub"),
                     (-pl.col("run_b")).alias("d_run"), (-pl.col("cpu_qb")).alias("d_cpu"),
                     (-pl.col("memory_qb")).alias("d_mem")),
        moved.select("_seq", "time_us", pl.col("mach_a").alias("_key"), pl.lit(1).alias("_sub"),
                     pl.col("run_a").alias("d_run"), pl.col("cpu_q").alias("d_cpu"),
                     pl.col("memory_q").alias("d_mem")),
    ])
    out = out.filter(pl.col("_key").is_not_null()).sort("time_us", "_seq", "_sub")
    out = out.select(
        "_key", "time_us",
        *(pl.col(f"d_{c}").cum_sum().over("_key").alias(f"m_{c}") for c in ("run", "cpu", "mem")),
    )
    return _last_per(out, ["_key"])


def _user_running_table(ev: pl.DataFrame) -> pl.DataFrame:
    """Running tasks per user, as cumulative sums of share moves."""
    import polars as pl

    out = pl.concat([
        ev.select("_seq", "time_us", pl.col("user_b").alias("_key"), pl.lit(0).alias("_sub"),
                  (-pl.col("run_b")).alias("d")),
        ev.select("_seq", "time_us", pl.col("user_a").alias("_key"), pl.lit(1).alias("_sub"),
                  pl.col("run_a").alias("d")),
    ])
    out = out.filter(pl.col("_key").is_not_null() & (pl.col("d") != 0)).sort("time_us", "_seq", "_sub")
    out = out.select("_key", "time_us", pl.col("d").cum_sum().over("_key").alias("u_run"))
    return _last_per(out, ["_key"])


def _feature_exprs() -> list[pl.Expr]:
    import polars as pl

    def f(expr: pl.Expr) -> pl.Expr:
        return expr.cast(pl.Float64)

    def count(col: str) -> pl.Expr:
        return f(pl.col(col).fill_null(0))

    def since(col: str) -> pl.Expr:
        return f(pl.col("now_us") - pl.col(col)) * _MICRO

    known = pl.col("t_first").is_not_null()
    on_machine = (pl.col("run_a") == 1) & pl.col("mach_a").is_not_null()
    has_user = pl.col("user_a").is_not_null()
    job_known = pl.col("j_first").is_not_null()
    wait_ok = pl.col("t_last0") <= pl.col("t_last1")

    def machine(expr: pl.Expr) -> pl.Expr:
        return pl.when(on_machine).then(expr)

    def user(expr: pl.Expr) -> pl.Expr:
        return pl.when(has_user).then(expr)

    exprs = {
        "cpu_request": f(pl.col("cpu_ff")),
        "memory_request": f(pl.col("memory_ff")),
        "disk_request": f(pl.col("disk_ff")),
        "priority": f(pl.col("priority_ff")),
        "scheduling_class": f(pl.col("class_ff")),
        "different_machines_restriction": f(pl.col("restriction_ff")),
        "task_submits": count("t_n0"),
        "task_schedules": count("t_n1"),
        "task_evicts": count("t_n2"),
        "task_fails": count("t_n3"),
        "task_kills": count("t_n5"),
        "task_losts": count("t_n6"),
        "task_updates": f(pl.col("t_n7").fill_null(0) + pl.col("t_n8").fill_null(0)),
        "task_fails_per_run": count("t_n3") / f(pl.max_horizontal(pl.col("t_n1").fill_null(0), pl.lit(1))),
        "task_age_s": since("t_first"),
        "secs_since_submit": since("t_last0"),
        "secs_since_schedule": since("t_last1"),
        "last_wait_s": pl.when(wait_ok).then(f(pl.col("t_last1") - pl.col("t_last0")) * _MICRO),
        "secs_since_fail": since("t_last3"),
        "secs_since_evict": since("t_last2"),
        "prev_run_s": f(pl.col("prev_run")) * _MICRO,
        "last_end_type": f(pl.col("last_end")),
        "is_running": pl.when(known).then(count("run_a")).otherwise(0.0),
        "job_tasks_seen": count("j_tasks"),
        "job_tasks_running": count("j_running"),
        "job_submits": count("j_n0"),
        "job_evicts": count("j_n2"),
        "job_fails": count("j_n3"),
        "job_finishes": count("j_n4"),
        "job_kills": count("j_n5"),
        "job_fails_per_task": pl.when(job_known).then(f(pl.col("j_n3")) / f(pl.col("j_tasks"))),
        "job_fails_1h": count("j_n3") - count("j_then3"),
        "job_evicts_1h": count("j_n2") - count("j_then2"),
        "job_age_s": since("j_first"),
        "machine_running_tasks": machine(count("m_run")),
        "machine_cpu_requested": machine(count("m_cpu") * _MICRO),
        "machine_memory_requested": machine(count("m_mem") * _MICRO),
        **{name: machine(count(f"mw_{k}") - count(f"mwthen_{k}")) for name, k in (
            ("machine_fails_1h", 3), ("machine_evicts_1h", 2), ("machine_schedules_1h", 1))},
        "user_running_tasks": user(count("u_run")),
        **{name: user(count(f"uw_{k}") - count(f"uwthen_{k}")) for name, k in (
            ("user_fails_1h", 3), ("user_evicts_1h", 2), ("user_kills_1h", 5), ("user_schedules_1h", 1))},
        "user_fails_per_schedule_1h": user((count("uw_3") - count("uwthen_3")) / f(pl.max_horizontal(
            pl.col("uw_1").fill_null(0) - pl.col("uwthen_1").fill_null(0), pl.lit(1)))),
    }
    assert tuple(exprs) == TASK_FEATURE_NAMES, "feature definitions out of order"
    return [expr.cast(pl.Float64).alias(name) for name, expr in exprs.items()]
