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
