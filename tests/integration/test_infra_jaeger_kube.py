"""The real Jaeger and Kubernetes control plane started by infra/jaeger/jaeger.sh and infra/kube/kube.sh.

Both scripts are idempotent: the session fixtures call `start` (a no-op when already
running) and leave the processes up for the rest of the session, like the Kafka fixture.
A first run on a fresh machine builds the binaries (Kubernetes: ~15-30 min on 2 cores),
hence the generous per-test timeouts; later runs reuse the cache.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[2]
JAEGER_SH = ROOT / "infra" / "jaeger" / "jaeger.sh"
KUBE_SH = ROOT / "infra" / "kube" / "kube.sh"
JAEGER_QUERY = "http://127.0.0.1:16686"
OTLP_HTTP = "http://127.0.0.1:4318/v1/traces"
OTLP_GRPC = "127.0.0.1:4317"

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.25) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def run_script(script: Path, *args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=timeout, check=False)


def start(script: Path) -> None:
    result = run_script(script, "start")
    if result.returncode != 0:
        pytest.fail(f"{script.name} start failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")


# ---------------------------------------------------------------- Jaeger


@pytest.fixture(scope="session")
def jaeger() -> str:
    start(JAEGER_SH)
    return JAEGER_QUERY


def http_get_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise


def jaeger_trace(trace_id: str) -> dict[str, Any] | None:
    body = http_get_json(f"{JAEGER_QUERY}/api/traces/{trace_id}")
    if body and body.get("data"):
        trace: dict[str, Any] = body["data"][0]
        return trace
    return None


def spans_by_name(trace: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {span["operationName"]: span for span in trace["spans"]}


def tags(span: dict[str, Any]) -> dict[str, Any]:
    return {tag["key"]: tag["value"] for tag in span["tags"]}


@pytest.mark.integration
@pytest.mark.jaeger
@pytest.mark.timeout(1800)
def test_jaeger_status_reports_healthy(jaeger: str) -> None:
    result = run_script(JAEGER_SH, "status")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == f"jaeger  {jaeger}  healthy"


@pytest.mark.integration
@pytest.mark.jaeger
@pytest.mark.timeout(1800)
def test_jaeger_returns_span_posted_as_otlp_http_json(jaeger: str) -> None:
    trace_id = uuid.uuid4().hex
    span_id = uuid.uuid4().hex[:16]
    service = f"it-otlp-http-{trace_id[:8]}"
    now = time.time_ns()
    payload = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                "scopeSpans": [
                    {
                        "scope": {"name": "tests.integration"},
                        "spans": [
                            {
                                "traceId": trace_id,
                                "spanId": span_id,
                                "name": "referee.decide",
                                "kind": 2,
                                "startTimeUnixNano": str(now - 5_000_000),
                                "endTimeUnixNano": str(now),
                                "attributes": [{"key": "borg.target", "value": {"stringValue": "node-7"}}],
                            }
                        ],
                    }
                ],
            }
        ]
    }
    request = urllib.request.Request(
        OTLP_HTTP,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200

    trace = wait_for(lambda: jaeger_trace(trace_id), timeout=30, what=f"trace {trace_id} in Jaeger")
    assert trace["traceID"] == trace_id
    span = spans_by_name(trace)["referee.decide"]
    assert span["spanID"] == span_id
    assert tags(span)["borg.target"] == "node-7"
    assert trace["processes"][span["processID"]]["serviceName"] == service
    services = http_get_json(f"{JAEGER_QUERY}/api/services")["data"]
    assert service in services


@pytest.mark.integration
@pytest.mark.jaeger
@pytest.mark.timeout(1800)
def test_jaeger_returns_parent_and_child_exported_by_the_otel_sdk_over_grpc(jaeger: str) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    service = f"it-otlp-grpc-{uuid.uuid4().hex[:8]}"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=OTLP_GRPC, insecure=True)))
    tracer = provider.get_tracer("tests.integration")
    try:
        with (
            tracer.start_as_current_span("features.window") as parent,
            tracer.start_as_current_span("regime.classify", attributes={"borg.node": "node-3"}),
        ):
            pass
        trace_id = format(parent.get_span_context().trace_id, "032x")
        parent_id = format(parent.get_span_context().span_id, "016x")
    finally:
        provider.shutdown()

    def complete_trace() -> dict[str, Any] | None:
        trace = jaeger_trace(trace_id)
        return trace if trace and len(trace["spans"]) == 2 else None

    trace = wait_for(
        complete_trace,
        timeout=30,
        what=f"both spans of trace {trace_id} in Jaeger",
    )
    spans = spans_by_name(trace)
    child = spans["regime.classify"]
    assert spans["features.window"]["spanID"] == parent_id
    assert child["references"] == [{"refType": "CHILD_OF", "traceID": trace_id, "spanID": parent_id}]
    assert tags(child)["borg.node"] == "node-3"
    assert trace["processes"][child["processID"]]["serviceName"] == service


# ---------------------------------------------------------------- Kubernetes


@pytest.fixture(scope="session")
def kube() -> Path:
    start(KUBE_SH)
    result = run_script(KUBE_SH, "kubeconfig")
    assert result.returncode == 0, result.stderr
    return Path(result.stdout.strip())


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["bash", str(KUBE_SH), "kubectl", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result


def kubectl_json(*args: str) -> Any:
    return json.loads(kubectl(*args, "-o", "json").stdout)


def apply(manifest: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", stdin=json.dumps(manifest))


def make_node(name: str, *, kwok: bool = False) -> None:
    """A hand-made Node with room for pods: no kubelet, or run by kube.sh's kwok when ``kwok``."""
    capacity = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    annotations = {"kwok.x-k8s.io/node": "fake"} if kwok else {}
    apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, "borg.test/it": "true"},
                "annotations": annotations,
            },
        }
    )
    status = {"status": {"capacity": capacity, "allocatable": capacity}}
    kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(status))


