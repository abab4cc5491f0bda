"""Real Kafka, the risk process: Kubernetes task events → risk.v2 records that say when inputs were out of range.

The risk service runs as its own process with the largest node's allocatable set (8 cores,
32 GiB) and a small failure model whose card declares ``input_ranges``. Pods that fit and
carry an ordinary priority get ``out_of_range == []``; a request larger than the largest node,
a priority no PriorityClass can carry and a request outside the card's range are named, and
the node record counts those tasks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from contracts import FailureRiskV2, TaskEvent, decode
from tests.integration.test_stream_pipeline import collector, running, spawn, wait_ready
from tests.kafka_helpers import produce_contracts
from tests.unit.test_risk_service import T0_MS, train_provisional_failure_model

pytestmark = [pytest.mark.integration]


def pod(name: str, index: int, event: str, ts: int, **fields: Any) -> TaskEvent:
    base: dict[str, Any] = {"cpu_request": 2.0, "memory_request": 4.0, "priority": 0, "scheduling_class": 1}
    return TaskEvent(task_id=f"demo/{name}", job_id=name.rsplit("-", 1)[0], task_index=index, ts_ms=T0_MS + ts,
                     event=event, source="kubernetes", machine="sim-0001" if event == "SCHEDULE" else None,  # type: ignore[arg-type]
                     user="default", namespace="demo", **{**base, **fields})


async def test_kubernetes_tasks_get_risk_v2_with_input_range_flags(kafka_bootstrap: str, topic_prefix: str,
                                                                   tmp_path: Path) -> None:
    models = tmp_path / "failure"
    vdir = train_provisional_failure_model(models, with_node=False, boosters=False)
    card = orjson.loads((vdir / "model_card.json").read_bytes())
    card["input_ranges"] = {"cpu_request": [0.0, 0.5], "memory_request": [0.0, 0.5], "priority": [0, 11]}
    (vdir / "model_card.json").write_bytes(orjson.dumps(card))
    # name → fields; in range: ≤ 4 cores and ≤ 16 GiB of the 8-core, 32-GiB largest node
    pods: dict[str, dict[str, Any]] = {
        "web-0": {}, "web-1": {"cpu_request": 4.0, "priority": 1_000_000},
        "huge-0": {"cpu_request": 48.0},  # larger than any node: cannot be placed on the Borg scale
        "odd-0": {"priority": 1_500_000_000},  # no PriorityClass can carry it
        "wide-0": {"memory_request": 24.0},  # 0.75 of the largest node: placed, outside the training range
    }
    events = [e for i, (name, f) in enumerate(pods.items())
              for e in (pod(name, 0, "SUBMIT", 10 * i, **f), pod(name, 0, "SCHEDULE", 10 * i + 5, **f))]
    risk = spawn("risk", kafka_bootstrap, topic_prefix, tmp_path, RISK_MODEL_DIR=str(models), RISK_RESCORE_S="0",
                 RISK_LARGEST_NODE_CPU="8", RISK_LARGEST_NODE_MEMORY_GIB="32")
    with running(risk):
        await wait_ready((risk,))
        async with collector(kafka_bootstrap, topic_prefix, ["risk.v2", "risk.v1", "deadletter.v2"]) as (got, poll):
            await produce_contracts(kafka_bootstrap, topic_prefix, "taskevents.v1",
                                    [(ev.task_id, ev) for ev in events])
            want = {f"task:demo/{n}" for n in pods}

            def latest(g: Any) -> dict[str, FailureRiskV2]:
                """The newest record per key (what the compacted topic keeps)."""
                return {r.key.decode(): decode(FailureRiskV2, r.value) for r in g.records["risk.v2"]}

            await poll(lambda g: want <= set(latest(g)) and latest(g).get("node:sim-0001", None) is not None
                       and latest(g)["node:sim-0001"].tasks == len(pods), 90, "a risk.v2 record per pod and the node")
    records = latest(got)
    assert records["task:demo/web-0"].out_of_range == [] and records["task:demo/web-0"].in_range
    assert records["task:demo/web-1"].out_of_range == []
    assert records["task:demo/huge-0"].out_of_range == ["cpu_request:unmapped"]
    assert records["task:demo/odd-0"].out_of_range == ["priority:unmapped"]
    assert records["task:demo/wide-0"].out_of_range == ["memory_request"]
    node = records["node:sim-0001"]
    assert (node.tasks, node.tasks_out_of_range, node.in_range) == (5, 3, False)
    assert not got.records["risk.v1"], "risk.v1 is read-only: the stage writes risk.v2"
    assert not got.records["deadletter.v2"]
