"""The watcher's part of the Borg units: pod QoS → scheduling class, and the largest node's allocatable."""

from __future__ import annotations

from typing import Any

import pytest

from services.cluster_watcher.mapping import pod_record, qos_class, task_event
from services.cluster_watcher.model import ClusterModel
from services.cluster_watcher.settings import WatcherSettings

NOW = 1_750_000_000_000


def container(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "resources": resources}


@pytest.mark.parametrize(("containers", "qos"), [
    ([container()], "BestEffort"),
    ([container({"cpu": "250m"})], "Burstable"),
    ([container(limits={"cpu": "1", "memory": "1Gi"})], "Guaranteed"),  # requests default to the limits
    ([container({"cpu": "1000m", "memory": "1024Mi"}, {"cpu": "1", "memory": "1Gi"})], "Guaranteed"),
    ([container({"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})], "Burstable"),
    ([container(limits={"cpu": "1"})], "Burstable"),  # no memory limit
    ([container(limits={"cpu": "1", "memory": "1Gi"}), container()], "Burstable"),
])
def test_qos_class_as_the_api_server_computes_it(containers: list[dict[str, Any]], qos: str) -> None:
    assert qos_class({"containers": containers}) == qos


def pod(priority: int | None, containers: list[dict[str, Any]], qos: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Pending"}
    if qos:
        status["qosClass"] = qos
    spec: dict[str, Any] = {"containers": containers, "nodeName": "n1"}
    if priority is not None:
        spec["priority"] = priority
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec, "status": status}


@pytest.mark.parametrize(("priority", "containers", "qos", "klass"), [
    (0, [container()], None, 0),
    (0, [container({"cpu": "1"})], None, 1),
    (0, [container(limits={"cpu": "1", "memory": "1Gi"})], None, 2),
    (1_000_000, [container(limits={"cpu": "1", "memory": "1Gi"})], None, 3),  # Guaranteed at production priority
    (2_000_001_000, [container(limits={"cpu": "1", "memory": "1Gi"})], None, 3),
    (3_000_000_000, [container(limits={"cpu": "1", "memory": "1Gi"})], None, 2),  # unplaceable priority: class only
    (0, [container()], "Guaranteed", 2),  # status.qosClass, when the API server set it, wins
])
def test_task_events_carry_the_borg_scheduling_class(priority: int, containers: list[dict[str, Any]],
                                                     qos: str | None, klass: int) -> None:
    ev = task_event(pod_record(pod(priority, containers, qos)), "SCHEDULE", NOW)
    assert ev.scheduling_class == klass
    assert ev.priority == priority and ev.source == "kubernetes"  # the raw priority stays as it was


def test_largest_node_is_the_largest_allocatable_per_resource() -> None:
    model = ClusterModel(WatcherSettings())
    assert model.largest_node().cpu_cores is None and model.largest_node().memory_gib is None

    def node(name: str, cpu: str | None, memory: str | None) -> dict[str, Any]:
        allocatable = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
        return {"metadata": {"name": name}, "status": {"allocatable": allocatable, "conditions": []}}

    model.replace_nodes([node("a", "8", "16Gi"), node("b", "3500m", "64Gi"), node("c", None, "bogus")], NOW)
    largest = model.largest_node()
    assert (largest.cpu_cores, largest.memory_gib) == (8.0, 64.0)  # from different nodes, as the trace does
    model.node_event("DELETED", {"metadata": {"name": "b"}}, NOW)
    assert model.largest_node().memory_gib == 16.0
