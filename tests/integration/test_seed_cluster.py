"""seed_cluster finishes namespaces an earlier run left Terminating (real kube-apiserver, no kubelets)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration.test_referee_helpers import apply, kube_admin, kubectl, kubectl_json  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration


def _phase(namespace: str) -> str | None:
    found = kubectl("get", "namespace", namespace, "-o", "jsonpath={.status.phase}", check=False)
    return found.stdout.strip() if found.returncode == 0 else None


@pytest.mark.timeout(300)
def test_a_namespace_stuck_terminating_is_finished(kube_admin: Path) -> None:  # noqa: F811
    stuck = f"it-stuck-{uuid.uuid4().hex[:8]}"
    seeded = f"it-seed-{uuid.uuid4().hex[:8]}"
    node = f"it-seednode-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", stuck)
    apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    try:
        apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bound", "namespace": stuck},
               "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}})
        kubectl("delete", "namespace", stuck, "--wait=false")
        time.sleep(3)  # the pod on a node without a kubelet holds the namespace
        assert _phase(stuck) == "Terminating"
        assert kubectl_json("get", "pods", "-n", stuck)["items"], "the bound pod should still be there"
        done = subprocess.run([sys.executable, "-m", "loadtests.seed_cluster", "--nodes", "2", "--prefix",
                               f"{node}-sim-", "--namespace", seeded], cwd=ROOT, capture_output=True, text=True,
                              timeout=240, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert done.returncode == 0, done.stderr
        assert "namespaces stuck Terminating: " in done.stdout and stuck in done.stdout, done.stdout
        deadline = time.monotonic() + 60
        while _phase(stuck) is not None:
            assert time.monotonic() < deadline, f"namespace {stuck} still {_phase(stuck)}"
            time.sleep(1)
    finally:
        # the namespace first (no new pods once it is terminating), then its pods, forced
        for namespace in (stuck, seeded):
            kubectl("delete", "namespace", namespace, "--wait=false", check=False)
            kubectl("delete", "pods", "--all", "-n", namespace, "--force", "--grace-period=0", check=False)
        kubectl("delete", "nodes", node, f"{node}-sim-0000", f"{node}-sim-0001", check=False)
