"""The watched resources and the errors a watch can end with (no kubernetes_asyncio here)."""

from __future__ import annotations

from dataclasses import dataclass


class GoneError(Exception):
    """The resourceVersion is too old (410): list again."""


class WatchError(Exception):
    """The watch failed for another reason (status code in `.status`)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


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
