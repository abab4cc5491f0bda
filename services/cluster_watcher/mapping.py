"""Pod lifecycle → Borg task events. Pure: works on the API's JSON (dicts).

A pod is a task: ``task_id`` = "<namespace>/<pod>", ``job_id`` = the Deployment (a
ReplicaSet's name without its pod-template-hash), else the controlling owner, else
the pod itself; ``task_index`` = the StatefulSet pod index or Job completion index.

| what the API shows                                            | event          |
|---------------------------------------------------------------|----------------|
| first sight of the pod                                        | SUBMIT         |
| ``spec.nodeName`` set (bound by the scheduler)                | SCHEDULE       |
| phase Succeeded                                               | FINISH         |
| phase Failed, reason Evicted / Preempting                     | EVICT          |
| phase Failed, reason NodeLost                                 | LOST           |
| phase Failed, otherwise                                       | FAIL           |
| deleted/terminating, DisruptionTarget reason in EVICTION_REASONS | EVICT          |
| deleted/terminating, DisruptionTarget DeletionByPodGC; Node gone | LOST           |
| deleted/terminating otherwise                                 | KILL           |
| requests changed while live                                   | UPDATE_RUNNING / UPDATE_PENDING |

Each pod gets at most one terminal event. Times are observation times (the watcher's
clock when the change was seen), requests are cores and GiB and ``priority`` is the pod's
raw Kubernetes priority (the risk stage puts them on the Borg scale with
``featurelib.borg_units``). ``scheduling_class`` is Borg's: the pod's QoS class
(``status.qosClass``, else derived from the requests and limits as the API server does)
mapped by ``featurelib.borg_units.scheduling_class``; absent when it cannot be placed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from contracts.models import TaskEvent, TaskEventType
from featurelib import borg_units
from services.runtime.k8s_quantity import GIB, parse_quantity

Obj = dict[str, Any]
EVICTION_REASONS = frozenset(
    {"EvictionByEvictionAPI", "PreemptionByScheduler", "DeletionByTaintManager", "TerminationByKubelet"}
)


@dataclass(frozen=True)
class PodRecord:
    uid: str
    namespace: str
    name: str
    job_id: str
    task_index: int
    node: str | None
    phase: str
    priority: int | None
    cpu: float | None
    memory_gib: float | None
    created_ms: int | None
    deleting: bool
    disruption: str | None
    status_reason: str | None
    ready: bool
    user: str | None
    qos: str | None = None
    """Kubernetes QoS class: BestEffort, Burstable or Guaranteed."""

    @property
    def task_id(self) -> str:
        return f"{self.namespace}/{self.name}"[:253]

    @property
    def live(self) -> bool:
        """Neither finished nor on its way out."""
        return terminal_event(self, deleted=False) is None


def parse_time_ms(value: str | None) -> int | None:
    if not value:
        return None
    return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)


def job_of(meta: Obj) -> str:
    labels = meta.get("labels") or {}
    for ref in meta.get("ownerReferences") or []:
        if not ref.get("controller"):
            continue
        name = str(ref.get("name", ""))
        template_hash = labels.get("pod-template-hash")
        if ref.get("kind") == "ReplicaSet" and template_hash and name.endswith("-" + template_hash):
            return name[: -len(template_hash) - 1]
        return name or str(meta.get("name"))
    return str(meta.get("name"))


def _index(meta: Obj) -> int:
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    for raw in (
        labels.get("apps.kubernetes.io/pod-index"),
        annotations.get("batch.kubernetes.io/job-completion-index"),
    ):
        if raw is not None and str(raw).isdigit():
            return int(raw)
    return 0


def _requests(spec: Obj) -> tuple[float | None, float | None]:
    cpu = mem = 0.0
    seen_cpu = seen_mem = False
    for container in spec.get("containers") or []:
        requests = (container.get("resources") or {}).get("requests") or {}
        try:
            if "cpu" in requests:
                cpu += parse_quantity(requests["cpu"])
                seen_cpu = True
            if "memory" in requests:
                mem += parse_quantity(requests["memory"])
                seen_mem = True
        except ValueError:
            continue
    return (cpu if seen_cpu else None, mem / GIB if seen_mem else None)


def qos_class(spec: Obj) -> str:
    """The QoS class the API server gives a pod with this spec (for objects that lack ``status.qosClass``)."""
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    guaranteed, any_set = bool(containers), False
    for container in containers:
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = {**limits, **(resources.get("requests") or {})}  # an unset request defaults to the limit
        for name in ("cpu", "memory"):
            any_set |= name in requests or name in limits
            try:
                equal = name in limits and parse_quantity(requests[name]) == parse_quantity(limits[name])
            except ValueError:
                equal = False
            guaranteed &= equal
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _scheduling_class(rec: PodRecord) -> int | None:
    try:
        prio = borg_units.borg_priority(rec.priority)
    except borg_units.UnplaceableError:
        prio = None  # the risk stage flags the priority itself
    try:
        return borg_units.scheduling_class(rec.qos, prio)
    except borg_units.UnplaceableError:
        return None


def _condition(status: Obj, kind: str) -> Obj | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def pod_record(obj: Obj) -> PodRecord:
    meta: Obj = obj.get("metadata") or {}
    spec: Obj = obj.get("spec") or {}
    status: Obj = obj.get("status") or {}
    cpu, mem = _requests(spec)
    disruption = _condition(status, "DisruptionTarget")
    return PodRecord(
        uid=str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"),
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name")),
        job_id=job_of(meta)[:253],
        task_index=_index(meta),
        node=spec.get("nodeName") or None,
        phase=str(status.get("phase") or "Pending"),
        priority=spec.get("priority"),
        cpu=cpu,
        memory_gib=mem,
        created_ms=parse_time_ms(meta.get("creationTimestamp")),
        deleting=meta.get("deletionTimestamp") is not None,
        disruption=str(disruption.get("reason")) if disruption else None,
        status_reason=status.get("reason"),
        ready=_condition(status, "Ready") is not None,
        user=spec.get("serviceAccountName"),
        qos=str(status.get("qosClass") or qos_class(spec)),
    )


def terminal_event(rec: PodRecord, *, deleted: bool, node_lost: bool = False) -> TaskEventType | None:
    """The terminal Borg event a pod in this state has reached, or None while it is live."""
    if rec.phase == "Succeeded":
        return "FINISH"
    if rec.phase == "Failed":
        if rec.status_reason in ("Evicted", "Preempting"):
            return "EVICT"
        if rec.status_reason == "NodeLost":
            return "LOST"
        return "FAIL"
    if node_lost:
        return "LOST"
    if rec.deleting or deleted:
        if rec.disruption in EVICTION_REASONS:
            return "EVICT"
        if rec.disruption == "DeletionByPodGC":
            return "LOST"
        return "KILL"
    return None


def transitions(
    old: PodRecord | None, new: PodRecord, *, deleted: bool = False, node_lost: bool = False
) -> list[TaskEventType]:
    """Events between what was known of a pod (None: nothing) and what the API now says."""
    if old is not None and not old.live:
        return []  # its terminal event was sent already
    events: list[TaskEventType] = []
    if old is None:
        if deleted:
            return []  # never seen alive: nothing to report
        events.append("SUBMIT")
    if new.node and (old is None or not old.node):
        events.append("SCHEDULE")
    end = terminal_event(new, deleted=deleted, node_lost=node_lost)
    if end is not None:
        events.append(end)
    elif old is not None and (old.cpu, old.memory_gib) != (new.cpu, new.memory_gib):
        events.append("UPDATE_RUNNING" if new.node else "UPDATE_PENDING")
    return events


def task_event(rec: PodRecord, event: TaskEventType, ts_ms: int) -> TaskEvent:
    return TaskEvent(
        task_id=rec.task_id,
        job_id=rec.job_id,
        task_index=rec.task_index,
        ts_ms=ts_ms,
        event=event,
        source="kubernetes",
        machine=rec.node,
        user=rec.user,
        priority=rec.priority,
        scheduling_class=_scheduling_class(rec),
        cpu_request=rec.cpu,
        memory_request=rec.memory_gib,
        namespace=rec.namespace,
    )
