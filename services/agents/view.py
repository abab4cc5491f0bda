"""The latest inputs an agent has seen, per key, and which targets a new input affects.

Pure state: no Kafka, no clock. Each entry remembers where it came from (topic, key,
timestamp) so proposals can cite it as evidence, and the span context it arrived in
so the agent's span can link it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from opentelemetry.trace import SpanContext

from contracts.base import Contract
from contracts.models import (
    AnomalyScore,
    ClusterState,
    DeploymentState,
    FailureRiskV2,
    LoadForecast,
    NodeState,
    PodPressure,
    RegimeLabelV2,
    TaskEvent,
)

if TYPE_CHECKING:
    from services.agents.pod_loads import NodeMeta, PodMeta

M = TypeVar("M", bound=Contract, covariant=True)
DeploymentKey = tuple[str, str]  # (namespace, name)
TERMINAL_EVENTS = frozenset({"EVICT", "FAIL", "FINISH", "KILL", "LOST"})


@dataclass(frozen=True)
class Seen(Generic[M]):
    """One input message: the value and where it came from."""

    value: M
    topic: str
    key: str
    ts_ms: int
    input_ts_ms: int
    span: SpanContext | None = None


@dataclass
class TaskInfo:
    task_id: str
    job_id: str
    namespace: str | None
    machine: str | None
    running: bool
    priority: int | None
    cpu_request: float | None
    memory_request_gib: float | None
    seen: Seen[TaskEvent]

    @property
    def deployment(self) -> DeploymentKey | None:
        return (self.namespace, self.job_id) if self.namespace else None


@dataclass
class Scope:
    """Targets whose proposals may change after an input."""

    nodes: set[str] = field(default_factory=set)
    deployments: set[DeploymentKey] = field(default_factory=set)
    tasks: set[str] = field(default_factory=set)
    namespaces: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.nodes or self.deployments or self.tasks or self.namespaces)


class ClusterView:
    """Latest risk / regime / anomaly / node state per node, tasks, deployments and queue health."""

    def __init__(self, *, max_tasks: int = 200_000) -> None:
        self.max_tasks = max_tasks
        # the latest label per node, ``unknown`` included: a newer abstention replaces an older
        # contended label, so nothing keeps acting on what the model no longer claims
        self.regimes: dict[str, Seen[RegimeLabelV2]] = {}
        self.anomalies: dict[str, Seen[AnomalyScore]] = {}
        # likewise the latest risk, out-of-range or not (policies read it through proposals.usable_risk)
        self.node_risk: dict[str, Seen[FailureRiskV2]] = {}
        self.task_risk: dict[str, Seen[FailureRiskV2]] = {}
        self.nodestate: dict[str, Seen[NodeState]] = {}
        # the latest load forecast per node (forecasts.v1), ``unknown`` included: it replaces an older answer
        self.forecasts: dict[str, Seen[LoadForecast]] = {}
        self.clusters: dict[str | None, Seen[ClusterState]] = {}  # by namespace, None = cluster-wide
        self.deployments: dict[DeploymentKey, Seen[DeploymentState]] = {}
        self.tasks: OrderedDict[str, TaskInfo] = OrderedDict()
        # per-pod pressure (podpressure.v1) by pod UID, ``unknown`` included (it replaces an older answer)
        self.pod_pressure: OrderedDict[str, Seen[PodPressure]] = OrderedDict()
        # the pods and nodes as the Kubernetes API last listed them (``kube_pods``; interference moves only)
        self.kube_pods: tuple[PodMeta, ...] = ()
        self.kube_nodes: tuple[NodeMeta, ...] = ()
        self.kube_listed_ms: int | None = None
        self.moved: dict[str, int] = {}
        """Pods (a Job's by the Job, others by their key) an interference move was proposed for, and when
        (ms): never again (oldest forgotten past ``max_tasks``)."""
        self.moves_planned_ms = 0
        self._on_node: dict[str, set[str]] = {}
        self._of_deployment: dict[DeploymentKey, set[str]] = {}

    # ------------------------------------------------------------------ queries

    def everything(self) -> Scope:
        nodes = set(self.regimes) | set(self.anomalies) | set(self.node_risk) | set(self.nodestate)
        return Scope(
            nodes=nodes,
            deployments=set(self.deployments),
            tasks=set(self.tasks),
            namespaces={ns for ns in self.clusters if ns is not None},
        )

    def tasks_on(self, node: str) -> list[TaskInfo]:
        return [self.tasks[t] for t in sorted(self._on_node.get(node, ())) if t in self.tasks]

    def tasks_of(self, deployment: DeploymentKey) -> list[TaskInfo]:
        return [self.tasks[t] for t in sorted(self._of_deployment.get(deployment, ())) if t in self.tasks]

    def queue(self, namespace: str | None) -> Seen[ClusterState] | None:
        """Queue health of a namespace, falling back to the cluster-wide state."""
        return self.clusters.get(namespace) or self.clusters.get(None)

    # ------------------------------------------------------------------ updates

    def update(self, topic: str, key: str, value: Contract, span: SpanContext | None = None) -> Scope:
        """Remember one input and return the targets it can affect."""
        if isinstance(value, RegimeLabelV2):
            self.regimes[value.node] = Seen(value, topic, key, value.ts_ms, value.input_ts_ms, span)
            return self._node_scope(value.node)
        if isinstance(value, AnomalyScore):
            self.anomalies[value.node] = Seen(value, topic, key, value.ts_ms, value.input_ts_ms, span)
            return self._node_scope(value.node)
        if isinstance(value, NodeState):
            self.nodestate[value.node] = Seen(value, topic, key, value.ts_ms, value.ts_ms, span)
            return self._node_scope(value.node)
        if isinstance(value, LoadForecast):
            self.forecasts[value.node] = Seen(value, topic, key, value.ts_ms, value.input_ts_ms, span)
            return self._node_scope(value.node)
        if isinstance(value, FailureRiskV2):
            seen = Seen(value, topic, key, value.ts_ms, value.input_ts_ms, span)
            if value.target_kind == "node":
                self.node_risk[value.target] = seen
                return self._node_scope(value.target)
            self.task_risk[value.target] = seen
            return self._task_scope(value.target)
        if isinstance(value, PodPressure):
            self.pod_pressure[value.pod_uid] = Seen(value, topic, key, value.ts_ms, value.input_ts_ms, span)
            self.pod_pressure.move_to_end(value.pod_uid)
            while len(self.pod_pressure) > self.max_tasks:
                self.pod_pressure.popitem(last=False)
            return Scope(nodes={value.node})
        if isinstance(value, TaskEvent):
            return self._task_event(Seen(value, topic, key, value.ts_ms, value.ts_ms, span))
        if isinstance(value, ClusterState):
            return self._cluster_state(Seen(value, topic, key, value.ts_ms, value.ts_ms, span))
        return Scope()

    def _node_scope(self, node: str) -> Scope:
        tasks = self.tasks_on(node)
        return Scope(
            nodes={node},
            tasks={t.task_id for t in tasks},
            deployments={t.deployment for t in tasks if t.deployment is not None},
        )

    def _task_scope(self, task_id: str) -> Scope:
        scope = Scope(tasks={task_id})
        info = self.tasks.get(task_id)
        if info is not None and info.deployment is not None:
            scope.deployments.add(info.deployment)
        return scope

    def _task_event(self, seen: Seen[TaskEvent]) -> Scope:
        ev = seen.value
        old = self.tasks.get(ev.task_id)
        scope = self._task_scope(ev.task_id)
        if old is not None:
            self._unindex(old)
            if old.machine:
                scope.nodes.add(old.machine)
        if ev.event in TERMINAL_EVENTS:
            self.tasks.pop(ev.task_id, None)
            self.task_risk.pop(ev.task_id, None)
        else:
            info = TaskInfo(
                task_id=ev.task_id,
                job_id=ev.job_id,
                namespace=ev.namespace,
                machine=ev.machine or (old.machine if old else None),
                running=ev.event in ("SCHEDULE", "UPDATE_RUNNING") or (old is not None and old.running),
                priority=ev.priority if ev.priority is not None else (old.priority if old else None),
                cpu_request=ev.cpu_request if ev.cpu_request is not None else (old.cpu_request if old else None),
                memory_request_gib=(
                    ev.memory_request if ev.memory_request is not None else (old.memory_request_gib if old else None)
                ),
                seen=seen,
            )
            if ev.event == "UPDATE_PENDING":
                info.running = False
            self.tasks[ev.task_id] = info
            self.tasks.move_to_end(ev.task_id)
            self._index(info)
            if info.machine:
                scope.nodes.add(info.machine)
            if info.deployment is not None:
                scope.deployments.add(info.deployment)
            while len(self.tasks) > self.max_tasks:
                _, dropped = self.tasks.popitem(last=False)
                self._unindex(dropped)
        return scope

    def _index(self, info: TaskInfo) -> None:
        if info.machine:
            self._on_node.setdefault(info.machine, set()).add(info.task_id)
        if info.deployment is not None:
            self._of_deployment.setdefault(info.deployment, set()).add(info.task_id)

    def _unindex(self, info: TaskInfo) -> None:
        if info.machine and info.machine in self._on_node:
            self._on_node[info.machine].discard(info.task_id)
        if info.deployment is not None and info.deployment in self._of_deployment:
            self._of_deployment[info.deployment].discard(info.task_id)

    def _cluster_state(self, seen: Seen[ClusterState]) -> Scope:
        state = seen.value
        ns = state.namespace
        self.clusters[ns] = seen
        scope = Scope()
        if ns is None:
            scope.namespaces = {n for n in self.clusters if n is not None}
            scope.deployments = set(self.deployments)
            return scope
        scope.namespaces.add(ns)
        fresh = {(d.namespace, d.name) for d in state.deployments}
        for key in [k for k in self.deployments if k[0] == ns and k not in fresh]:
            del self.deployments[key]
        for dep in state.deployments:
            key = (dep.namespace, dep.name)
            self.deployments[key] = Seen(dep, seen.topic, seen.key, seen.ts_ms, seen.input_ts_ms, seen.span)
        scope.deployments |= fresh
        return scope
