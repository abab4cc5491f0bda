"""The Kubernetes API client every service that talks to the API server starts from."""

from __future__ import annotations

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
