"""Real Kafka, the real pod-pressure process and the shipped model: per-pod estimates from per-cgroup counters.

Three nodes' NodeStates, one per second for 21 s, go to ``nodestate.v1``: ``pp-pods`` runs two pods (held-out
kinds, the simulator's per-pod counters with every event the model reads), ``pp-basic`` one pod whose cgroup
has only the node agent's default events, ``pp-plain`` no per-cgroup counters at all. On ``podpressure.v1``
(keyed by node): each ``pp-pods`` pod gets an ``ok`` estimate per 10 s window, near its true pressure;
``pp-basic``'s pod gets ``unknown`` (``counters_missing``); ``pp-plain`` gets nothing.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from contracts import NodeState
from contracts.base import Contract
from contracts.models import PodPressure
from contracts.topics import Topic
from featurelib.pod import BASIC_EVENTS
from simulator.arena.world import ArenaCluster
from tests.integration.test_stream_pipeline import collector, running, spawn, wait_ready
from tests.kafka_helpers import produce_contracts

pytestmark = [pytest.mark.integration]

PODS = {"0f6c1a2b-1234-4abc-9def-0123456789ab": ("spmv", 0.9), "1a2b3c4d-0000-4abc-9def-0123456789ab":
        ("web_frontend", 0.7)}
BASIC_UID = "2b3c4d5e-0000-4abc-9def-0123456789ab"


def node_states(now_ms: int) -> tuple[list[tuple[str, Contract]], dict[str, tuple[float, ...]]]:
    cluster = ArenaCluster(3, seed=9, interval_ms=1000, node_names=["pp-pods", "pp-basic", "pp-plain"],
                           missing_event_prob=0.0, multiplex_prob=0.0)
    cluster.set_corunners(0, [k for k, _ in PODS.values()], [i for _, i in PODS.values()], list(PODS))
    cluster.set_corunners(1, ["spmv"], [0.8], [BASIC_UID])
    cluster.set_corunners(2, ["spmv"], [0.8])
    out: list[tuple[str, Contract]] = []
    for k in range(21):
        states = cluster.tick().nodestate_dicts(ts_ms=now_ms - 21_000 + 1000 * k)
        states[0]["cgroups"] = cluster.cgroup_dicts(0, 1.0)
        states[1]["cgroups"] = {c: {e: v for e, v in counters.items() if e in BASIC_EVENTS}
                                for c, counters in cluster.cgroup_dicts(1, 1.0).items()}
        out += [(s["node"], NodeState.model_validate(s)) for s in states]
    return out, cluster.pod_pressures(0)


async def test_pod_pressure_stage_estimates_each_pod_and_says_why_when_it_cannot(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    states, truth = node_states(int(time.time() * 1000))
    service = spawn("pod_pressure", kafka_bootstrap, topic_prefix, tmp_path)
    with running(service):
        await wait_ready((service,))
        async with collector(kafka_bootstrap, topic_prefix, [Topic.PODPRESSURE]) as (got, poll_until):
            await produce_contracts(kafka_bootstrap, topic_prefix, Topic.NODESTATE, states)
            # two 10 s windows per node: 2 pods × 2 + 1 pod × 2
            await poll_until(lambda g: len(g.values(Topic.PODPRESSURE, PodPressure)) >= 6, 60, "6 pod records")
    records = got.values(Topic.PODPRESSURE, PodPressure)
    keys = {r.key for r in got.records[Topic.PODPRESSURE]}
    assert keys == {b"pp-pods", b"pp-basic"}  # keyed by node; pp-plain has no per-pod counters
    pods = [r for r in records if r.node == "pp-pods"]
    assert sorted(r.pod_uid for r in pods) == sorted([*PODS, *PODS])
    for r in pods:
        assert r.status == "ok" and r.window_ms == 10_000 and r.model_version
        estimate = (r.llc, r.membw, r.core, r.frontend)
        error = max(abs(float(e or 0.0) - t) for e, t in zip(estimate, truth[r.pod_uid], strict=True))
        assert error < 0.3, (r.pod_uid, estimate, truth[r.pod_uid])
    basic = [r for r in records if r.node == "pp-basic"]
    assert len(basic) == 2 and all(r.status == "unknown" and r.reason == "counters_missing" and r.llc is None
                                   and r.pod_uid == BASIC_UID for r in basic)
