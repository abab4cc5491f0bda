"""The cluster watcher against the real kube-apiserver, with the ServiceAccount and RBAC from deploy/."""

# ruff: noqa: F811 (pytest fixtures imported from test_referee_helpers are test parameters here)

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from contracts.models import ClusterState, TaskEvent
from services.cluster_watcher.kube import KubeSource
from services.cluster_watcher.main import Watcher
from services.cluster_watcher.settings import WatcherSettings
from services.runtime.kube_client import api_client
from services.runtime.producer import Producer
from tests.conftest import wait_until
from tests.integration.test_referee_helpers import (  # noqa: F401 (fixtures)
    DEPLOY,
    SYSTEM_NS,
    Nodes,
    apply,
    collect,
    deployment,
    install_rbac,
    kube_admin,
    kube_ns,
    kubectl,
    kubectl_json,
    mark_running,
    nodes,
    pod,
    token_kubeconfig,
)

pytestmark = [pytest.mark.integration, pytest.mark.kube]


def unschedulable(name: str) -> dict[str, Any]:
    manifest = pod(name, None)
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "no-such-node"}
    return manifest


def by_task(got: list[tuple[TaskEvent, Any]], ns: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for ev, _ in got:
        if ev.namespace == ns:
            out[ev.task_id.split("/", 1)[1]].append(ev.event)
    return out


async def test_pod_lifecycle_becomes_borg_events_and_queue_state(
    kafka_bootstrap: str, topic_prefix: str, kube_admin: Path, kube_ns: str, nodes: Nodes, tmp_path: Path
) -> None:
    ns = kube_ns
    install_rbac(DEPLOY / "cluster-watcher" / "rbac.yaml")
    kubeconfig = token_kubeconfig(kube_admin, "borg-cluster-watcher", SYSTEM_NS, tmp_path / "watcher.kubeconfig")
    for forbidden in [("get", "secrets"), ("patch", "pods"), ("create", "pods/eviction"), ("get", "pods")]:
        answer = kubectl(
            "auth", "can-i", *forbidden, f"--as=system:serviceaccount:{SYSTEM_NS}:borg-cluster-watcher", check=False
        )
        assert answer.stdout.strip() == "no", forbidden

    settings = WatcherSettings(
        KAFKA_BOOTSTRAP=kafka_bootstrap,
        BORG_TOPIC_PREFIX=topic_prefix,
        cluster="it",
        degraded_pending=1,
        critical_pending=5,
        state_interval_s=0.2,
        watch_timeout_s=30,
    )
    api = await api_client(str(kubeconfig))
    producer = Producer(bootstrap=kafka_bootstrap, client_id="it-watcher", topic_prefix=topic_prefix)
    await producer.start()
    # Resume the pod watch from a long-compacted resourceVersion: the API answers 410 Gone, the watcher re-lists.
    watcher = Watcher(settings, KubeSource(api), producer, resume_from={"pods": "1"})
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        worker, doomed = nodes.make(), nodes.make()
        apply(
            [
                deployment("web", 2, worker),
                unschedulable("stuck"),
                pod("job", worker),
                pod("crash", worker),
                pod("lonely", doomed),
            ],
            namespace=ns,
        )
        await wait_until(watcher.synced, timeout=30, what="the watcher to list pods, nodes and deployments")

        def web_pods() -> list[str]:
            items = kubectl_json("get", "pods", "-n", ns, "-l", "app=web")["items"]
            bound = [p["metadata"]["name"] for p in items if p["spec"].get("nodeName")]
            return bound if len(bound) == 2 else []

        web = await wait_until(web_pods, timeout=60, interval=0.3, what="2 web pods bound by the scheduler")
        evicted = sorted(web)[0]
        kubectl(
            "create",
            "--raw",
            f"/api/v1/namespaces/{ns}/pods/{evicted}/eviction",
            "-f",
            "-",
            stdin=json.dumps(
                {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": evicted, "namespace": ns}}
            ),
        )
        kubectl(
            "patch",
            "pod",
            "job",
            "-n",
            ns,
            "--subresource=status",
            "-p",
            json.dumps({"status": {"phase": "Succeeded"}}),
        )
        kubectl(
            "patch", "pod", "crash", "-n", ns, "--subresource=status", "-p", json.dumps({"status": {"phase": "Failed"}})
        )
        kubectl("delete", "node", doomed, "--wait=false")
        kubectl("delete", "pod", sorted(web)[1], "-n", ns, "--wait=false")
        for name in kubectl_json("get", "pods", "-n", ns, "-l", "app=web")["items"]:
            if name["metadata"]["name"] not in web and name["spec"].get("nodeName"):
                mark_running(ns, name["metadata"]["name"])

        def complete(got: list[tuple[TaskEvent, Any]]) -> bool:
            events = by_task(got, ns)
            # the ReplicaSet's replacement pods come from the controller manager, which lags under load
            replaced = any(t.startswith("web-") and t not in web for t in events)
            return replaced and all(
                events.get(k, [])[-1:] == [v]
                for k, v in [
                    (evicted, "EVICT"),
                    (sorted(web)[1], "KILL"),
                    ("job", "FINISH"),
                    ("crash", "FAIL"),
                    ("lonely", "LOST"),
                ]
            )

        got = await collect(kafka_bootstrap, f"{topic_prefix}taskevents.v1", TaskEvent, complete, within=60)
        events = by_task(got, ns)
        assert events[evicted] == ["SUBMIT", "SCHEDULE", "EVICT"]
        assert events[sorted(web)[1]] == ["SUBMIT", "SCHEDULE", "KILL"]
        assert events["job"] == ["SUBMIT", "SCHEDULE", "FINISH"]
        assert events["crash"] == ["SUBMIT", "SCHEDULE", "FAIL"]
        assert events["lonely"] == ["SUBMIT", "SCHEDULE", "LOST"]
        assert events["stuck"] == ["SUBMIT"]
        sample = next(ev for ev, _ in got if ev.task_id == f"{ns}/{evicted}")
        assert (sample.job_id, sample.machine, sample.source, sample.priority) == ("web", worker, "kubernetes", 0)
        assert sample.cpu_request == pytest.approx(0.01)
        assert sample.memory_request == pytest.approx(32 / 1024)
        assert sample.scheduling_class == 1  # the API server's qosClass Burstable, on the Borg scale
        # Replacements made by the ReplicaSet are new tasks of the same job.
        replacements = [t for t in events if t.startswith("web-") and t not in web]
        assert replacements
        assert all(events[t][:1] == ["SUBMIT"] for t in replacements)

        def queue(got: list[tuple[ClusterState, Any]]) -> bool:
            mine = [s for s, _ in got if s.namespace == ns]
            return (
                bool(mine) and mine[-1].pending_pods == 1 and any(d.ready_replicas >= 1 for d in mine[-1].deployments)
            )

        states = await collect(kafka_bootstrap, f"{topic_prefix}clusterstate.v1", ClusterState, queue, within=40)
        last = [s for s, _ in states if s.namespace == ns][-1]
        assert (last.cluster, last.queue_health, last.pending_pods) == ("it", "degraded", 1)
        assert [(d.name, d.desired_replicas) for d in last.deployments] == [("web", 2)]
        keys = {r for _, headers in states for k, r in headers if k == "schema"}
        assert keys == {b"clusterstate.v1"}
        assert any(s.namespace is None for s, _ in states), "a cluster-wide state too"
        pods_reflector = watcher.reflectors[0]
        assert pods_reflector.stats.relists_after_gone >= 1, pods_reflector.stats
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await producer.stop()
        await api.close()
