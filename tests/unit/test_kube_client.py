"""The shared Kubernetes client fails with one message naming what to fix, not a library traceback."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from services.runtime.kube_client import KubeConfigError, api_client


def test_an_unreadable_kubeconfig_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    with pytest.raises(KubeConfigError, match=str(bad)):
        asyncio.run(api_client(str(bad)))


def test_no_kubeconfig_and_no_pod_token_says_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(KubeConfigError, match="not in a pod"):
        asyncio.run(api_client(None))


async def test_relisting_keeps_going_after_a_failure_says_so_once_and_closes_the_client(
        caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    from kubernetes_asyncio.client.exceptions import ApiException

    from services.runtime.kube_client import relist_until_stopped

    class Api:
        closed = False

        async def close(self) -> None:
            self.closed = True

    stop = asyncio.Event()
    calls: list[int] = []

    async def refresh(_: object) -> str:
        calls.append(len(calls))
        if len(calls) in (2, 3):
            raise ApiException(status=503, reason="unavailable")
        if len(calls) == 5:
            stop.set()
        return f"call {len(calls)}"

    api = Api()
    with caplog.at_level("INFO", logger="services.runtime.kube_client"):
        await relist_until_stopped(api, stop, 0.001, refresh, what="listing pods",  # type: ignore[arg-type]
                                   on_failure="keeping the last list")
    assert len(calls) == 5 and api.closed
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "listing pods failed" in warnings[0] and "keeping the last list" in warnings[0]
    assert [r.getMessage() for r in caplog.records if r.levelname == "INFO"] == ["listing pods again (call 4)"]
