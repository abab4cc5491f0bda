"""A pod's job as the control plane names it (pure): the replicas whose counters are read against each other.

Shared by the reliability agent (``services.agents.pod_loads``) and the pod-regime stage: the job is the value of
the job label when the operator names one, else the pod's controller (``ownerReferences`` with ``controller``: a
Deployment's pods share their ReplicaSet, so a rollout starts a new job — new code, new reference), else the pod
itself; always prefixed with the namespace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def controller_of(meta: Mapping[str, Any]) -> str:
    """``<Kind>/<name>`` of the pod's controller, or "" when it has none."""
    owners = [o for o in meta.get("ownerReferences") or [] if isinstance(o, Mapping) and o.get("controller")]
    return f"{owners[0].get('kind')}/{owners[0].get('name')}" if owners else ""


def namespace_of(meta: Mapping[str, Any]) -> str:
    namespace = meta.get("namespace")
    return namespace if isinstance(namespace, str) and namespace else "default"


def job_of(meta: Mapping[str, Any], job_label: str | None) -> str:
    """``<namespace>/<job>``: the job label's value, else the controller, else ``Pod/<name>``."""
    tags: Mapping[str, Any] = meta.get("labels") or {}
    job = tags.get(job_label) if job_label else None
    if not isinstance(job, str) or not job:
        job = controller_of(meta) or f"Pod/{meta.get('name')}"
    return f"{namespace_of(meta)}/{job}"
