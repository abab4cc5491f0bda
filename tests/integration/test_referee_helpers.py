"""Helpers and fixtures for the decision-plane tests against the real kube-apiserver (no tests here).

The control plane is the one `infra/kube/kube.sh start` runs (idempotent); there are no
kubelets, so Nodes are made by hand and pods stay where the scheduler bound them.
The services run with tokens of the ServiceAccounts from deploy/ (TokenRequest API via
`kubectl create token`), never with the admin credentials.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from aiokafka import AIOKafkaConsumer

from contracts import decode
from contracts.base import Contract
from tests.conftest import ROOT

KUBE_SH = ROOT / "infra" / "kube" / "kube.sh"
DEPLOY = ROOT / "deploy" / "base"
SYSTEM_NS = "borg-system"


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["bash", str(KUBE_SH), "kubectl", *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result


def kubectl_json(*args: str) -> Any:
    return json.loads(kubectl(*args, "-o", "json").stdout)


def apply(manifest: dict[str, Any] | list[dict[str, Any]], namespace: str | None = None) -> None:
    items = manifest if isinstance(manifest, list) else [manifest]
    args = ["apply", "-f", "-"] + (["-n", namespace] if namespace else [])
    kubectl(*args, stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


@pytest.fixture(scope="session")
def kube_admin() -> Path:
    """The admin kubeconfig of the running control plane (started here when it is not running)."""
    started = subprocess.run(["bash", str(KUBE_SH), "start"], capture_output=True, text=True, timeout=3600, check=False)
    if started.returncode != 0:
        pytest.fail(f"the Kubernetes control plane is not available:\n{started.stdout}\n{started.stderr}")
    path = subprocess.run(["bash", str(KUBE_SH), "kubeconfig"], capture_output=True, text=True, check=True)
    return Path(path.stdout.strip())


def manifests(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def granted_rules(path: Path) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) triples the ClusterRoles in a manifest grant."""
    out: set[tuple[str, str, str]] = set()
    for doc in manifests(path):
        if doc["kind"] != "ClusterRole":
            continue
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.add((group, resource, verb))
    return out


def token_kubeconfig(admin: Path, service_account: str, namespace: str, out: Path) -> Path:
    """A kubeconfig holding only a fresh token of the ServiceAccount (TokenRequest API)."""
    token = kubectl("create", "token", service_account, "-n", namespace, "--duration=1h").stdout.strip()
    cfg = yaml.safe_load(admin.read_text())
    cluster = cfg["clusters"][0]
    out.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": service_account, "user": {"token": token}}],
                "contexts": [{"name": "sa", "context": {"cluster": cluster["name"], "user": service_account}}],
                "current-context": "sa",
            }
        )
    )
    return out


def install_rbac(path: Path) -> None:
    """Apply a deploy/ RBAC manifest (ServiceAccount in borg-system, ClusterRoles, bindings)."""
    kubectl("apply", "-f", str(DEPLOY / "namespaces.yaml"))
    kubectl("apply", "-n", SYSTEM_NS, "-f", str(path))


@pytest.fixture(scope="session")
def referee_kubeconfig(kube_admin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    install_rbac(DEPLOY / "referee" / "rbac.yaml")
    kubectl("apply", "-f", str(DEPLOY / "referee" / "admission-hold.yaml"))
    return token_kubeconfig(kube_admin, "borg-referee", SYSTEM_NS, tmp_path_factory.mktemp("sa") / "referee.kubeconfig")


@pytest.fixture
def kube_ns(kube_admin: Path) -> Iterator[str]:
    name = f"it-{uuid.uuid4().hex[:10]}"
    kubectl("create", "namespace", name)
    yield name
    # Pods bound to a node without a kubelet never finish graceful deletion: force them.
    kubectl("delete", "pods", "--all", "-n", name, "--force", "--grace-period=0", check=False)
    kubectl("delete", "namespace", name, "--wait=false", check=False)


class Nodes:
    """Hand-made Nodes (Ready, with allocatable) deleted after the test."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def make(self, prefix: str = "it-node", ready: bool = True) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        apply(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}
        )
        capacity = {"cpu": "16", "memory": "64Gi", "pods": "110"}
        status: dict[str, Any] = {"capacity": capacity, "allocatable": capacity}
        if ready:
            status["conditions"] = [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "hand-made for tests"}
            ]
        kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}))
        self.names.append(name)
        return name


@pytest.fixture
def nodes(kube_admin: Path) -> Iterator[Nodes]:
    made = Nodes()
    yield made
    for name in made.names:
        kubectl("delete", "node", name, "--wait=false", check=False)


def deployment(
    name: str, replicas: int, node: str, labels: dict[str, str] | None = None, **annotations: str
) -> dict[str, Any]:
    match = labels or {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": match},
            "template": {
                "metadata": {"labels": match},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.invalid/app:1",
                            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                        }
                    ],
                },
            },
        },
    }


def pod(name: str, node: str | None, memory: str = "64Mi", labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": "registry.invalid/app:1",
                "resources": {"requests": {"cpu": "10m", "memory": memory}, "limits": {"memory": "1Gi"}},
            }
        ]
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": spec,
    }


def mark_running(namespace: str, name: str, ready: bool = True) -> None:
    """Play the kubelet: report the pod Running (and Ready) through the status subresource."""
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    kubectl("patch", "pod", name, "-n", namespace, "--subresource=status", "-p", json.dumps({"status": status}))


def pdb(name: str, labels: dict[str, str], min_available: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": labels}},
    }


async def collect(
    bootstrap: str, topic: str, model: type[Contract], predicate: Any, *, within: float = 40.0
) -> list[Any]:
    """Read `topic` from the start until predicate(list of (value, headers)) is true; returns that list."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    got: list[Any] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while not predicate(got):
            if loop.time() > deadline:
                raise AssertionError(f"{topic}: condition not met within {within:.0f}s; saw {[v for v, _ in got]}")
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                got.extend((decode(model, r.value), list(r.headers)) for r in records)
    finally:
        await consumer.stop()
    return got


def span_recorder() -> Any:
    """An in-memory exporter on the process's SDK tracer provider (installed here when absent)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
        provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), "another tracer provider is installed"
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter
