"""The watcher's only contact with kubernetes_asyncio: paginated lists and raw watch streams.

Objects stay JSON dicts (no model deserialisation). A watch that the server answers
with 410 GoneError (HTTP status or an ERROR event with code 410) raises `GoneError`: the
caller re-lists.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.cluster_watcher.resources import GoneError, Resource, WatchError
from services.runtime.kube_client import get_json

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class KubeSource:
    def __init__(self, api: client.ApiClient, namespace: str | None = None, page_size: int = 500) -> None:
        self.api = api
        self.namespace = namespace
        self.page_size = page_size

    async def list(self, res: Resource) -> tuple[list[Obj], str]:
        """Every object (paginated) and the list's resourceVersion."""
        items: list[Obj] = []
        token: str | None = None
        while True:
            query: list[tuple[str, Any]] = [("limit", self.page_size)]
            if token:
                query.append(("continue", token))
            try:
                body = await get_json(self.api, res.path(self.namespace), query, None)
            except ApiException as exc:
                if exc.status == 410:
                    raise GoneError(f"list continue token expired for {res.plural}") from None
                raise
            items.extend(body.get("items") or [])
            meta = body.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion") or "")

    async def watch(self, res: Resource, resource_version: str, timeout_s: int) -> AsyncIterator[tuple[str, Obj]]:
        """(type, object) pairs from resource_version on; BOOKMARK events included; ends on server timeout."""
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", timeout_s),
        ]
        resp = await get_json(self.api, res.path(self.namespace), query, (10, timeout_s + 30))
        try:
            if resp.status == 410:
                raise GoneError(f"watch {res.plural} from {resource_version}: 410")
            if resp.status != 200:
                raise WatchError(resp.status, (await resp.text())[:500])
            while True:
                line = await resp.content.readline()
                if not line:
                    return
                if not line.strip():
                    continue
                event = json.loads(line)
                kind = str(event.get("type"))
                obj: Obj = event.get("object") or {}
                if kind == "ERROR":
                    code = int(obj.get("code") or 0)
                    if code == 410:
                        raise GoneError(f"watch {res.plural} from {resource_version}: {obj.get('message')}")
                    raise WatchError(code, str(obj.get("message")))
                yield kind, obj
        finally:
            resp.release()
