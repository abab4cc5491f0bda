"""The extender's only contact with kubernetes_asyncio: list + watch Nodes and bound Pods into a ``PodIndex``.

Runs with ``EXTENDER_POLICY=learned`` or ``EXTENDER_WEIGHT_CORUNNER`` > 0 (otherwise the extender needs no
API access). Objects stay JSON dicts.
Pods are watched with the field selector ``spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed``:
bound and not finished, the pods whose requests kube-scheduler counts on a node (a pod leaving the
selection arrives as DELETED). A watch that ends is resumed from its last resourceVersion; a 410 or any
other error re-lists (after ``retry_s``), so the index converges after an outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.runtime.kube_client import GoneError, WatchError, list_objects, watch_objects
from services.runtime.pause import pause
from services.scheduler_extender.podindex import Obj, PodIndex

log = logging.getLogger(__name__)
POD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


class ClusterWatch:
    def __init__(
        self,
        api: client.ApiClient,
        index: PodIndex,
        *,
        timeout_s: int = 240,
        retry_s: float = 2.0,
        page_size: int = 500,
    ) -> None:
        self.api = api
        self.index = index
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.page_size = page_size
        self._listed: set[str] = set()
        self.synced = asyncio.Event()  # both lists applied once

    async def run(self, stop: asyncio.Event) -> None:
        loops = [
            asyncio.create_task(self._loop("nodes", [], self.index.replace_nodes, self.index.apply_node, stop)),
            asyncio.create_task(
                self._loop(
                    "pods", [("fieldSelector", POD_SELECTOR)], self.index.replace_pods, self.index.apply_pod, stop
                )
            ),
        ]
        stopper = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait({stopper, *loops}, return_when=asyncio.FIRST_COMPLETED)
            for task in done - {stopper}:
                task.result()
        finally:
            for task in (stopper, *loops):
                task.cancel()
            for task in (stopper, *loops):
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _loop(
        self,
        plural: str,
        selector: list[tuple[str, Any]],
        replace: Callable[[Iterable[Obj]], None],
        apply: Callable[[str, Obj], None],
        stop: asyncio.Event,
    ) -> None:
        version: str | None = None
        while not stop.is_set():
            try:
                if version is None:
                    items, version = await list_objects(self.api, f"/api/v1/{plural}", selector, self.page_size)
                    replace(items)
                    self._listed.add(plural)
                    if self._listed == {"nodes", "pods"}:
                        self.synced.set()
                    log.info("watch %s: %d listed", plural, len(items))
                async for kind, obj in watch_objects(self.api, f"/api/v1/{plural}", selector, version, self.timeout_s):
                    if kind == "BOOKMARK":
                        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                        continue
                    apply(kind, obj)
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            except GoneError:
                version = None
            except (ApiException, WatchError, aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
                log.warning("watch %s failed (%s); listing again in %.0fs", plural, exc, self.retry_s)
                version = None
                await pause(stop, self.retry_s)
