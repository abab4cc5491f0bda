"""Cluster state as Kubernetes reports it, beside what the orchestrator last decided.

`compare` names the relation between the orchestrator's intent for a Deployment (the replicas its
latest decision asked for, and what became of that decision) and the replicas the cluster watcher
reports, so a disagreement is visible instead of inferred:

- ``agrees``      applied, and Kubernetes reports the asked-for replicas (all ready);
- ``converging``  applied, desired matches, not all ready yet;
- ``differs``     applied, and a cluster state newer than the decision reports other replicas;
- ``pending``     applied (or no result yet), no cluster state since the decision;
- ``not-applied`` dry-run / shadow / refused / failed: Kubernetes is expected to keep its own value;
- ``no-intent``   the orchestrator has not decided anything about this Deployment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contracts.models import ClusterState, DeploymentState
from services.dashboard.decisions import Intent

JsonDict = dict[str, Any]
NOT_APPLIED = ("dry-run", "shadow", "refused", "failed")


def cluster_key(state: ClusterState) -> str:
    return f"{state.cluster}/{state.namespace or '_'}"


def deployment_key(namespace: str | None, name: str) -> str:
    """Same spelling as TargetRef.key() for a Deployment."""
    return f"Deployment/{namespace or '_'}/{name}"


def compare(intent: Intent | None, dep: DeploymentState | None, state_ts_ms: int | None) -> str:
    if intent is None:
        return "no-intent"
    if intent.outcome in NOT_APPLIED:
        return "not-applied"
    if dep is None or state_ts_ms is None or state_ts_ms < intent.ts_ms:
        return "pending"
    if intent.replicas is None:
        return "agrees" if dep.ready_replicas >= dep.desired_replicas else "converging"
    if dep.desired_replicas != intent.replicas:
        return "differs"
    return "agrees" if dep.ready_replicas >= dep.desired_replicas else "converging"


@dataclass(slots=True)
class ClusterEntry:
    state: ClusterState
    version: int


class ClusterBoard:
    def __init__(self) -> None:
        self._entries: dict[str, ClusterEntry] = {}
        self.version = 0

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, state: ClusterState, version: int) -> None:
        key = cluster_key(state)
        current = self._entries.get(key)
        if current is not None and current.state.ts_ms > state.ts_ms:
            return
        self._entries[key] = ClusterEntry(state=state, version=version)
        self.version = version

    def forget(self, key: str, version: int) -> None:
        if self._entries.pop(key, None) is not None:
            self.version = version

    def view(self, intents: dict[str, Intent]) -> JsonDict:
        """Every cluster/namespace with its Deployments joined to the orchestrator's intent.

        Deployments the orchestrator decided about but no cluster state lists are returned as
        ``unlisted``, so a decision on a Deployment the watcher does not report is not lost.
        """
        out: list[JsonDict] = []
        listed: set[str] = set()
        for key in sorted(self._entries):
            s = self._entries[key].state
            deployments = []
            for dep in s.deployments:
                dkey = deployment_key(dep.namespace, dep.name)
                listed.add(dkey)
                intent = intents.get(dkey)
                deployments.append(
                    {
                        "key": dkey,
                        "namespace": dep.namespace,
                        "name": dep.name,
                        "desired": dep.desired_replicas,
                        "ready": dep.ready_replicas,
                        "available": dep.available_replicas,
                        "intent": intent.view() if intent else None,
                        "status": compare(intent, dep, s.ts_ms),
                    }
                )
            ns_intent = intents.get(f"Namespace/_/{s.namespace}") if s.namespace else None
            out.append(
                {
                    "key": key,
                    "cluster": s.cluster,
                    "namespace": s.namespace,
                    "ts": s.ts_ms,
                    "pending_pods": s.pending_pods,
                    "running_pods": s.running_pods,
                    "oldest_pending_s": s.oldest_pending_s,
                    "queue_health": s.queue_health,
                    "nodes_total": s.nodes_total,
                    "nodes_ready": s.nodes_ready,
                    "deployments": deployments,
                    "namespace_intent": ns_intent.view() if ns_intent else None,
                }
            )
        unlisted = [
            {"key": k, "intent": i.view(), "status": compare(i, None, None)}
            for k, i in sorted(intents.items())
            if k.startswith("Deployment/") and k not in listed
        ]
        return {"clusters": out, "unlisted": unlisted}
