"""The watched resources (no kubernetes_asyncio here; a watch's errors are in services.runtime.kube_client)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    kind: str
    group_path: str  # "/api/v1" or "/apis/apps/v1"
    plural: str
    namespaced: bool

    def path(self, namespace: str | None) -> str:
        if self.namespaced and namespace:
            return f"{self.group_path}/namespaces/{namespace}/{self.plural}"
        return f"{self.group_path}/{self.plural}"


PODS = Resource("Pod", "/api/v1", "pods", True)
NODES = Resource("Node", "/api/v1", "nodes", False)
DEPLOYMENTS = Resource("Deployment", "/apis/apps/v1", "deployments", True)