@pytest.fixture
def namespace(kube: Path) -> Iterator[str]:
    name = f"it-{uuid.uuid4().hex[:10]}"
    kubectl("create", "namespace", name)
    yield name
    # Pods bound to a node without a kubelet never finish graceful deletion: force them.
    kubectl("delete", "namespace", name, "--wait=false", check=False)
    kubectl("delete", "pods", "--all", "-n", name, "--force", "--grace-period=0", check=False)


@pytest.fixture
def node(kube: Path) -> Iterator[str]:
    name = f"it-node-{uuid.uuid4().hex[:8]}"
    make_node(name)
    yield name
    kubectl("delete", "node", name, "--wait=false", check=False)


@pytest.mark.integration
@pytest.mark.kube
@pytest.mark.timeout(3600)
def test_kube_status_reports_every_component_healthy(kube: Path) -> None:
    result = run_script(KUBE_SH, "status")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines == [
        "kube-apiserver  https://127.0.0.1:6443  healthy",
        "etcd  http://127.0.0.1:2379  healthy",
        "kube-controller-manager  https://127.0.0.1:10257  healthy",
        "kube-scheduler  https://127.0.0.1:10259  healthy",
        "kwok  http://127.0.0.1:10247  healthy",
    ]
    assert kube.is_file()
    assert kube.name == "admin.kubeconfig"


@pytest.mark.integration
@pytest.mark.kube
@pytest.mark.timeout(3600)
def test_kubectl_talks_to_the_pinned_kube_apiserver(kube: Path) -> None:
    version = kubectl_json("version")
    pinned = next(
        line.split()[1]
        for line in (ROOT / "infra" / "kube" / "go.mod").read_text().splitlines()
        if line.split()[:1] == ["k8s.io/kubernetes"]
    )
    assert version["serverVersion"]["gitVersion"] == pinned
    assert version["clientVersion"]["gitVersion"] == pinned
    assert kubectl_json("auth", "whoami")["status"]["userInfo"]["groups"][0] == "system:masters"


