"""The Kubernetes API client every service that talks to the API server starts from."""

from __future__ import annotations

from kubernetes_asyncio import client, config


async def api_client(kubeconfig: str | None) -> client.ApiClient:
    """A client from a kubeconfig file, else $KUBECONFIG / ~/.kube/config, else the pod's ServiceAccount."""
    cfg = client.Configuration()
    try:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg, persist_config=False)
    except config.ConfigException:
        if kubeconfig:
            raise
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration=cfg)
