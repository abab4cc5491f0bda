"""The reliability agent's view of the cluster's pods and nodes for interference moves (I/O).

Every ``AGENT_RELIABILITY_PODS_REFRESH_S`` it lists the bound, non-terminal pods of every namespace and the
nodes (paginated JSON, no model classes) and puts them in the agent's ``ClusterView`` (``kube_pods``,
``kube_nodes``, ``kube_listed_ms``). A list that fails keeps the previous one and is logged; until the first
list succeeds, and once the last success is older than ``AGENT_RELIABILITY_PRESSURE_MAX_AGE_S``, the rule
proposes nothing. Needs ``list`` on pods and nodes (deploy/components/agent-interference).
"""

from __future__ import annotations

import asyncio
import time

from kubernetes_asyncio import client

from services.agents.pod_loads import PodLabels, node_meta, pod_meta
from services.agents.settings import ReliabilitySettings
from services.agents.view import ClusterView
from services.runtime.kube_client import list_objects, relist_until_stopped

BOUND_AND_LIVE = [("fieldSelector", "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed")]


async def follow_cluster(api: client.ApiClient, view: ClusterView, settings: ReliabilitySettings,
                         stop: asyncio.Event) -> None:
    """List pods and nodes into ``view`` until ``stop`` is set (then closes ``api``)."""
    labels = PodLabels(settings.class_label, settings.latency_label, settings.job_label)

    async def refresh(api: client.ApiClient) -> str:
        pods, _ = await list_objects(api, "/api/v1/pods", BOUND_AND_LIVE)
        nodes, _ = await list_objects(api, "/api/v1/nodes", [])
        view.kube_pods = tuple(m for p in pods if (m := pod_meta(p, labels)) is not None)
        view.kube_nodes = tuple(k for n in nodes if (k := node_meta(n)) is not None)
        view.kube_listed_ms = int(time.time() * 1000)
        return f"{len(view.kube_pods)} pods, {len(view.kube_nodes)} nodes"

    await relist_until_stopped(api, stop, settings.pods_refresh_s, refresh, what="listing pods and nodes",
                               on_failure="interference moves use the last list")
