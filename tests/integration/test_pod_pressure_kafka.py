"""Real Kafka, the real pod-pressure process and the shipped model: per-pod estimates from per-cgroup counters.

Three nodes' NodeStates, one per second for 21 s, go to ``nodestate.v1``: ``pp-pods`` runs two pods (held-out
kinds, the simulator's per-pod counters with every event the model reads), ``pp-basic`` one pod whose cgroup
has only the node agent's default events, ``pp-plain`` no per-cgroup counters at all. On ``podpressure.v1``
(keyed by node): each ``pp-pods`` pod gets an ``ok`` estimate per 10 s window, near its true pressure;
``pp-basic``'s pod gets ``unknown`` (``counters_missing``); ``pp-plain`` gets nothing. ``pp-rdt`` runs the same two
pods as ``pp-pods`` and also sends what a node agent with resctrl sends: each pod's LLC occupancy and memory
traffic (the first traffic reading without a number, as a new monitoring group's is) and the node's LLC size and
bandwidth in its metrics; its pods' llc is their occupancy's share of the LLC (the readings sum below the
saturation share), their membw at least their traffic's share (the readings sum past it).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from contracts import NodeState
from contracts.base import Contract
from contracts.models import PodPressure
from contracts.topics import Topic
from featurelib.pod import BASIC_EVENTS, LLC_OCCUPANCY, MBM_TOTAL_BYTES, NODE_LLC_BYTES, NODE_MEMBW_PEAK
from services.node_agent.nodestate import counted, without_number
from simulator.arena.world import ArenaCluster
from tests.integration.test_stream_pipeline import collector, running, spawn, wait_ready
from tests.kafka_helpers import produce_contracts

pytestmark = [pytest.mark.integration]

PODS = {"0f6c1a2b-1234-4abc-9def-0123456789ab": ("spmv", 0.9), "1a2b3c4d-0000-4abc-9def-0123456789ab":
        ("web_frontend", 0.7)}
BASIC_UID = "2b3c4d5e-0000-4abc-9def-0123456789ab"
RDT_PODS = {"3c4d5e6f-0000-4abc-9def-0123456789ab": (0.2, 0.6), "4d5e6f70-0000-4abc-9def-0123456789ab": (0.3, 0.5)}
"""pp-rdt's pods: (LLC occupancy, memory traffic) as shares of the node's LLC and bandwidth."""
LLC_BYTES, PEAK_BYTES_PER_S = 32 * 2**20, 20e9


def node_states(now_ms: int) -> tuple[list[tuple[str, Contract]], dict[str, tuple[float, ...]]]:
    cluster = ArenaCluster(4, seed=9, interval_ms=1000, node_names=["pp-pods", "pp-basic", "pp-plain", "pp-rdt"],
                           missing_event_prob=0.0, multiplex_prob=0.0)
    cluster.set_corunners(0, [k for k, _ in PODS.values()], [i for _, i in PODS.values()], list(PODS))
    cluster.set_corunners(1, ["spmv"], [0.8], [BASIC_UID])
    cluster.set_corunners(2, ["spmv"], [0.8])
    cluster.set_corunners(3, [k for k, _ in PODS.values()], [i for _, i in PODS.values()], list(RDT_PODS))
    out: list[tuple[str, Contract]] = []
    for k in range(21):
        states = cluster.tick().nodestate_dicts(ts_ms=now_ms - 21_000 + 1000 * k)
        states[0]["cgroups"] = cluster.cgroup_dicts(0, 1.0)
        states[1]["cgroups"] = {c: {e: v for e, v in counters.items() if e in BASIC_EVENTS}
                                for c, counters in cluster.cgroup_dicts(1, 1.0).items()}
        states[3]["cgroups"] = cluster.cgroup_dicts(3, 1.0)
        for cgroup, counters in states[3]["cgroups"].items():
            llc, membw = next(v for uid, v in RDT_PODS.items() if uid in cgroup)
            counters[LLC_OCCUPANCY] = counted(llc * LLC_BYTES, enabled_ns=10**9)
            counters[MBM_TOTAL_BYTES] = (counted(membw * PEAK_BYTES_PER_S, enabled_ns=10**9) if k
                                         else without_number("not_counted", enabled_ns=10**9))
        states[3]["metrics"] = {NODE_LLC_BYTES: float(LLC_BYTES), NODE_MEMBW_PEAK: PEAK_BYTES_PER_S}
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
            # two 10 s windows per node: 2 pods × 2 + 1 pod × 2 + 2 pods × 2
            await poll_until(lambda g: len(g.values(Topic.PODPRESSURE, PodPressure)) >= 10, 60, "10 pod records")
    records = got.values(Topic.PODPRESSURE, PodPressure)
    keys = {r.key for r in got.records[Topic.PODPRESSURE]}
    assert keys == {b"pp-pods", b"pp-basic", b"pp-rdt"}  # keyed by node; pp-plain has no per-pod counters
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
    monitored = [r for r in records if r.node == "pp-rdt"]
    assert sorted(r.pod_uid for r in monitored) == sorted([*RDT_PODS, *RDT_PODS])
    for r in monitored:
        llc, membw = RDT_PODS[r.pod_uid]
        assert r.status == "ok" and r.llc == pytest.approx(llc)
        assert r.membw is not None and r.membw >= membw - 1e-9
