"""Pure budget checks against live objects: replica bounds and PodDisruptionBudgets.

The actuator reads the objects; these functions decide. Replica bounds come from
settings, overridden per Deployment by the annotations
``borg-orchestrator.io/min-replicas`` / ``borg-orchestrator.io/max-replicas``.
"""

from __future__ import annotations

import math
from typing import Any

Obj = dict[str, Any]
PREFIX = "borg-orchestrator.io/"
ANN_DECISION = PREFIX + "decision-id"
ANN_TRACE = PREFIX + "trace-id"
ANN_DECIDED_AT = PREFIX + "decided-at"
ANN_ACTION = PREFIX + "action"
ANN_MIN = PREFIX + "min-replicas"
ANN_MAX = PREFIX + "max-replicas"


def replica_bounds(annotations: dict[str, str] | None, default_min: int, default_max: int) -> tuple[int, int]:
    """(min, max) replicas for a Deployment: annotations override the settings when they are integers."""
    lo, hi = default_min, default_max
    ann = annotations or {}
    if str(ann.get(ANN_MIN, "")).isdigit():
        lo = int(ann[ANN_MIN])
    if str(ann.get(ANN_MAX, "")).isdigit():
        hi = int(ann[ANN_MAX])
    return lo, max(lo, hi)


def clamp_replicas(requested: int, lo: int, hi: int) -> tuple[int, str]:
    """The replica count to set and a note when it had to be clamped."""
    if requested < lo:
        return lo, f"requested {requested} raised to min {lo}"
    if requested > hi:
        return hi, f"requested {requested} lowered to max {hi}"
    return requested, ""


def selector_matches(selector: Obj | None, labels: dict[str, str]) -> bool:
    """metav1.LabelSelector semantics: None matches nothing, {} matches everything."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def matching_pdbs(pdbs: list[Obj], labels: dict[str, str]) -> list[Obj]:
    return [p for p in pdbs if selector_matches((p.get("spec") or {}).get("selector"), labels)]


def eviction_blocked(pdbs: list[Obj], pod_labels: dict[str, str]) -> str | None:
    """Why evicting a pod with these labels would violate a PDB (None: allowed)."""
    for pdb in matching_pdbs(pdbs, pod_labels):
        name = (pdb.get("metadata") or {}).get("name")
        status = pdb.get("status") or {}
        allowed = int(status.get("disruptionsAllowed") or 0)
        if allowed < 1:
            healthy, desired = status.get("currentHealthy", 0), status.get("desiredHealthy", "?")
            return f"PodDisruptionBudget {name} allows 0 disruptions (healthy {healthy}, desired {desired})"
    return None


def scale_blocked(pdbs: list[Obj], template_labels: dict[str, str], replicas: int) -> str | None:
    """Why scaling to `replicas` would leave fewer pods than a matching PDB's minAvailable."""
    for pdb in matching_pdbs(pdbs, template_labels):
        name = (pdb.get("metadata") or {}).get("name")
        spec = pdb.get("spec") or {}
        raw = spec.get("minAvailable")
        if raw is None:
            continue
        percent = isinstance(raw, str) and raw.endswith("%")
        need = math.ceil(float(str(raw)[:-1]) / 100.0 * replicas) if percent else int(raw)
        if replicas < need:
            return f"PodDisruptionBudget {name} needs minAvailable {raw} (> {replicas} replicas)"
    return None
