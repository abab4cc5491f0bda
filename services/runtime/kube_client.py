"""The Kubernetes API client every service that talks to the API server starts from."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

Obj = dict[str, Any]
log = logging.getLogger(__name__)


class GoneError(Exception):
    """The resourceVersion (or a list's continue token) is too old (410): list again."""


class WatchError(Exception):
    """The watch failed for another reason (status code in `.status`)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class KubeConfigError(RuntimeError):
    """No usable Kubernetes configuration: the service exits 2 with this message (``run_service``)."""


async def api_client(kubeconfig: str | None) -> client.ApiClient:
    """A client from a kubeconfig file, else $KUBECONFIG / ~/.kube/config, else the pod's ServiceAccount."""
    cfg = client.Configuration()
    try:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg, persist_config=False)
    except config.ConfigException as exc:
        if kubeconfig:
            raise KubeConfigError(f"kubeconfig {kubeconfig} is unusable: {exc}") from None
        try:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except config.ConfigException as in_pod:
            raise KubeConfigError(
                f"no kubeconfig ($KUBECONFIG, ~/.kube/config: {exc}) and not in a pod with a ServiceAccount token "
                f"({in_pod}); set KUBECONFIG or mount the token"
            ) from None
    return client.ApiClient(configuration=cfg)


async def get_json(api: client.ApiClient, path: str, query: list[tuple[str, Any]], limit: Any) -> Any:
    """GET ``path`` as plain JSON objects (no model classes: lists and watches of many objects stay cheap).

    ``limit`` ``None``: the parsed body (30 s limit); a ``(connect, read)`` pair: the raw response, for a
    watch stream read line by line.
    """
    return await api.call_api(
        path,
        "GET",
        query_params=query,
        header_params={"Accept": "application/json"},
        response_types_map={200: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
        _preload_content=limit is None,
        _request_timeout=limit or 30,
    )


async def list_objects(api: client.ApiClient, path: str, selector: list[tuple[str, Any]],
                       page_size: int = 500) -> tuple[list[Obj], str]:
    """Every object at ``path`` (paginated, as JSON dicts) and the list's resourceVersion."""
    items: list[Obj] = []
    token: str | None = None
    while True:
        query = [*selector, ("limit", page_size)] + ([("continue", token)] if token else [])
        try:
            body = await get_json(api, path, query, None)
        except ApiException as exc:
            if exc.status == 410:
                raise GoneError(f"list continue token expired for {path}") from None
            raise
        items.extend(body.get("items") or [])
        meta = body.get("metadata") or {}
        token = meta.get("continue")
        if not token:
            return items, str(meta.get("resourceVersion") or "")


async def watch_objects(api: client.ApiClient, path: str, selector: list[tuple[str, Any]], resource_version: str,
                        timeout_s: int) -> AsyncIterator[tuple[str, Obj]]:
    """(type, object) pairs from ``resource_version`` on, BOOKMARK events included; ends on the server's timeout.

    A 410 (HTTP status or an ERROR event) raises :class:`GoneError`: the caller lists again.
    """
    query = [
        *selector,
        ("watch", "true"),
        ("resourceVersion", resource_version),
        ("allowWatchBookmarks", "true"),
        ("timeoutSeconds", timeout_s),
    ]
    resp = await get_json(api, path, query, (10, timeout_s + 30))
    try:
        if resp.status == 410:
            raise GoneError(f"watch {path} from {resource_version}: 410")
        if resp.status != 200:
            raise WatchError(resp.status, (await resp.text())[:500])
        while line := await resp.content.readline():
            if not line.strip():
                continue
            event = json.loads(line)
            kind = str(event.get("type"))
            obj: Obj = event.get("object") or {}
            if kind == "ERROR":
                code = int(obj.get("code") or 0)
                if code == 410:
                    raise GoneError(f"watch {path} from {resource_version}: {obj.get('message')}")
                raise WatchError(code, str(obj.get("message")))
            yield kind, obj
    finally:
        resp.release()


async def relist_until_stopped(api: client.ApiClient, stop: asyncio.Event, every_s: float,
                               refresh: Callable[[client.ApiClient], Awaitable[str]], *, what: str,
                               on_failure: str) -> None:
    """Call ``refresh`` (it lists what it needs and stores it; returns a line for the log) every ``every_s`` until
    ``stop`` is set, then close ``api``. A failure keeps what was stored, is logged once (``what`` failed
    (error): ``on_failure``) and once more when a refresh succeeds again."""
    failing = False
    try:
        while not stop.is_set():
            try:
                done = await refresh(api)
                if failing:
                    log.info("%s again (%s)", what, done)
                failing = False
            except (ApiException, GoneError, aiohttp.ClientError, TimeoutError) as exc:
                if not failing:
                    log.warning("%s failed (%s): %s", what, exc, on_failure)
                failing = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
    finally:
        await api.close()
