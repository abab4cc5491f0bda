"""In-memory risk state: the task history (featurelib), running tasks per node, latest probabilities.

``featurelib.task_features.TaskHistory`` keeps job, machine and user aggregates across all
tasks, so one process must see every task event: the risk service runs as a single
replica, and on start rebuilds this state by replaying ``taskevents.v1`` up to its
committed offsets (``replay.py``) — it is a pure function of the event stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from contracts import TaskEvent
from contracts.models import BORG_EVENT_TYPES
from featurelib.task_features import TaskEvent as HistoryEvent
from featurelib.task_features import TaskHistory

STOPS_RUNNING = frozenset({"SUBMIT", "EVICT", "FAIL", "FINISH", "KILL", "LOST"})
TERMINAL = frozenset({"EVICT", "FAIL", "FINISH", "KILL", "LOST"})


def event_time_us(event: TaskEvent) -> int:
    """Trace time when replayed (what the model was trained on), else the event's wall time."""
    return event.trace_time_us if event.trace_time_us is not None else event.ts_ms * 1000


def to_history_event(event: TaskEvent) -> HistoryEvent:
    return HistoryEvent(
        time_us=event_time_us(event),
        job_id=event.job_id,
        task_index=event.task_index,
        event_type=BORG_EVENT_TYPES.index(event.event),
        machine_id=event.machine,
        user=event.user,
        scheduling_class=event.scheduling_class,
        priority=event.priority,
        cpu_request=event.cpu_request,
        memory_request=event.memory_request,
        disk_request=event.disk_request,
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


@dataclass
class RiskState:
    history: TaskHistory = field(default_factory=TaskHistory)
    running: dict[str, RunningTask] = field(default_factory=dict)
    by_node: dict[str, set[str]] = field(default_factory=dict)
    now_us: int = 0
    """Newest event time seen, in the history's clock (trace time for replays)."""
    last_ts_ms: int = 0
    """Newest TaskEvent.ts_ms seen (the stream's clock, comparable with features.v1)."""
    events: int = 0

    def observe(self, event: TaskEvent) -> Change:
        t = event_time_us(event)
        self.now_us = max(self.now_us, t)
        self.last_ts_ms = max(self.last_ts_ms, event.ts_ms)
        self.history.observe(to_history_event(event))
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
        return np.asarray(rows, dtype=np.float32).reshape(len(task_ids), -1)

    def node_tasks(self, node: str) -> list[RunningTask]:
        return [self.running[t] for t in sorted(self.by_node.get(node, ()))]