@pytest.mark.integration
@pytest.mark.kube
@pytest.mark.timeout(3600)
def test_deployment_gets_replicaset_and_pods_bound_to_hand_made_node(namespace: str, node: str) -> None:
    labels = {"app": "it-web"}
    apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "containers": [
                            {
                                "name": "web",
                                "image": "registry.invalid/web:1",
                                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                            }
                        ],
                    },
                },
            },
        }
    )
    deployment_uid = kubectl_json("get", "deployment", "web", "-n", namespace)["metadata"]["uid"]

    def replicaset() -> dict[str, Any] | None:
        items = kubectl_json("get", "replicasets", "-n", namespace)["items"]
        owned = [rs for rs in items if rs["metadata"].get("ownerReferences", [{}])[0].get("uid") == deployment_uid]
        return owned[0] if owned else None

    rs = wait_for(replicaset, timeout=60, what="the deployment controller to create a ReplicaSet")
    assert rs["spec"]["replicas"] == 2

    def bound_pods() -> list[dict[str, Any]] | None:
        pods = kubectl_json("get", "pods", "-n", namespace)["items"]
        bound = [p for p in pods if p["spec"].get("nodeName")]
        return pods if len(pods) == 2 and len(bound) == 2 else None

    pods = wait_for(bound_pods, timeout=90, what="2 pods created by the ReplicaSet and bound by kube-scheduler")
    for pod in pods:
        assert pod["metadata"]["ownerReferences"][0]["uid"] == rs["metadata"]["uid"]
        assert pod["spec"]["nodeName"] == node
        conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert conditions["PodScheduled"] == "True"
        # ServiceAccount admission gave each pod the namespace's default account and a projected token.
        assert pod["spec"]["serviceAccountName"] == "default"
        assert any(v.get("projected") for v in pod["spec"]["volumes"])

    events = kubectl_json("get", "events", "-n", namespace, "--field-selector", "reason=Scheduled")["items"]
    assert any(node in e["message"] for e in events), events


@pytest.fixture
def kwok_node(kube: Path) -> Iterator[str]:
    name = f"it-kwok-{uuid.uuid4().hex[:8]}"
    make_node(name, kwok=True)
    yield name
    kubectl("delete", "node", name, "--wait=false", check=False)


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


