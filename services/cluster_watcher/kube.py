"""The watcher's only contact with kubernetes_asyncio: paginated lists and raw watch streams.

Objects stay JSON dicts (no model deserialisation). A watch that the server answers
with 410 GoneError (HTTP status or an ERROR event with code 410) raises `GoneError`: the
caller re-lists.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio import client

from services.cluster_watcher.resources import Resource
from services.runtime.kube_client import list_objects, watch_objects

Obj = dict[str, Any]


class KubeSource:
    def __init__(self, api: client.ApiClient, namespace: str | None = None, page_size: int = 500) -> None:
        self.api = api
        self.namespace = namespace
        self.page_size = page_size

    async def list(self, res: Resource) -> tuple[list[Obj], str]:
        """Every object (paginated) and the list's resourceVersion."""
        return await list_objects(self.api, res.path(self.namespace), [], self.page_size)

    def watch(self, res: Resource, resource_version: str, timeout_s: int) -> AsyncIterator[tuple[str, Obj]]:
        """(type, object) pairs from resource_version on; BOOKMARK events included; ends on server timeout."""
        return watch_objects(self.api, res.path(self.namespace), [], resource_version, timeout_s)
