"""risk.v2's input-range flags: the card's ranges, unit-mapping refusals, task rows and node counts (no broker)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from contracts import FailureRiskV2, TaskEvent, encode
from contracts.topics import RISK_TOPIC
from featurelib.borg_units import LargestNode
from featurelib.task_features import TASK_FEATURE_NAMES
from services.risk.model import load_failure_model
from services.risk.processor import RiskProcessor
from services.risk.ranges import MAX_NAMES, InputRanges, merge
from services.risk.settings import RiskSettings
from services.risk.state import RiskState
from services.runtime.model_watch import ModelRefusedError, ModelWatcher
from tests.unit.test_risk_service import T0_MS, _event, _Sink, train_provisional_failure_model

COL = {n: i for i, n in enumerate(TASK_FEATURE_NAMES)}
NODE = LargestNode(cpu_cores=8.0, memory_gib=32.0)


def test_rows_outside_the_card_ranges_name_their_columns() -> None:
    ranges = InputRanges.from_card({"a": [0.0, 1.0], "c": [10, 20]}, ["a", "b", "c"])
    x = np.array([[0.5, 99.0, 15.0], [1.5, 0.0, 9.0], [np.nan, 0.0, 25.0], [0.0, -5.0, 20.0]], dtype=np.float32)
    assert ranges.outside(x) == [(), ("a", "c"), ("c",), ()]  # NaN is missing, not out of range; bounds inclusive


def test_float32_rows_at_a_float64_bound_are_inside() -> None:
    ranges = InputRanges.from_card({"a": [0.1, 0.3]}, ["a"])
    x = np.array([[0.1], [0.3], [0.30001]], dtype=np.float32)
    assert ranges.outside(x) == [(), (), ("a",)]


def test_a_card_without_ranges_flags_nothing() -> None:
    x = np.array([[1e9, -1e9]], dtype=np.float32)
    assert InputRanges.from_card(None, ["a", "b"]).outside(x) == [()]
    assert InputRanges.from_card({}, ["a", "b"]).outside(x) == [()]


@pytest.mark.parametrize(("ranges", "why"), [
    ({"zz": [0, 1]}, "not an input"), ({"a": [2, 1]}, "lo <= hi"), ({"a": [0]}, "lo <= hi"),
    ({"a": [0, float("nan")]}, "lo <= hi"), ({"a": [False, True]}, "lo <= hi"), ({"a": "0..1"}, "lo <= hi"),
    ([["a", 0, 1]], "must map"),
])
def test_malformed_ranges_are_refused(ranges: Any, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        InputRanges.from_card(ranges, ["a"])


def test_merge_puts_range_names_first_and_caps_the_list() -> None:
    assert merge(("cpu_request",), ("priority:unmapped", "memory_request:unmapped")) == [
        "cpu_request", "memory_request:unmapped", "priority:unmapped"]
    capped = merge(tuple(f"c{i}" for i in range(70)), ())
    assert len(capped) == MAX_NAMES and capped[-1] == "+7 more"


def with_input_ranges(vdir: Path, ranges: Any) -> Path:
    card = orjson.loads((vdir / "model_card.json").read_bytes())
    card["input_ranges"] = ranges
    (vdir / "model_card.json").write_bytes(orjson.dumps(card))
    return vdir


def test_the_model_carries_the_card_ranges_and_refuses_bad_ones(tmp_path: Path) -> None:
    vdir = train_provisional_failure_model(tmp_path / "ok", boosters=False)
    assert load_failure_model(vdir).ranges.ranged == 0  # type: ignore[union-attr]
    model = load_failure_model(with_input_ranges(vdir, {"cpu_request": [0, 0.5], "cpu_util_mean_10s": [0, 1]}))
    assert model.ranges is not None and model.ranges.ranged == 2  # node features the model uses may have ranges
    with pytest.raises(ModelRefusedError, match="not an input"):
        load_failure_model(with_input_ranges(vdir, {"ipc_max": [0, 3]}))


def k8s(task: str, event: str, ts: int, *, cpu: float = 2.0, mem: float = 4.0, priority: int = 0,
        machine: str | None = "n1") -> TaskEvent:
    return TaskEvent(task_id=task, job_id="web", task_index=int(task[-1]), ts_ms=T0_MS + ts, event=event,  # type: ignore[arg-type]
                     source="kubernetes", machine=machine if event != "SUBMIT" else None, priority=priority,
                     cpu_request=cpu, memory_request=mem, scheduling_class=1, user="default")


def test_state_maps_kubernetes_units_and_refuses_what_it_cannot_place() -> None:
    state = RiskState(largest=NODE)
    state.observe(k8s("ns/p0", "SUBMIT", 0))
    state.observe(k8s("ns/p0", "SCHEDULE", 1))
    row = state.task_rows(["ns/p0"])[0]
    assert (row[COL["cpu_request"]], row[COL["memory_request"]], row[COL["priority"]]) == (0.25, 0.125, 2.0)
    assert row[COL["machine_cpu_requested"]] == pytest.approx(0.25) and state.flags(["ns/p0"]) == [frozenset()]
    # resized beyond the largest node: unknown to the model (not the old 0.25), and named
    state.observe(k8s("ns/p0", "UPDATE_RUNNING", 2, cpu=12.0))
    assert np.isnan(state.task_rows(["ns/p0"])[0, COL["cpu_request"]])
    assert state.flags(["ns/p0"]) == [frozenset({"cpu_request:unmapped"})]
    state.observe(k8s("ns/p0", "UPDATE_RUNNING", 3, cpu=4.0))  # placed again
    assert state.task_rows(["ns/p0"])[0, COL["cpu_request"]] == 0.5 and state.flags(["ns/p0"]) == [frozenset()]
    state.observe(k8s("ns/p1", "SCHEDULE", 4, priority=1_500_000_000))
    assert state.unit_flags == {"ns/p1": frozenset({"priority:unmapped"})}
    state.observe(k8s("ns/p1", "KILL", 5))
    assert state.unit_flags == {}  # a finished task keeps no flags


def test_without_a_largest_node_kubernetes_requests_are_flagged_not_guessed() -> None:
    state = RiskState()
    state.observe(k8s("ns/p0", "SCHEDULE", 0))
    row = state.task_rows(["ns/p0"])[0]
    assert np.isnan(row[COL["cpu_request"]]) and np.isnan(row[COL["memory_request"]])
    assert state.flags(["ns/p0"]) == [frozenset({"cpu_request:unmapped", "memory_request:unmapped"})]


def _processor(vdir: Path, **settings: Any) -> tuple[RiskProcessor, _Sink]:
    sink = _Sink()
    watcher = ModelWatcher("failure", vdir, load_failure_model, poll_s=60)
    proc = RiskProcessor(RiskSettings(rebuild_history=False, **settings), sink, watcher)  # type: ignore[arg-type]
    return proc, sink


def _send(proc: RiskProcessor, events: list[TaskEvent]) -> None:
    asyncio.run(proc.handle_tasks([_event("p-taskevents.v1", e.task_id, encode(e), i, None)
                                   for i, e in enumerate(events)]))


def test_risk_v2_records_flag_tasks_and_count_them_per_node(tmp_path: Path) -> None:
    vdir = with_input_ranges(train_provisional_failure_model(tmp_path, boosters=False),
                             {"cpu_request": [0.0, 0.5], "priority": [0, 11]})
    proc, sink = _processor(vdir, largest_node_cpu=8.0, largest_node_memory_gib=32.0)
    _send(proc, [k8s("ns/ok0", "SCHEDULE", 0),                        # 0.25 of the largest node: in range
                 k8s("ns/big1", "SCHEDULE", 1, cpu=64.0),              # larger than any node
                 k8s("ns/wide2", "SCHEDULE", 2, cpu=6.0),              # 0.75: placed, outside the card's range
                 k8s("ns/odd3", "SCHEDULE", 3, priority=3_000_000_000)])
    assert all(topic == RISK_TOPIC for topic in sink.topics)
    latest = {key: value for key, value, _ in sink.sent}
    assert all(isinstance(v, FailureRiskV2) for v in latest.values())
    assert latest["task:ns/ok0"].out_of_range == [] and latest["task:ns/ok0"].in_range
    assert latest["task:ns/big1"].out_of_range == ["cpu_request:unmapped"]
    assert latest["task:ns/wide2"].out_of_range == ["cpu_request"]
    assert latest["task:ns/odd3"].out_of_range == ["priority:unmapped"]
    node = latest["node:n1"]
    assert (node.tasks, node.tasks_out_of_range, node.in_range) == (4, 3, False)
    # the odd and big tasks end: the node record counts only what is still running
    _send(proc, [k8s("ns/odd3", "KILL", 10), k8s("ns/big1", "FINISH", 11)])
    final = {key: value for key, value, _ in sink.sent}
    assert final["task:ns/odd3"].out_of_range == [] and all(h.probability == 0 for h in final["task:ns/odd3"].horizons)
    assert (final["node:n1"].tasks, final["node:n1"].tasks_out_of_range) == (2, 1)


def test_rescore_publishes_when_only_the_range_verdict_changes(tmp_path: Path) -> None:
    vdir = with_input_ranges(train_provisional_failure_model(tmp_path, boosters=False),
                             {"machine_running_tasks": [0, 1]})
    proc, sink = _processor(vdir, largest_node_cpu=8.0, largest_node_memory_gib=32.0, rescore_min_change=1.0)
    _send(proc, [k8s("ns/a0", "SCHEDULE", 0)])
    assert {k: v.out_of_range for k, v, _ in sink.sent}["task:ns/a0"] == []
    running = proc.state.running["ns/a0"]
    running.out_of_range = ("stale",)  # as if the last scoring had found something
    sent = len(sink.sent)
    asyncio.run(proc.rescore())
    assert [k for k, _, _ in sink.sent[sent:]] == ["task:ns/a0", "node:n1"]  # probability unchanged, verdict changed
    asyncio.run(proc.rescore())
    assert len(sink.sent) == sent + 2  # nothing moved: nothing published
