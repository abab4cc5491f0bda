"""A light synthetic TaskEvent stream for load runs, so the risk stage has something to score.

Tasks of jobs ``load-job-<j>`` go SUBMIT → SCHEDULE (on one of the nodes currently
reporting, so risk joins their features) → FINISH after ``lifetime_s``; every 20th ends
in FAIL instead. About ``rate`` events per second (three per task), deterministic per seed.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

import orjson

from loadtests.load_plan import node_name

EVENTS_PER_TASK = 3


@dataclass
class _Task:
    task_id: str
    job_id: str
    index: int
    node: str
    ends_at_s: float
    fails: bool


class TaskEvents:
    def __init__(self, rate: float, *, lifetime_s: float = 60.0, seed: int = 0, tasks_per_job: int = 10) -> None:
        if rate < 0:
            raise ValueError("task event rate must be >= 0")
        self.rate = rate
        self.lifetime_s = lifetime_s
        self.tasks_per_job = tasks_per_job
        self._rng = random.Random(seed)
        self._credit = 0.0
        self._next = 0
        self._running: deque[_Task] = deque()
        self.emitted = 0

    @staticmethod
    def _event(task: _Task, kind: str, ts_ms: int, machine: str | None) -> tuple[bytes, bytes]:
        value = {
            "task_id": task.task_id, "job_id": task.job_id, "task_index": task.index, "ts_ms": ts_ms,
            "event": kind, "source": "synthetic", "machine": machine, "user": "load", "scheduling_class": 1,
            "priority": 100, "cpu_request": 0.05, "memory_request": 0.02,
        }
        return task.task_id.encode(), orjson.dumps(value)

    def tick(self, now_s: float, ts_ms: int, nodes: int, period_s: float = 1.0) -> list[tuple[bytes, bytes]]:
        """The events due in one interval ending now: new tasks started and old ones ended."""
        out: list[tuple[bytes, bytes]] = []
        while self._running and self._running[0].ends_at_s <= now_s:
            task = self._running.popleft()
            out.append(self._event(task, "FAIL" if task.fails else "FINISH", ts_ms, task.node))
        self._credit += self.rate * period_s / EVENTS_PER_TASK
        while self._credit >= 1.0 and nodes > 0:
            self._credit -= 1.0
            n = self._next
            self._next += 1
            job = f"load-job-{n // self.tasks_per_job}"
            task = _Task(f"{job}-{n % self.tasks_per_job}", job, n % self.tasks_per_job,
                         node_name(self._rng.randrange(nodes)), now_s + self.lifetime_s, n % 20 == 19)
            out.append(self._event(task, "SUBMIT", ts_ms, None))
            out.append(self._event(task, "SCHEDULE", ts_ms, task.node))
            self._running.append(task)
        self.emitted += len(out)
        return out
