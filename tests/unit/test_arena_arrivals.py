"""Arrivals from generated task_events rows and their conversion to arena tasks."""

from __future__ import annotations

import pytest

from simulator.arena.arrivals import (
    BATCH_CLASSES,
    LS_CLASSES,
    TraceTask,
    synthetic_tasks,
    tasks_from_events,
    to_arrivals,
)
from simulator.workloads import KINDS

HELD_OUT = ("search_index", "spmv", "video_encode", "web_frontend")
S = 1_000_000


def _rows() -> list[tuple[int, int, int, int, int, int, float | None, float | None]]:
    # (time_us, job, task, event, sched_class, priority, cpu, mem)
    return [
        (0, 9, 0, 0, 0, 0, 0.02, 0.01),  # present at trace start: censored start, dropped
        (1 * S, 1, 0, 0, 3, 9, 0.05, 0.02),
        (int(1.5 * S), 1, 1, 0, 3, 9, 0.05, 0.02),
        (2 * S, 1, 0, 1, 3, 9, 0.05, 0.02),
        (3 * S, 1, 1, 1, 3, 9, 0.05, 0.02),
        (4 * S, 3, 0, 0, 0, 0, 0.03, 0.01),  # never scheduled
        (12 * S, 1, 0, 4, 3, 9, 0.05, 0.02),  # FINISH 10 s after SCHEDULE
        (20 * S, 1, 1, 8, 3, 9, 0.05, 0.02),  # UPDATE_RUNNING only: task 1 still running at the end
    ]


def test_tasks_from_events() -> None:
    tasks = {(t.job_id, t.task_index): t for t in tasks_from_events(_rows(), max_duration_s=3600.0)}
    assert set(tasks) == {(1, 0), (1, 1), (3, 0)}
    assert tasks[(1, 0)].duration_s == 10.0 and not tasks[(1, 0)].censored
    assert tasks[(1, 0)].submit_s == 1.0 and tasks[(1, 0)].scheduling_class == 3
    assert tasks[(1, 1)].duration_s == 17.0 and tasks[(1, 1)].censored  # to the last event (20 s)
    assert tasks[(3, 0)].duration_s == 10.0 and tasks[(3, 0)].censored  # median of the ended ones
    capped = {(t.job_id, t.task_index): t for t in tasks_from_events(_rows(), max_duration_s=12.0)}
    assert capped[(1, 1)].duration_s == 12.0


def _task(job: int, index: int, submit: float, cpu: float, sched: int) -> TraceTask:
    return TraceTask(job, index, submit, 100.0, False, cpu, 0.01, 0, sched)


def test_to_arrivals_scales_compresses_and_assigns_held_out_kinds() -> None:
    tasks = [_task(j, i, 10.0 * j + i, 0.025, 3 if j % 2 else 0) for j in range(40) for i in range(3)]
    tasks.append(_task(99, 0, 5.0, 0.2, 0))  # larger than a 1/8 node: dropped
    arrivals, stats = to_arrivals(tasks, kinds=HELD_OUT, nodes=1000, seed=4, horizon_s=196.0,
                                  node_fraction=0.125, target_load=0.7, max_work_s=1000.0)
    assert stats.dropped_too_large == 1
    assert stats.task_sample_fraction == 1.0  # 1000 nodes: offered load far below target, every task kept
    assert stats.compression == pytest.approx(2.0)  # submits span 392 s (0 .. 39 * 10 + 2), horizon 196 s
    assert len(arrivals) == 120
    for a in arrivals:
        assert a.kind in HELD_OUT and KINDS[a.kind].workload_class == a.workload_class
        assert a.cpu == pytest.approx(0.2)  # 0.025 of the largest machine = 0.2 of a 1/8 node
        assert a.work_s == pytest.approx(50.0)
        assert a.workload_class in (LS_CLASSES if a.latency_sensitive else BATCH_CLASSES)
        assert 0.5 <= a.intensity <= 1.0
    by_job: dict[int, set[str]] = {}
    for a in arrivals:
        by_job.setdefault(a.job_id, set()).add(a.kind)
    assert all(len(k) == 1 for k in by_job.values())  # the kind is drawn per job
    again, _ = to_arrivals(tasks, kinds=HELD_OUT, nodes=1000, seed=4, horizon_s=196.0, max_work_s=1000.0)
    assert again == arrivals
    capped, _ = to_arrivals(tasks, kinds=HELD_OUT, nodes=1000, seed=4, horizon_s=196.0)
    assert all(a.work_s == pytest.approx(196.0 / 12) for a in capped)  # default cap: horizon / 12


def test_job_sampling_targets_the_load() -> None:
    tasks = synthetic_tasks(400, seed=2)
    arrivals, stats = to_arrivals(tasks, kinds=HELD_OUT, nodes=10, seed=1, horizon_s=3600.0, target_load=0.5)
    assert 0 < stats.task_sample_fraction < 1
    offered = sum(a.cpu * a.work_s for a in arrivals) / 3600.0 / 10
    assert offered == pytest.approx(0.5, rel=0.35)  # tasks are sampled at random: close, not exact


def test_kinds_must_cover_both_groups() -> None:
    with pytest.raises(ValueError, match="none of the classes"):
        to_arrivals(synthetic_tasks(5, seed=1), kinds=("spmv", "video_encode"), nodes=2, seed=1, horizon_s=60.0)
