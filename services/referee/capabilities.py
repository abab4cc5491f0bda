"""What the cluster's API can do, from API discovery, and which actions that rules out (pure).

The actuator reads ``/api/v1``, ``/apis/apps/v1`` and ``/apis/policy/v1`` at start and again every
``REFEREE_CAPABILITIES_REFRESH_S`` (an upgraded API server gains subresources, e.g. ``pods/resize``
arrived in Kubernetes 1.33); an action whose resources the API does not serve is refused with the
reason before any request, instead of failing with a 404 from the write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, get_args

from contracts.models import ClusterCapabilities, ProposalKind, UnsupportedAction

DISCOVERY_PATHS: tuple[str, ...] = ("/api/v1", "/apis/apps/v1", "/apis/policy/v1")

REQUIRES: Mapping[str, tuple[str, ...]] = {
    "scale_out": ("apps/v1 deployments/scale",),
    "replicate": ("apps/v1 deployments/scale",),
    "scale_in": ("apps/v1 deployments/scale",),
    "throttle": ("apps/v1 deployments/scale",),
    "deprioritize": ("apps/v1 deployments",),
    "taint": ("v1 nodes",),
    "cordon": ("v1 nodes",),
    "consolidate": ("v1 nodes",),
    "evict": ("v1 pods/eviction",),
    "memory_balloon": ("v1 pods/resize",),
    "hold_admission": ("v1 namespaces",),
}
"""Per action, the ``<groupVersion> <resource>`` entries of API discovery the actuator's requests use."""


@dataclass(frozen=True)
class Capabilities:
    """The ``<groupVersion> <resource>`` pairs the API server serves (subresources included)."""

    served: frozenset[str]

    @classmethod
    def from_discovery(cls, documents: Iterable[Mapping[str, Any]]) -> Capabilities:
        """From ``APIResourceList`` documents (``GET /api/v1`` …); a missing group is simply absent."""
        served: set[str] = set()
        for doc in documents:
            group_version = str(doc.get("groupVersion") or "")
            for resource in doc.get("resources") or []:
                name = resource.get("name") if isinstance(resource, Mapping) else None
                if group_version and isinstance(name, str):
                    served.add(f"{group_version} {name}")
        return cls(frozenset(served))

    def missing(self, action: str) -> list[str]:
        """What ``action`` needs that the API does not serve (empty: supported, or an action with no needs)."""
        return [need for need in REQUIRES.get(action, ()) if need not in self.served]

    def refusal(self, action: str) -> str | None:
        """The ActionResult message refusing ``action``, or None when the cluster supports it."""
        missing = self.missing(action)
        if not missing:
            return None
        return (f"the cluster does not support {action}: its API does not serve {', '.join(missing)} "
                "(API discovery; e.g. pods/resize needs Kubernetes 1.33+)")

    def report(self, cluster: str, ts_ms: int, reporter: str) -> ClusterCapabilities:
        """The capabilities.v1 record the agents read: every action, supported or with what it lacks."""
        supported: list[ProposalKind] = []
        unsupported: list[UnsupportedAction] = []
        for action in get_args(ProposalKind):
            missing = self.missing(action)
            if missing:
                unsupported.append(UnsupportedAction(action=action, missing=missing))
            else:
                supported.append(action)
        return ClusterCapabilities(cluster=cluster, ts_ms=ts_ms, supported=supported, unsupported=unsupported,
                                   reporter=reporter)
