"""Pod lifecycle → Borg events, cluster state, and the list/watch loop (fake source, no API server)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from services.cluster_watcher.mapping import pod_record, transitions
from services.cluster_watcher.model import ClusterModel
from services.cluster_watcher.reflector import Reflector
from services.cluster_watcher.resources import PODS, Resource
from services.cluster_watcher.settings import WatcherSettings
from services.runtime.k8s_quantity import parse_quantity
from services.runtime.kube_client import GoneError

NOW = 1_750_000_000_000
CREATED = "2025-06-15T15:06:40Z"  # NOW - 0 s


def pod(
    name: str = "web-7d9f-abcde",
    node: str | None = None,
    phase: str = "Pending",
    *,
    uid: str | None = None,
    deleting: bool = False,
    disruption: str | None = None,
    reason: str | None = None,
    mem: str = "256Mi",
    ns: str = "ns",
    created: str = CREATED,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "uid": uid or name,
        "creationTimestamp": created,
        "labels": {"pod-template-hash": "7d9f"},
        "ownerReferences": [{"kind": "ReplicaSet", "name": "web-7d9f", "controller": True}],
    }
    if deleting:
        meta["deletionTimestamp"] = "2025-06-15T15:07:00Z"
    status: dict[str, Any] = {"phase": phase, "conditions": []}
    if disruption:
        status["conditions"].append({"type": "DisruptionTarget", "status": "True", "reason": disruption})
    if reason:
        status["reason"] = reason
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "250m", "memory": mem}}}],
        "priority": 5,
        "serviceAccountName": "default",
    }
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": status}


@pytest.mark.parametrize(
    ("before", "after", "deleted", "events"),
    [
        (None, pod(), False, ["SUBMIT"]),
        (None, pod(node="n1"), False, ["SUBMIT", "SCHEDULE"]),
        (pod(), pod(node="n1"), False, ["SCHEDULE"]),
        (pod(node="n1"), pod(node="n1", phase="Running"), False, []),
        (pod(node="n1"), pod(node="n1", phase="Succeeded"), False, ["FINISH"]),
        (pod(node="n1"), pod(node="n1", phase="Failed"), False, ["FAIL"]),
        (pod(node="n1"), pod(node="n1", phase="Failed", reason="Evicted"), False, ["EVICT"]),
        (pod(node="n1"), pod(node="n1", phase="Failed", reason="NodeLost"), False, ["LOST"]),
        (pod(node="n1"), pod(node="n1", deleting=True, disruption="EvictionByEvictionAPI"), False, ["EVICT"]),
        (pod(node="n1"), pod(node="n1", deleting=True, disruption="PreemptionByScheduler"), False, ["EVICT"]),
        (pod(node="n1"), pod(node="n1", deleting=True, disruption="DeletionByPodGC"), False, ["LOST"]),
        (pod(node="n1"), pod(node="n1", deleting=True), False, ["KILL"]),
        (pod(node="n1"), pod(node="n1"), True, ["KILL"]),
        (pod(), pod(), True, ["KILL"]),
        (pod(node="n1", deleting=True), pod(node="n1"), True, []),  # its KILL was sent when it started terminating
        (pod(node="n1", phase="Succeeded"), pod(node="n1", phase="Succeeded"), True, []),
        (None, pod(), True, []),
        (pod(node="n1"), pod(node="n1", mem="128Mi"), False, ["UPDATE_RUNNING"]),
        (pod(), pod(mem="128Mi"), False, ["UPDATE_PENDING"]),
    ],
)
def test_pod_transitions(
    before: dict[str, Any] | None, after: dict[str, Any], deleted: bool, events: list[str]
) -> None:
    old = pod_record(before) if before is not None else None
    assert transitions(old, pod_record(after), deleted=deleted) == events


def test_pod_record_fields() -> None:
    rec = pod_record(pod(node="n1"))
    assert (rec.task_id, rec.job_id, rec.task_index, rec.node) == ("ns/web-7d9f-abcde", "web", 0, "n1")
    assert rec.cpu == pytest.approx(0.25)
    assert rec.memory_gib == pytest.approx(0.25)
    sts = pod("db-2")
    sts["metadata"]["labels"] = {"apps.kubernetes.io/pod-index": "2"}
    sts["metadata"]["ownerReferences"] = [{"kind": "StatefulSet", "name": "db", "controller": True}]
    assert (pod_record(sts).job_id, pod_record(sts).task_index) == ("db", 2)
    bare = pod("solo")
    bare["metadata"]["ownerReferences"] = []
    assert pod_record(bare).job_id == "solo"


@pytest.mark.parametrize(
    ("q", "value"), [("100m", 0.1), ("2", 2.0), ("128Mi", 128 * 2**20), ("1G", 1e9), ("1e3", 1000.0)]
)
def test_quantities(q: str, value: float) -> None:
    assert parse_quantity(q) == pytest.approx(value)


def test_cluster_state_counts_and_queue_health() -> None:
    model = ClusterModel(WatcherSettings(degraded_pending=2, critical_pending=3, degraded_age_s=60, critical_age_s=300))
    model.replace_nodes(
        [
            {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            {
                "metadata": {"name": "n2"},
                "spec": {"unschedulable": True},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            },
            {"metadata": {"name": "n3"}},
        ],
        NOW,
    )
    events = model.replace_pods([pod("a", node="n1", uid="a"), pod("b", uid="b"), pod("c", uid="c", ns="other")], NOW)
    assert [(e.task_id, e.event) for e in events] == [
        ("ns/a", "SUBMIT"),
        ("ns/a", "SCHEDULE"),
        ("ns/b", "SUBMIT"),
        ("other/c", "SUBMIT"),
    ]
    model.deployment_event(
        "ADDED",
        {
            "metadata": {"namespace": "ns", "name": "web"},
            "spec": {"replicas": 3},
            "status": {"readyReplicas": 1, "availableReplicas": 1},
        },
    )
    states = model.cluster_states(NOW + 90_000)
    whole, ns = states[None], states["ns"]
    assert (whole.pending_pods, whole.running_pods, whole.queue_health) == (2, 1, "degraded")
    assert (whole.nodes_total, whole.nodes_ready, whole.deployments) == (3, 1, [])
    assert (ns.pending_pods, ns.running_pods, ns.oldest_pending_s, ns.queue_health) == (1, 1, 90.0, "degraded")
    assert [(d.name, d.desired_replicas, d.ready_replicas) for d in ns.deployments] == [("web", 3, 1)]
    assert states["other"].queue_health == "degraded"
    assert model.cluster_states(NOW + 400_000)["other"].queue_health == "critical"
    # A re-list that no longer has pod b: it was deleted while we were not watching.
    gone = model.replace_pods([pod("a", node="n1", uid="a"), pod("c", uid="c", ns="other")], NOW)
    assert [(e.task_id, e.event) for e in gone] == [("ns/b", "KILL")]
    # A deleted node loses its live pods.
    lost = model.node_event("DELETED", {"metadata": {"name": "n1"}}, NOW)
    assert [(e.task_id, e.event, e.machine) for e in lost] == [("ns/a", "LOST", "n1")]


class FakeSource:
    """Lists and watch streams scripted per call; a watch script item may be an exception to raise."""

    def __init__(self, lists: list[tuple[list[dict[str, Any]], str]], watches: list[list[Any]]) -> None:
        self.lists = lists
        self.watches = watches
        self.watch_calls: list[str] = []

    async def list(self, res: Resource) -> tuple[list[dict[str, Any]], str]:
        return self.lists.pop(0)

    async def watch(
        self, res: Resource, resource_version: str, timeout_s: int
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        self.watch_calls.append(resource_version)
        script = self.watches.pop(0) if self.watches else []
        for item in script:
            if isinstance(item, Exception):
                raise item
            yield item
        if not self.watches:
            await asyncio.Event().wait()  # idle like a quiet watch


def obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": name, "resourceVersion": rv}}


async def test_reflector_resumes_from_the_last_version_and_relists_after_gone() -> None:
    source = FakeSource(
        lists=[([obj("a", "5")], "10"), ([obj("a", "5"), obj("c", "30")], "31")],
        watches=[
            [("ADDED", obj("b", "11")), ("BOOKMARK", obj("", "15"))],  # then the server times out: resume at 15
            [("MODIFIED", obj("b", "16")), GoneError("too old resource version")],
            [("ADDED", obj("d", "32"))],
        ],
    )
    seen: list[tuple[str, str]] = []
    lists: list[list[str]] = []

    async def on_replace(items: list[dict[str, Any]]) -> None:
        lists.append([i["metadata"]["name"] for i in items])

    async def on_event(kind: str, o: dict[str, Any]) -> None:
        seen.append((kind, o["metadata"]["name"]))

    reflector = Reflector(PODS, source, on_replace=on_replace, on_event=on_event, timeout_s=5)
    stop = asyncio.Event()
    task = asyncio.create_task(reflector.run(stop))
    for _ in range(200):
        if len(seen) == 3:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert seen == [("ADDED", "b"), ("MODIFIED", "b"), ("ADDED", "d")]
    assert lists == [["a"], ["a", "c"]]
    assert source.watch_calls == ["10", "15", "31"]
    assert (reflector.stats.lists, reflector.stats.relists_after_gone, reflector.stats.resumes) == (2, 1, 1)
