"""In-memory risk state: the task history (featurelib), running tasks per node, latest probabilities.

``featurelib.task_features.TaskHistory`` keeps job, machine and user aggregates across all
tasks, so one process must see every task event: the risk service runs as a single
replica, and on start rebuilds this state by replaying ``taskevents.v1`` up to its
committed offsets (``replay.py``) — it is a pure function of the event stream.

Every event's requests, priority and class are put on the Borg 2011 scale the model was
trained on before the history sees them (``featurelib.borg_units``: Kubernetes cores and GiB
divided by the largest node's allocatable, pod priorities banded; trace sources unchanged).
A field the mapping refuses is unknown to the history (and NaN in the task's row, never a
stale or guessed value) and is named ``<field>:unmapped`` in ``unit_flags`` until a later
event of the task places it or the task ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from contracts import TaskEvent
from contracts.models import BORG_EVENT_TYPES
from featurelib.borg_units import UNMAPPED_SUFFIX, BorgTaskUnits, LargestNode, task_units, unmapped
from featurelib.task_features import TASK_FEATURE_NAMES, TaskHistory
from featurelib.task_features import TaskEvent as HistoryEvent

STOPS_RUNNING = frozenset({"SUBMIT", "EVICT", "FAIL", "FINISH", "KILL", "LOST"})
TERMINAL = frozenset({"EVICT", "FAIL", "FINISH", "KILL", "LOST"})


def event_time_us(event: TaskEvent) -> int:
    """Trace time when replayed (what the model was trained on), else the event's wall time."""
    return event.trace_time_us if event.trace_time_us is not None else event.ts_ms * 1000


UNIT_FIELDS = ("cpu_request", "memory_request", "disk_request", "priority")
"""TaskEvent fields whose unit the mapping may refuse."""
_COLUMN = {name: i for i, name in enumerate(TASK_FEATURE_NAMES)}


def borg_units_of(event: TaskEvent, largest: LargestNode) -> BorgTaskUnits:
    return task_units(source=event.source, cpu_request=event.cpu_request, memory_request=event.memory_request,
                      disk_request=event.disk_request, priority=event.priority,
                      scheduling_class=event.scheduling_class, largest=largest)


def to_history_event(event: TaskEvent, units: BorgTaskUnits | None = None) -> HistoryEvent:
    """The history's event, on the Borg scale (``units``: the event's mapped fields; default: mapped
    without a largest node, so Kubernetes requests are refused)."""
    u = units if units is not None else borg_units_of(event, LargestNode())
    return HistoryEvent(
        time_us=event_time_us(event),
        job_id=event.job_id,
        task_index=event.task_index,
        event_type=BORG_EVENT_TYPES.index(event.event),
        machine_id=event.machine,
        user=event.user,
        scheduling_class=u.scheduling_class,
        priority=u.priority,
        cpu_request=u.cpu_request,
        memory_request=u.memory_request,
        disk_request=u.disk_request,
        different_machines_restriction=None if event.different_machines_restriction is None
        else int(event.different_machines_restriction),
    )


@dataclass(frozen=True, slots=True)
class Change:
    task_id: str
    node_before: str | None
    node_after: str | None
    running: bool
    terminal: bool


@dataclass
class RunningTask:
    key: tuple[str, int]
    node: str
    probabilities: tuple[float, ...] | None = None
    out_of_range: tuple[str, ...] = ()
    """What the last scoring found out of range (empty: in range)."""


@dataclass
class RiskState:
    largest: LargestNode = field(default_factory=LargestNode)
    """What Kubernetes requests are divided by (``RISK_LARGEST_NODE_*``)."""
    history: TaskHistory = field(default_factory=TaskHistory)
    running: dict[str, RunningTask] = field(default_factory=dict)
    by_node: dict[str, set[str]] = field(default_factory=dict)
    now_us: int = 0
    """Newest event time seen, in the history's clock (trace time for replays)."""
    last_ts_ms: int = 0
    """Newest TaskEvent.ts_ms seen (the stream's clock, comparable with features.v1)."""
    events: int = 0
    unit_flags: dict[str, frozenset[str]] = field(default_factory=dict)
    """Per task id: its fields the unit mapping refused (``cpu_request:unmapped``, …); absent when none."""

    def observe(self, event: TaskEvent) -> Change:
        t = event_time_us(event)
        self.now_us = max(self.now_us, t)
        self.last_ts_ms = max(self.last_ts_ms, event.ts_ms)
        units = borg_units_of(event, self.largest)
        self.history.observe(to_history_event(event, units))
        self._note_flags(event, units)
        self.events += 1
        before = self.running.get(event.task_id)
        node_before = before.node if before is not None else None
        if event.event == "SCHEDULE" and event.machine:
            self._stop(event.task_id)
            self.running[event.task_id] = RunningTask((event.job_id, event.task_index), event.machine)
            self.by_node.setdefault(event.machine, set()).add(event.task_id)
        elif event.event in STOPS_RUNNING:
            self._stop(event.task_id)
        after = self.running.get(event.task_id)
        return Change(event.task_id, node_before, after.node if after else None, after is not None,
                      event.event in TERMINAL)

    def _note_flags(self, event: TaskEvent, units: BorgTaskUnits) -> None:
        if event.event in TERMINAL:
            self.unit_flags.pop(event.task_id, None)  # a new run's events carry its fields again
            return
        flags = set(self.unit_flags.get(event.task_id, ()))
        for name in UNIT_FIELDS:
            if getattr(event, name) is not None:  # the event speaks for this field: its verdict replaces the old
                flags.discard(unmapped(name))
                flags |= units.unmapped & {unmapped(name)}
        if flags:
            self.unit_flags[event.task_id] = frozenset(flags)
        else:
            self.unit_flags.pop(event.task_id, None)

    def flags(self, task_ids: Sequence[str]) -> list[frozenset[str]]:
        return [self.unit_flags.get(t, frozenset()) for t in task_ids]

    def _stop(self, task_id: str) -> None:
        task = self.running.pop(task_id, None)
        if task is not None:
            members = self.by_node.get(task.node)
            if members is not None:
                members.discard(task_id)
                if not members:
                    del self.by_node[task.node]

    def task_rows(self, task_ids: Sequence[str]) -> np.ndarray:
        """Task feature rows (float32, NaN = unknown) at the newest event time seen."""
        rows = [self.history.features(self.running[t].key, self.now_us) for t in task_ids]
        x = np.asarray(rows, dtype=np.float32).reshape(len(task_ids), -1)
        for i, t in enumerate(task_ids):
            for flag in self.unit_flags.get(t, ()):
                # the history may still hold an earlier placed value: the model sees it as unknown instead
                x[i, _COLUMN[flag.removesuffix(UNMAPPED_SUFFIX)]] = np.nan
        return x

    def node_tasks(self, node: str) -> list[RunningTask]:
        return [self.running[t] for t in sorted(self.by_node.get(node, ()))]
