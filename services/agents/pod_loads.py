"""Running pods and nodes as the interference rule reads them: Kubernetes objects joined to podpressure.v1.

Pure: (pod and node objects as JSON dicts, the latest PodPressure per pod UID, now) → ``NodeLoad`` per node
(:mod:`services.agents.interference_policy`). The Kubernetes side comes from ``kube_pods`` (I/O).

* a **pod** counts when it is bound and Running; its workload class is the value of the class label
  (``AGENT_RELIABILITY_CLASS_LABEL``; a pod without a known class is *unclassified*), it is latency-sensitive
  when the latency label (``AGENT_RELIABILITY_LATENCY_LABEL``) says ``"true"``, its job is the job label's
  value when set (``AGENT_RELIABILITY_JOB_LABEL``), else its controller's name (``ownerReferences``), else
  itself; its age runs from ``status.startTime``; its requests are what kube-scheduler reserves;
* its **pressure** is the newest ``ok`` PodPressure for its UID no older than ``max_age_s``; a pod with no
  estimate at all that started within ``max_age_s`` (its first 10 s window is still open) gets its class's
  guess (``simulator.workloads.CLASS_PRESSURE_GUESS``, as the offline orchestrator does) and is never moved
  (age 0);
* a node is **known** when every pod on it is classified and has a fresh ``ok`` estimate or that guess. Only
  known nodes are returned: an ``unknown`` estimate, a stale one, none long after the pod started or an
  unclassified pod leaves the whole node out — the rule neither moves a pod off it nor onto it (nothing acts
  on what the model did not answer);
* a node is **schedulable** unless ``spec.unschedulable``; a pod moves there only if it tolerates the node's
  ``NoSchedule``/``NoExecute`` taints; its free room is allocatable minus the requests of the pods bound there
  (any non-terminal phase).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from contracts.models import WORKLOAD_CLASSES, PodPressure
from services.agents.interference_policy import NodeLoad, PodLoad
from services.runtime.k8s_quantity import pod_requests, quantity_of
from services.runtime.pod_jobs import controller_of, job_of, namespace_of
from simulator.workloads import CLASS_PRESSURE_GUESS

Obj = Mapping[str, Any]
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class PodLabels:
    """Which labels say a pod's workload class, whether it is latency-sensitive, and its job."""

    workload_class: str
    latency_sensitive: str
    job: str | None = None


@dataclass(frozen=True, slots=True)
class PodMeta:
    key: str
    """``<namespace>/<name>``."""
    uid: str
    node: str
    phase: str
    job: str
    owner: str
    """``<namespace>/<Kind>/<name>`` of its controller, or "" when it has none."""
    workload_class: str | None
    latency_sensitive: bool
    started_s: float | None
    milli_cpu: int
    memory: int
    tolerations: tuple[tuple[str, str, str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class NodeMeta:
    name: str
    milli_cpu: int
    memory: int
    schedulable: bool
    taints: tuple[tuple[str, str, str], ...] = ()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _timestamp(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def pod_meta(pod: Obj, labels: PodLabels) -> PodMeta | None:
    """A bound pod's metadata (None: not bound, or not a pod object)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    node, name, uid = spec.get("nodeName"), meta.get("name"), meta.get("uid")
    if not (isinstance(node, str) and node and isinstance(name, str) and isinstance(uid, str)):
        return None
    namespace = namespace_of(meta)
    tags: Mapping[str, Any] = meta.get("labels") or {}
    owner = controller_of(meta)
    workload_class = tags.get(labels.workload_class)
    cpu, memory = pod_requests(pod)
    tolerations = tuple((_text(t.get("key")), _text(t.get("operator")) or "Equal", _text(t.get("value")),
                         _text(t.get("effect"))) for t in spec.get("tolerations") or [] if isinstance(t, Mapping))
    return PodMeta(key=f"{namespace}/{name}", uid=uid, node=node, phase=str(status.get("phase") or "Pending"),
                   job=job_of(meta, labels.job), owner=f"{namespace}/{owner}" if owner else "",
                   workload_class=workload_class if workload_class in WORKLOAD_CLASSES else None,
                   latency_sensitive=str(tags.get(labels.latency_sensitive, "")).lower() == "true",
                   started_s=_timestamp(status.get("startTime")), milli_cpu=cpu, memory=memory,
                   tolerations=tolerations)


def node_meta(node: Obj) -> NodeMeta | None:
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    name = meta.get("name")
    if not isinstance(name, str):
        return None
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    taints = tuple((_text(t.get("key")), _text(t.get("value")), _text(t.get("effect")))
                   for t in spec.get("taints") or [] if isinstance(t, Mapping))
    return NodeMeta(name, quantity_of(allocatable, "cpu", 1000), quantity_of(allocatable, "memory", 1),
                    not spec.get("unschedulable"), taints)


def node_loads(pods: Iterable[PodMeta], nodes: Iterable[NodeMeta], pressures: Mapping[str, PodPressure],
               now_ms: int, max_age_s: float) -> list[NodeLoad]:
    """The known nodes (module docstring), each with its running pods' estimates and its free room."""
    by_node: dict[str, list[PodMeta]] = {}
    for p in pods:
        if p.phase not in TERMINAL_PHASES:
            by_node.setdefault(p.node, []).append(p)
    out: list[NodeLoad] = []
    for node in nodes:
        bound = by_node.get(node.name, [])
        loads: list[PodLoad] = []
        for p in bound:
            if p.phase != "Running":
                continue
            est = pressures.get(p.uid)
            age = max(0.0, now_ms / 1000 - p.started_s) if p.started_s is not None else 0.0
            if p.workload_class is None:
                break
            if est is None and age <= max_age_s:
                # not measured yet (its first window is still open): its class's guess, and it is not moved
                pressure, age = CLASS_PRESSURE_GUESS[WORKLOAD_CLASSES.index(p.workload_class)], 0.0
            elif (est is None or est.status != "ok" or est.node != node.name
                  or now_ms - est.ts_ms > max_age_s * 1000):
                break
            else:
                pressure = (est.llc or 0.0, est.membw or 0.0, est.core or 0.0, est.frontend or 0.0)
            loads.append(PodLoad(key=p.key, job=p.job, workload_class=p.workload_class,
                                 latency_sensitive=p.latency_sensitive, pressure=pressure, age_s=age,
                                 milli_cpu=p.milli_cpu, memory=p.memory, tolerations=p.tolerations))
        else:
            out.append(NodeLoad(name=node.name, pods=tuple(loads),
                                free_milli_cpu=node.milli_cpu - sum(p.milli_cpu for p in bound),
                                free_memory=node.memory - sum(p.memory for p in bound),
                                schedulable=node.schedulable, taints=node.taints))
    return out
