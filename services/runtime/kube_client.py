"""The Kubernetes API client every service that talks to the API server starts from."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client, config


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
