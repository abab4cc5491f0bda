"""Pure request bodies for the actuator: what to send for each action, computed from the live object."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from contracts.models import Decision, TargetRef
from services.referee.budgets import ANN_ACTION, ANN_DECIDED_AT, ANN_DECISION, ANN_TRACE, PREFIX
from services.runtime.k8s_quantity import MIB, format_mib, parse_quantity

Obj = dict[str, Any]
LABEL_CONSOLIDATE = PREFIX + "consolidate"
LABEL_TIER = PREFIX + "tier"
LABEL_ADMISSION = PREFIX + "admission"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def iso(ts_ms: int, *, millis: bool = True) -> str:
    when = datetime.fromtimestamp(ts_ms / 1000, tz=UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S") + (f".{ts_ms % 1000:03d}Z" if millis else "Z")


def decision_annotations(decision: Decision) -> dict[str, str]:
    return {
        ANN_DECISION: decision.decision_id,
        ANN_TRACE: decision.trace_id or "",
        ANN_ACTION: decision.action,
        ANN_DECIDED_AT: iso(decision.ts_ms),
    }


def annotations_of(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def labels_of(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def metadata_patch(
    decision: Decision, labels: dict[str, str] | None = None, resource_version: str | None = None
) -> Obj:
    meta: Obj = {"annotations": decision_annotations(decision)}
    if labels:
        meta["labels"] = labels
    if resource_version:
        meta["resourceVersion"] = resource_version  # optimistic concurrency: 409 when the object moved on
    return {"metadata": meta}


def with_taint(node: Obj, key: str, value: str, effect: str) -> list[Obj] | None:
    """The node's taints with (key, effect) set to value; None when it already is."""
    taints: list[Obj] = list((node.get("spec") or {}).get("taints") or [])
    for t in taints:
        if t.get("key") == key and t.get("effect") == effect and t.get("value", "") == value:
            return None
    kept = [t for t in taints if not (t.get("key") == key and t.get("effect") == effect)]
    taint: Obj = {"key": key, "effect": effect}
    if value:
        taint["value"] = value
    return [*kept, taint]


MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"


def resize_refusal(pod: Obj) -> str | None:
    """Why kube-apiserver would refuse any pods/resize of this pod (None: it may accept one).

    The API server's own rules (k8s.io/kubernetes v1.36.3, pkg/apis/core/validation/validation.go
    ``ValidatePodResize`` and ``isPodResizeRequestSupported``), checked before asking, so the referee
    refuses with the reason instead of applying an action that fails with 422:

    * static (mirror) pods and Windows pods cannot be resized;
    * a pod with a running container whose status reports no ``resources`` runs on a node whose
      kubelet does not support in-place resize (the API's version-skew rule);
    * a Guaranteed pod cannot change its memory request alone (its QoS class would change).
    """
    if MIRROR_POD_ANNOTATION in annotations_of(pod):
        return "static (mirror) pods cannot be resized"
    spec = pod.get("spec") or {}
    if ((spec.get("os") or {}).get("name") or "").lower() == "windows":
        return "Windows pods cannot be resized in place"
    status = pod.get("status") or {}
    for c in status.get("containerStatuses") or []:
        if (c.get("state") or {}).get("running") is not None:
            if c.get("resources") is None:
                node = spec.get("nodeName") or "?"
                return (
                    f"node {node} does not support in-place resize (its running containers report no "
                    "resources: a kubelet without InPlacePodVerticalScaling)"
                )
            break
    if status.get("qosClass") == "Guaranteed":
        return "the pod is Guaranteed: changing its memory request alone would change its QoS class"
    return None


def resize_body(pod: Obj, total_mib: int) -> tuple[Obj | None, str]:
    """Container memory requests scaled so they sum to total_mib (body for pods/resize), or (None, why not)."""
    containers = [c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name")]
    current: dict[str, float] = {}
    limits: dict[str, float] = {}
    for c in containers:
        resources = c.get("resources") or {}
        raw = (resources.get("requests") or {}).get("memory")
        if raw is not None:
            current[c["name"]] = parse_quantity(raw)
            limit = (resources.get("limits") or {}).get("memory")
            if limit is not None:
                limits[c["name"]] = parse_quantity(limit)
    total = sum(current.values())
    if not current or total <= 0:
        return None, "no container has a memory request to resize"
    if abs(total - total_mib * MIB) < MIB:
        return None, f"memory requests already total {format_mib(total)}"
    factor = total_mib * MIB / total
    over = [name for name, value in current.items() if name in limits and value * factor > limits[name]]
    if over:
        return (
            None,
            f"the new memory request of container {over[0]} would exceed its limit {format_mib(limits[over[0]])}",
        )
    body = {
        "spec": {
            "containers": [
                {"name": name, "resources": {"requests": {"memory": format_mib(value * factor)}}}
                for name, value in current.items()
            ]
        }
    }
    return body, f"memory requests {format_mib(total)} → {total_mib}Mi"


def eviction_body(target: TargetRef, uid: str | None, resource_version: str | None = None) -> Obj:
    """An Eviction; with a resourceVersion precondition the API server answers a conflict at once.

    Without one, kube-apiserver retries a conflicting eviction itself (20 x 500 ms): a stale UID
    then costs ~10 s, as long as the referee's request timeout, and races it.
    """
    body: Obj = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": target.name, "namespace": target.namespace},
    }
    preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
    if preconditions:
        body["deleteOptions"] = {"preconditions": preconditions}
    return body


def event_body(
    *,
    decision: Decision,
    involved: Obj,
    namespace: str,
    outcome: str,
    message: str,
    now_ms: int,
    instance: str,
) -> Obj:
    target = decision.target
    reason = {
        "applied": "BorgDecisionApplied",
        "dry-run": "BorgDecisionDryRun",
        "refused": "BorgDecisionRefused",
        "failed": "BorgDecisionFailed",
    }.get(outcome, "BorgDecision")
    when = iso(now_ms, millis=False)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{target.name}.{decision.decision_id[2:18]}.{outcome}"[:253],
            "namespace": namespace,
            "annotations": {ANN_DECISION: decision.decision_id, ANN_TRACE: decision.trace_id or ""},
        },
        "involvedObject": involved,
        "reason": reason,
        "message": f"{decision.action} ({outcome}): {message} [{decision.decision_id} trace {decision.trace_id}]"[
            :1024
        ],
        "type": "Normal" if outcome in ("applied", "dry-run") else "Warning",
        "action": decision.action,
        "source": {"component": "borg-referee"},
        "reportingComponent": "borg-orchestrator.io/referee",
        "reportingInstance": instance[:128],
        "firstTimestamp": when,
        "lastTimestamp": when,
        "count": 1,
    }