@pytest.mark.integration
@pytest.mark.kube
@pytest.mark.timeout(3600)
def test_kwok_runs_pods_of_its_nodes_completes_jobs_after_their_delay_and_finishes_deletion(
    namespace: str, kwok_node: str, node: str
) -> None:
    """kwok (kube.sh) plays the kubelet of annotated nodes only: Running/Ready, Job completion, deletion."""
    spec = {"containers": [{"name": "c", "image": "registry.invalid/c:1", "resources": {"requests": {"cpu": "100m"}}}]}
    for name, on in (("on-kwok", kwok_node), ("no-kubelet", node)):
        apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {**spec, "nodeSelector": {"kubernetes.io/hostname": on}},
            }
        )

    def running(name: str) -> dict[str, Any] | None:
        pod = kubectl_json("get", "pod", name, "-n", namespace)
        return pod if pod["status"].get("phase") == "Running" and _ready(pod) else None

    pod = wait_for(lambda: running("on-kwok"), timeout=60, what="kwok to report the pod Running and Ready")
    assert pod["status"]["podIP"], pod["status"]
    # kwok reports the running container's resources, so kube-apiserver accepts an in-place resize
    assert pod["status"]["containerStatuses"][0]["resources"] == {"requests": {"cpu": "100m"}}
    resize = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "200m"}}}]}}
    kubectl("patch", "pod", "on-kwok", "-n", namespace, "--subresource=resize", "-p", json.dumps(resize))
    resized = kubectl_json("get", "pod", "on-kwok", "-n", namespace)
    assert resized["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "200m"}
    # the kubelet-less node's pod is bound, never run
    other = kubectl_json("get", "pod", "no-kubelet", "-n", namespace)
    assert other["spec"]["nodeName"] == node and other["status"]["phase"] == "Pending"

    delay_s = 4
    apply(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "timed", "namespace": namespace},
            "spec": {
                "template": {
                    "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": f"{delay_s}s"}},
                    "spec": {**spec, "restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": kwok_node}},
                }
            },
        }
    )

    def job_pod(phase: str) -> dict[str, Any] | None:
        pods = kubectl_json("get", "pods", "-n", namespace, "-l", "job-name=timed")["items"]
        return pods[0] if pods and pods[0]["status"].get("phase") == phase else None

    started = wait_for(lambda: job_pod("Running"), timeout=60, what="the Job's pod Running")
    done = wait_for(lambda: job_pod("Succeeded"), timeout=60, what="the Job's pod Succeeded")
    assert done["metadata"]["uid"] == started["metadata"]["uid"]
    state = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert state["reason"] == "Completed" and state["exitCode"] == 0
    # completed after the annotated delay, counted from Running (second resolution in the API)
    run_s = datetime.fromisoformat(state["finishedAt"]) - datetime.fromisoformat(
        started["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    )
    assert run_s.total_seconds() >= delay_s - 1, run_s
    wait_for(
        lambda: kubectl_json("get", "job", "timed", "-n", namespace)["status"].get("succeeded") == 1 or None,
        timeout=60,
        what="the Job controller to count the completion",
    )

    # graceful deletion finishes on the kwok node (a kubelet would confirm it); not on the other
    kubectl("delete", "pod", "on-kwok", "no-kubelet", "-n", namespace, "--wait=false")

    def gone() -> bool | None:
        names = {p["metadata"]["name"] for p in kubectl_json("get", "pods", "-n", namespace)["items"]}
        return True if "on-kwok" not in names else None

    wait_for(gone, timeout=60, what="kwok to finish the pod's deletion")
    stuck = kubectl_json("get", "pod", "no-kubelet", "-n", namespace)
    assert stuck["metadata"].get("deletionTimestamp"), stuck["metadata"]


@pytest.mark.integration
@pytest.mark.kube
@pytest.mark.timeout(3600)
def test_service_account_tokens_are_issued_and_accepted(namespace: str, tmp_path: Path) -> None:
    wait_for(
        lambda: kubectl("get", "serviceaccount", "default", "-n", namespace, check=False).returncode == 0,
        timeout=60,
        what="the serviceaccount controller to create the default ServiceAccount",
    )
    wait_for(
        lambda: kubectl("get", "configmap", "kube-root-ca.crt", "-n", namespace, check=False).returncode == 0,
        timeout=60,
        what="the root-ca publisher to create kube-root-ca.crt",
    )
    token = kubectl("create", "token", "default", "-n", namespace).stdout.strip()
    assert token.count(".") == 2
    # A kubeconfig with only the token (the admin one would also present its client certificate).
    admin = kubectl_json("config", "view", "--raw")
    cluster = admin["clusters"][0]
    token_kubeconfig = tmp_path / "token.kubeconfig"
    token_kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": "sa", "user": {"token": token}}],
                "contexts": [{"name": "sa", "context": {"cluster": cluster["name"], "user": "sa"}}],
                "current-context": "sa",
            }
        )
    )
    as_sa = ("--kubeconfig", str(token_kubeconfig))
    whoami = kubectl_json(*as_sa, "auth", "whoami")
    assert whoami["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:default"
    # RBAC is enforced: the default account may not list nodes.
    denied = kubectl(*as_sa, "get", "nodes", check=False)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()


@pytest.mark.integration
@pytest.mark.kube
@pytest.mark.timeout(3600)
def test_scheduler_restarts_with_a_custom_configuration(namespace: str, node: str, tmp_path: Path) -> None:
    config = tmp_path / "scheduler.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "profiles:\n"
        "- schedulerName: default-scheduler\n"
        "- schedulerName: borg-it-scheduler\n"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "custom", "namespace": namespace},
        "spec": {
            "schedulerName": "borg-it-scheduler",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "c", "image": "registry.invalid/c:1"}],
        },
    }
    try:
        started = run_script(KUBE_SH, "start-scheduler", str(config))
        assert started.returncode == 0, started.stdout + started.stderr
        apply(pod)
        bound = wait_for(
            lambda: kubectl_json("get", "pod", "custom", "-n", namespace)["spec"].get("nodeName"),
            timeout=60,
            what="the custom scheduler profile to bind the pod",
        )
        assert bound == node
        events = kubectl_json("get", "events", "-n", namespace, "--field-selector", "reason=Scheduled")["items"]
        assert [e["reportingComponent"] for e in events if e["involvedObject"]["name"] == "custom"] == [
            "borg-it-scheduler"
        ]
    finally:
        restored = run_script(KUBE_SH, "start-scheduler")
        assert restored.returncode == 0, restored.stdout + restored.stderr
