"""What the watcher knows of the cluster, updated by watch events; yields task events and queue state.

Pure: dicts in, contract models out, the clock passed in. *Pending* means not yet
bound to a node (waiting in the scheduler's queue); *running* means bound and live
(there may be no kubelet to start it: the control plane's view is what counts here).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from contracts.models import ClusterState, DeploymentState, TaskEvent
from featurelib.borg_units import LargestNode
from services.cluster_watcher.mapping import Obj, PodRecord, pod_record, task_event, transitions
from services.cluster_watcher.settings import WatcherSettings
from services.runtime.k8s_quantity import GIB, parse_quantity

ClusterKey = str | None  # a namespace, None = the whole cluster
__all__ = ["ClusterKey", "ClusterModel", "NodeRecord", "Obj", "queue_health"]


def queue_health(pending: int, oldest_s: float, s: WatcherSettings) -> Literal["healthy", "degraded", "critical"]:
    """The queue's health from its pending pods and the oldest one's wait (the settings' thresholds)."""
    if pending >= s.critical_pending or oldest_s >= s.critical_age_s:
        return "critical"
    if pending >= s.degraded_pending or oldest_s >= s.degraded_age_s:
        return "degraded"
    return "healthy"


@dataclass(frozen=True)
class NodeRecord:
    name: str
    ready: bool
    schedulable: bool
    cpu_allocatable: float | None = None
    """``status.allocatable.cpu`` in cores (None: not reported)."""
    memory_allocatable_gib: float | None = None


def _allocatable(status: Obj, name: str, scale: float) -> float | None:
    raw = (status.get("allocatable") or {}).get(name)
    try:
        return parse_quantity(raw) / scale if raw is not None else None
    except ValueError:
        return None


@dataclass
class ClusterModel:
    settings: WatcherSettings
    pods: dict[str, PodRecord] = field(default_factory=dict)
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    deployments: dict[tuple[str, str], DeploymentState] = field(default_factory=dict)
    dirty: set[ClusterKey] = field(default_factory=set)

    # ------------------------------------------------------------------ pods

    def pod_event(self, kind: str, obj: Obj, now_ms: int) -> list[TaskEvent]:
        """One watch event (ADDED / MODIFIED / DELETED) for a pod."""
        new = pod_record(obj)
        old = self.pods.get(new.uid)
        deleted = kind == "DELETED"
        events = transitions(old, new, deleted=deleted)
        if deleted:
            self.pods.pop(new.uid, None)
        else:
            self.pods[new.uid] = new
        if events or old is None or deleted or old != new:
            self.dirty |= {new.namespace, None}
        return [task_event(new, e, now_ms) for e in events]

    def replace_pods(self, objs: Iterable[Obj], now_ms: int) -> list[TaskEvent]:
        """A fresh list (start-up or after 410 Gone): diff against what was known."""
        out: list[TaskEvent] = []
        listed: set[str] = set()
        for obj in objs:
            listed.add(str((obj.get("metadata") or {}).get("uid")))
            out += self.pod_event("MODIFIED", obj, now_ms)
        for uid in [u for u in self.pods if u not in listed]:
            gone = self.pods.pop(uid)
            out += [task_event(gone, e, now_ms) for e in transitions(gone, gone, deleted=True)]
            self.dirty |= {gone.namespace, None}
        return out

    # ------------------------------------------------------------------ nodes

    def node_event(self, kind: str, obj: Obj, now_ms: int) -> list[TaskEvent]:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        self.dirty.add(None)
        if kind == "DELETED":
            self.nodes.pop(name, None)
            return self._lose_pods_on(name, now_ms)
        conditions = (obj.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        schedulable = not (obj.get("spec") or {}).get("unschedulable", False)
        status = obj.get("status") or {}
        self.nodes[name] = NodeRecord(name=name, ready=ready, schedulable=schedulable,
                                      cpu_allocatable=_allocatable(status, "cpu", 1.0),
                                      memory_allocatable_gib=_allocatable(status, "memory", GIB))
        return []

    def largest_node(self) -> LargestNode:
        """Largest allocatable per resource over the known nodes: what the Borg scale divides by
        (``featurelib.borg_units``; the trace normalises each resource by its largest machine)."""
        cpus = [n.cpu_allocatable for n in self.nodes.values() if n.cpu_allocatable]
        mems = [n.memory_allocatable_gib for n in self.nodes.values() if n.memory_allocatable_gib]
        return LargestNode(cpu_cores=max(cpus, default=None), memory_gib=max(mems, default=None))

    def replace_nodes(self, objs: Iterable[Obj], now_ms: int) -> list[TaskEvent]:
        listed = set()
        out: list[TaskEvent] = []
        for obj in objs:
            listed.add(str((obj.get("metadata") or {}).get("name")))
            out += self.node_event("MODIFIED", obj, now_ms)
        for name in [n for n in self.nodes if n not in listed]:
            out += self.node_event("DELETED", {"metadata": {"name": name}}, now_ms)
        return out

    def _lose_pods_on(self, node: str, now_ms: int) -> list[TaskEvent]:
        out: list[TaskEvent] = []
        for uid, rec in list(self.pods.items()):
            if rec.node == node and rec.live:
                out += [task_event(rec, e, now_ms) for e in transitions(rec, rec, node_lost=True)]
                self.pods[uid] = PodRecord(**{**rec.__dict__, "phase": "Failed", "status_reason": "NodeLost"})
                self.dirty.add(rec.namespace)
        return out

    # ------------------------------------------------------------------ deployments

    def deployment_event(self, kind: str, obj: Obj) -> None:
        meta: dict[str, Any] = obj.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        self.dirty |= {key[0], None}
        if kind == "DELETED":
            self.deployments.pop(key, None)
            return
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        self.deployments[key] = DeploymentState(
            namespace=key[0],
            name=key[1],
            desired_replicas=int(spec.get("replicas", 1) or 0),
            ready_replicas=int(status.get("readyReplicas") or 0),
            available_replicas=int(status.get("availableReplicas") or 0),
        )

    def replace_deployments(self, objs: Iterable[Obj]) -> None:
        listed = set()
        for obj in objs:
            meta = obj.get("metadata") or {}
            listed.add((str(meta.get("namespace")), str(meta.get("name"))))
            self.deployment_event("MODIFIED", obj)
        for key in [k for k in self.deployments if k not in listed]:
            self.deployment_event("DELETED", {"metadata": {"namespace": key[0], "name": key[1]}})

    # ------------------------------------------------------------------ queue state

    def namespaces(self) -> set[str]:
        return {p.namespace for p in self.pods.values()} | {ns for ns, _ in self.deployments}

    def cluster_states(self, now_ms: int) -> dict[ClusterKey, ClusterState]:
        """Queue and replica state of the whole cluster (key None) and of every namespace, in one pass."""
        live: dict[ClusterKey, list[PodRecord]] = {None: []}
        for ns in self.namespaces():
            live[ns] = []
        for pod in self.pods.values():
            if pod.live:
                live[None].append(pod)
                live[pod.namespace].append(pod)
        by_ns: dict[str, list[DeploymentState]] = {}
        for (ns, _), dep in sorted(self.deployments.items()):
            by_ns.setdefault(ns, []).append(dep)
        nodes_ready = sum(1 for n in self.nodes.values() if n.ready and n.schedulable)
        return {
            ns: self.namespace_state(ns, pods, by_ns.get(ns, []) if ns is not None else [], nodes_ready, now_ms)
            for ns, pods in live.items()
        }

    def namespace_state(
        self, namespace: ClusterKey, pods: list[PodRecord], deployments: list[DeploymentState], ready: int, now_ms: int
    ) -> ClusterState:
        s = self.settings
        pending = [p for p in pods if p.node is None]
        oldest = min((p.created_ms for p in pending if p.created_ms is not None), default=None)
        oldest_s = max(0.0, (now_ms - oldest) / 1000.0) if oldest is not None else 0.0
        health = queue_health(len(pending), oldest_s, s)
        return ClusterState(
            cluster=s.cluster,
            namespace=namespace,
            ts_ms=now_ms,
            pending_pods=len(pending),
            running_pods=len(pods) - len(pending),
            oldest_pending_s=round(oldest_s, 3),
            queue_health=health,
            nodes_total=len(self.nodes),
            nodes_ready=ready,
            deployments=deployments,
        )

    def state_key(self, namespace: ClusterKey) -> str:
        return f"{self.settings.cluster}/{namespace or '_'}"
