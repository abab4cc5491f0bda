"""End to end: Kafka state → the extender process → a real kube-scheduler using deploy/scheduler-extender's config.

The test runs its own kube-scheduler (the binary built by infra/kube/kube.sh) with a unique scheduler
name next to the shared one, so other tests' pods are not affected. Its nodes carry a unique label and a
NoSchedule taint that only its pods tolerate; everything is deleted afterwards.

Nodes (no kubelets: Node objects with allocatable and a Ready condition):
- membw:   memory-bandwidth contention (memory_bound slowdown 2.4) → filtered for memory_bound pods
- llc:     LLC contention (llc_sensitive 2.2, memory_bound 1.2)  → filtered for llc_sensitive pods
- risky:   calm, but node failure risk 0.95                        → filtered for every pod
- unknown: no state at all                                         → neutral score 5

The extender runs with ``EXTENDER_POLICY=learned`` (shadow) and a hand-made Q-table that prefers the empty
``unknown`` node for memory-bound pods: pods still land where the heuristic sends them, and the shadow
record (``/debug/shadow``, the counter on ``/metrics``, the disagreement log line) names the learned choice.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml  # type: ignore[import-untyped]

from contracts.models import AnomalyScore, FailureRiskV2, HorizonRisk, RegimeLabelV2, RegimeName
from contracts.topics import REGIMES_TOPIC, RISK_TOPIC
from loadtests.arena_live.kube import private_scheduler, stop_process
from loadtests.procs import free_port
from services.runtime.producer import Producer
from services.scheduler_extender.settings import DEFAULT_CLASS_KEY
from tests.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.kube]

ROOT = Path(__file__).resolve().parents[2]
KUBE_SH = ROOT / "infra" / "kube" / "kube.sh"
CONFIG = ROOT / "deploy" / "scheduler-extender" / "kube-scheduler-config.yaml"
RUN_LABEL = "borg-orchestrator.io/e2e-run"


@dataclass(frozen=True)
class Kube:
    admin_kubeconfig: Path
    scheduler_kubeconfig: Path
    scheduler_bin: Path


def _k8s_version() -> str:
    text = (ROOT / "infra" / "kube" / "go.mod").read_text()
    match = re.search(r"^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\S+)", text, re.MULTILINE)
    assert match, "cannot read the pinned k8s.io/kubernetes version from infra/kube/go.mod"
    return match.group(1)


@pytest.fixture(scope="module")
def kube() -> Kube:
    """The shared control plane (started by kube.sh when it is not running; a no-op otherwise)."""
    status = subprocess.run(["bash", str(KUBE_SH), "status"], capture_output=True, text=True, check=False)
    if status.returncode != 0:
        started = subprocess.run(
            ["bash", str(KUBE_SH), "start"], capture_output=True, text=True, check=False, timeout=3600
        )
        if started.returncode != 0:
            pytest.fail(f"kube.sh start failed:\n{started.stdout}\n{started.stderr}")
    admin = Path(
        subprocess.run(["bash", str(KUBE_SH), "kubeconfig"], capture_output=True, text=True, check=True).stdout.strip()
    )
    cache = Path(os.environ.get("BORG_CACHE", Path.home() / ".cache" / "borg-orchestrator"))
    binary = cache / "bin" / f"kube-scheduler-{_k8s_version()}"
    assert binary.exists(), f"{binary} missing (bash infra/kube/kube.sh build)"
    return Kube(admin, admin.parent / "scheduler.kubeconfig", binary)


def http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return orjson.loads(response.read())


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


_stop = stop_process


# ---------------------------------------------------------------- the extender process


@dataclass
class ExtenderProc:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    health_url: str


# memory_bound (class 2), 100m of 16 cores, nothing bound yet: the empty unknown node beats the llc node;
# every other state is unseen (the table's mean, -1/3): indifferent, so it agrees with the heuristic.
SHADOW_TABLE = {"2|0|absent|-|-|e|0|0000": 1.0, "2|0|llc|2|1|e|0|0000": -1.0, "2|0|llc|2|1|0|0|0010": -1.0}


def shadow_model(root: Path) -> Path:
    version = root / "placement" / "e2e-v1"
    version.mkdir(parents=True)
    table = {"features": "extender+pods", "alpha_min": 0.02, "values": SHADOW_TABLE, "counts": {}}
    (version / "q_table.json").write_bytes(orjson.dumps(table))
    (version / "model_card.json").write_bytes(orjson.dumps({"model": "placement", "version": "e2e-v1"}))
    (root / "placement" / "CURRENT").write_text("e2e-v1\n")
    return root / "placement"


@contextlib.contextmanager
def extender_process(
    kube: Kube, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, settings: dict[str, str]
) -> Iterator[ExtenderProc]:
    port, health = free_port(), free_port()
    log = tmp_path / "extender.log"
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP": kafka_bootstrap,
        "BORG_TOPIC_PREFIX": topic_prefix,
        "EXTENDER_HOST": "127.0.0.1",
        "EXTENDER_PORT": str(port),
        "HEALTH_PORT": str(health),
        "LOG_FORMAT": "text",
        "EXTENDER_KUBECONFIG": str(kube.admin_kubeconfig),
        **settings,
    }
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "borgctl.main", "serve", "scheduler-extender"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    ext = ExtenderProc(proc, f"http://127.0.0.1:{port}", log, f"http://127.0.0.1:{health}")
    try:
        yield ext
    finally:
        _stop(proc)


@pytest.fixture
def extender(kube: Kube, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> Iterator[ExtenderProc]:
    learned = {"EXTENDER_POLICY": "learned", "EXTENDER_PLACEMENT_MODEL_DIR": str(shadow_model(tmp_path))}
    with extender_process(kube, kafka_bootstrap, topic_prefix, tmp_path, learned) as ext:
        yield ext


# ---------------------------------------------------------------- the test's own kube-scheduler


def scheduler_config(kube: Kube, extender_url: str, scheduler_name: str) -> dict[str, Any]:
    """deploy/scheduler-extender's config, pointed at the local extender, under a unique scheduler name."""
    config: dict[str, Any] = yaml.safe_load(CONFIG.read_text())
    (ext,) = config["extenders"]
    assert ext["nodeCacheCapable"] is True
    assert ext["ignorable"] is True
    assert (ext["filterVerb"], ext["prioritizeVerb"]) == ("filter", "prioritize")
    ext["urlPrefix"] = extender_url
    (profile,) = config["profiles"]
    profile["schedulerName"] = scheduler_name
    config["leaderElection"] = {"leaderElect": False}
    config["clientConnection"] = {"kubeconfig": str(kube.scheduler_kubeconfig)}
    return config


@contextlib.contextmanager
def kube_scheduler(kube: Kube, config: dict[str, Any], workdir: Path) -> Iterator[Path]:
    with private_scheduler(kube.scheduler_bin, config, workdir, free_port()) as log:
        yield log


# ---------------------------------------------------------------- Kubernetes objects


@pytest.fixture
async def core(kube: Kube) -> AsyncIterator[Any]:
    from kubernetes_asyncio import client, config

    api = await config.new_client_from_config(config_file=str(kube.admin_kubeconfig))
    try:
        yield client.CoreV1Api(api)
    finally:
        await api.close()


async def create_node(core: Any, name: str, run_id: str) -> None:
    await core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {RUN_LABEL: run_id, "kubernetes.io/hostname": name}},
            "spec": {"taints": [{"key": RUN_LABEL, "value": run_id, "effect": "NoSchedule"}]},
        }
    )
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    await core.patch_node_status(
        name,
        {
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "e2e (no kubelet)",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
            }
        },
    )


def pod(name: str, namespace: str, scheduler: str, run_id: str, workload_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {DEFAULT_CLASS_KEY: workload_class}},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": {RUN_LABEL: run_id},
            "tolerations": [{"key": RUN_LABEL, "operator": "Equal", "value": run_id, "effect": "NoSchedule"}],
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
        },
    }


async def bound_node(core: Any, namespace: str, name: str, within_s: float = 60.0) -> str:
    async def probe() -> str | None:
        p = await core.read_namespaced_pod(name, namespace)
        node: str | None = p.spec.node_name
        return node

    node: str = await wait_until(probe, timeout=within_s, interval=0.25, what=f"pod {namespace}/{name} bound")
    return node


async def produce_state(bootstrap: str, prefix: str, nodes: dict[str, str]) -> None:
    now = int(time.time() * 1000)
    producer = Producer(bootstrap=bootstrap, client_id="e2e-extender", topic_prefix=prefix)
    await producer.start()

    def label(node: str, regime: RegimeName, conf: float, interference: dict[str, float]) -> RegimeLabelV2:
        return RegimeLabelV2(
            node=node,
            ts_ms=now,
            regime=regime,
            confidence=conf,
            raw_regime=regime,
            changed=True,
            interference=interference,
            model_version="e2e",
            input_ts_ms=now,
        )

    def health(node: str, anomaly: float, risk: float) -> tuple[AnomalyScore, FailureRiskV2]:
        return (
            AnomalyScore(
                node=node,
                ts_ms=now,
                score=anomaly,
                is_anomaly=False,
                threshold=0.9,
                model_version="e2e",
                input_ts_ms=now,
            ),
            FailureRiskV2(
                target_kind="node",
                target=node,
                ts_ms=now,
                model_version="e2e",
                input_ts_ms=now,
                horizons=[HorizonRisk(horizon_s=600, probability=risk)],
            ),
        )

    states = {
        nodes["membw"]: (
            label(
                nodes["membw"],
                "membw",
                0.9,
                {"memory_bound": 2.4, "llc_sensitive": 1.1, "cpu_bound": 1.05, "frontend_bound": 1.0},
            ),
            *health(nodes["membw"], 0.05, 0.05),
        ),
        nodes["llc"]: (
            label(
                nodes["llc"],
                "llc",
                0.85,
                {"memory_bound": 1.2, "llc_sensitive": 2.2, "cpu_bound": 1.05, "frontend_bound": 1.1},
            ),
            *health(nodes["llc"], 0.05, 0.05),
        ),
        nodes["risky"]: (
            label(
                nodes["risky"],
                "none",
                0.95,
                {"memory_bound": 1.0, "llc_sensitive": 1.0, "cpu_bound": 1.0, "frontend_bound": 1.0},
            ),
            *health(nodes["risky"], 0.1, 0.95),
        ),
    }
    try:
        for node, (regime, anomaly, risk) in states.items():
            await producer.send(REGIMES_TOPIC, node, regime)
            await producer.send("anomalies.v1", node, anomaly)
            await producer.send(RISK_TOPIC, node, risk)
        await producer.flush()
    finally:
        await producer.stop()


@pytest.mark.timeout(900)
async def test_pods_land_by_class_and_scheduling_survives_extender_stop(
    kube: Kube, core: Any, extender: ExtenderProc, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    run_id = uuid.uuid4().hex[:8]
    namespace = f"e2e-extender-{run_id}"
    scheduler_name = f"borg-e2e-{run_id}"
    nodes = {role: f"ext-{run_id}-{role}" for role in ("membw", "llc", "risky", "unknown")}
    await produce_state(kafka_bootstrap, topic_prefix, nodes)
    try:
        await core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        for name in nodes.values():
            await create_node(core, name, run_id)

        # The extender has read every input of the three known nodes from Kafka.
        def held() -> bool:
            if extender.proc.poll() is not None:
                raise AssertionError(f"extender exited:\n{_tail(extender.log)}")
            try:
                debug = http_json(f"{extender.url}/debug/nodes")
            except OSError:
                return False
            known = {n: v["memory_bound"] for n, v in debug["nodes"].items() if n in nodes.values()}
            return len(known) == 3 and all(
                v[k]["status"] == "fresh" for v in known.values() for k in ("regime", "anomaly", "risk")
            )

        await wait_until(held, timeout=60, interval=0.2, what="extender state for the 3 nodes from Kafka")

        def watched() -> bool:  # the shadow's pods/nodes watch knows the four nodes' allocatable
            try:
                shadow = http_json(f"{extender.url}/debug/shadow")
            except OSError:
                return False
            return bool(shadow["mode"] == "shadow" and shadow["nodes_known"] >= len(nodes))

        await wait_until(watched, timeout=60, interval=0.2, what="the extender's node watch")

        async def service_account() -> bool:
            accounts = await core.list_namespaced_service_account(namespace)
            return any(a.metadata.name == "default" for a in accounts.items)

        await wait_until(service_account, timeout=60, interval=0.25, what="default ServiceAccount")

        config = scheduler_config(kube, extender.url, scheduler_name)
        with kube_scheduler(kube, config, tmp_path) as scheduler_log:
            try:
                for i in range(2):
                    await core.create_namespaced_pod(
                        namespace, pod(f"mem-{i}", namespace, scheduler_name, run_id, "memory_bound")
                    )
                await core.create_namespaced_pod(
                    namespace, pod("llc-0", namespace, scheduler_name, run_id, "llc_sensitive")
                )
                placed = {name: await bound_node(core, namespace, name) for name in ("mem-0", "mem-1", "llc-0")}
            except AssertionError as exc:
                raise AssertionError(
                    f"{exc}\nkube-scheduler log:\n{_tail(scheduler_log)}\nextender log:\n{_tail(extender.log)}"
                ) from None
            # memory-bound pods avoid the memory-bandwidth-contended node (and the risky one), and prefer the
            # node whose contention they tolerate over the unknown one.
            assert placed["mem-0"] == nodes["llc"], placed
            assert placed["mem-1"] == nodes["llc"], placed
            assert placed["llc-0"] == nodes["membw"], placed

            last = http_json(f"{extender.url}/debug/last")
            assert last["filter"]["workload_class"] in ("memory_bound", "llc_sensitive")
            assert last["filter"]["pod"]["namespace"] == namespace
            assert last["prioritize"]["workload_class_source"] == "label"
            assert set(last["prioritize"]["nodes"]) <= set(nodes.values())

            # The pods watch counts the two memory-bound pods (100m / 64Mi each, class 2) on the llc node.
            def llc_node() -> Any:
                known = http_json(f"{extender.url}/debug/shadow?node={nodes['llc']}")["known"]
                return known if known and known["pods"] == 2 else None

            known = await wait_until(llc_node, timeout=30, interval=0.2, what="the bound pods in the shadow's index")
            assert (known["requested_milli_cpu"], known["requested_memory"]) == (200, 128 << 20)
            assert known["classes"] == [2, 2]
            assert known["allocatable_milli_cpu"] == 16000

            # Shadow: the heuristic bound every pod; the learned table would have sent the memory-bound
            # pods to the empty unknown node, and agrees on the llc-sensitive one (its states unseen).
            shadow = http_json(f"{extender.url}/debug/shadow")
            assert shadow["model_version"] == "e2e-v1"
            decided = {d["pod"].split("/")[1]: d for d in shadow["recent"]}
            assert set(decided) == {"mem-0", "mem-1", "llc-0"}, shadow
            for name, d in decided.items():
                assert d["heuristic_node"] == placed[name], d  # the answer is the heuristic's
            for name in ("mem-0", "mem-1"):
                assert (decided[name]["agree"], decided[name]["learned_node"]) == (False, nodes["unknown"])
                assert decided[name]["learned_q"] == 1.0
            assert decided["llc-0"]["agree"] is True
            assert shadow["decisions"] == {"true": 1, "false": 2, "skipped": 0}
            metrics = urllib.request.urlopen(f"{extender.health_url}/metrics", timeout=5).read().decode()
            assert 'borg_extender_shadow_decisions_total{agree="false"} 2.0' in metrics
            assert 'borg_extender_shadow_decisions_total{agree="true"} 1.0' in metrics
            logged = [line for line in extender.log.read_text().splitlines() if "shadow disagreement" in line]
            assert len(logged) == 2 and all(f"learned={nodes['unknown']} (q 1.0000" in line for line in logged)
            assert {f"pod={namespace}/mem-0", f"pod={namespace}/mem-1"} == {
                line.split()[line.split().index("disagreement") + 1] for line in logged
            }

            # The extender goes away: the scheduler (ignorable: true) keeps binding pods.
            _stop(extender.proc)
            await core.create_namespaced_pod(
                namespace, pod("after-stop", namespace, scheduler_name, run_id, "memory_bound")
            )
            try:
                after = await bound_node(core, namespace, "after-stop", within_s=60)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\nkube-scheduler log:\n{_tail(scheduler_log)}") from None
            assert after in nodes.values()
            assert "ignorable" in scheduler_log.read_text(errors="replace"), "the scheduler never saw the extender fail"
    finally:
        await cleanup(core, namespace, list(nodes.values()))


async def cleanup(core: Any, namespace: str, node_names: list[str]) -> None:
    from kubernetes_asyncio.client.exceptions import ApiException

    with contextlib.suppress(ApiException):
        pods = await core.list_namespaced_pod(namespace)
        for p in pods.items:  # no kubelet will confirm a graceful delete: delete now
            with contextlib.suppress(ApiException):
                await core.delete_namespaced_pod(p.metadata.name, namespace, grace_period_seconds=0)
    with contextlib.suppress(ApiException):
        await core.delete_namespace(namespace)
    for name in node_names:
        with contextlib.suppress(ApiException):
            await core.delete_node(name)
    await asyncio.sleep(0)


async def default_service_account(core: Any, namespace: str) -> None:
    """Wait for the namespace's ``default`` ServiceAccount (pods cannot be created before it exists)."""

    async def exists() -> bool:
        accounts = await core.list_namespaced_service_account(namespace)
        return any(a.metadata.name == "default" for a in accounts.items)

    await wait_until(exists, timeout=60, interval=0.25, what="default ServiceAccount")


def prioritize(url: str, workload_class: str, nodes: list[str]) -> dict[str, int]:
    body = {"Pod": {"metadata": {"name": "probe", "labels": {DEFAULT_CLASS_KEY: workload_class}}}, "NodeNames": nodes}
    request = urllib.request.Request(f"{url}/prioritize", data=orjson.dumps(body), method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        return {e["Host"]: e["Score"] for e in orjson.loads(response.read())}


@pytest.mark.timeout(300)
async def test_corunner_term_follows_the_pods_bound_to_a_node(
    kube: Kube, core: Any, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    """EXTENDER_WEIGHT_CORUNNER=0.5 under the heuristic policy: the extender watches the API server's pods, and
    a frontend pod bound to a node lowers that node's prioritize answer for frontend pods until it is deleted.
    No regime input (unknown cards, penalty 0.5): an empty node scores 0.5 * 0.5 -> 8 (7.5 rounded up); beside
    one frontend pod the co-runner penalty is 1 (0.417 + 0.417 over 0.5), so 0.25 + 0.5 -> 3."""
    from kubernetes_asyncio.client.exceptions import ApiException

    run_id = uuid.uuid4().hex[:8]
    namespace = f"e2e-corunner-{run_id}"
    nodes = [f"co-{run_id}-{k}" for k in ("a", "b")]
    settings = {"EXTENDER_WEIGHT_CORUNNER": "0.5"}
    try:
        await core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        for name in nodes:
            await create_node(core, name, run_id)
        with extender_process(kube, kafka_bootstrap, topic_prefix, tmp_path, settings) as ext:

            def answers(expected: dict[str, int]) -> bool:
                if ext.proc.poll() is not None:
                    raise AssertionError(f"extender exited:\n{_tail(ext.log)}")
                try:
                    return prioritize(ext.url, "frontend_bound", nodes) == expected
                except OSError:
                    return False

            empty = {nodes[0]: 8, nodes[1]: 8}
            await wait_until(lambda: answers(empty), timeout=60, interval=0.2, what="the node watch (both empty)")

            await default_service_account(core, namespace)
            bound = pod("fe-0", namespace, "default-scheduler", run_id, "frontend_bound")
            bound["spec"]["nodeName"] = nodes[0]  # bound at creation, as a scheduler's binding would leave it
            await core.create_namespaced_pod(namespace, bound)
            beside = {nodes[0]: 3, nodes[1]: 8}
            await wait_until(lambda: answers(beside), timeout=30, interval=0.1, what="the bound pod in the score")
            card = http_json(f"{ext.url}/debug/nodes?node={nodes[0]}&class=frontend_bound")["nodes"][nodes[0]]
            assert card["frontend_bound"]["corunner"] == {"penalty": 1.0, "resident_classes": ["frontend_bound"]}
            # batch pods are not slowed there: cpu_bound sees only the frontend resident's 1.153 -> 0.403 -> 6
            assert prioritize(ext.url, "cpu_bound", nodes) == {nodes[0]: 6, nodes[1]: 8}

            with contextlib.suppress(ApiException):
                await core.delete_namespaced_pod("fe-0", namespace, grace_period_seconds=0)
            await wait_until(lambda: answers(empty), timeout=30, interval=0.1, what="the deleted pod gone from it")
            metrics = urllib.request.urlopen(f"{ext.health_url}/metrics", timeout=5).read().decode()
            updates = [float(line.split()[-1]) for line in metrics.splitlines()
                       if line.startswith("borg_extender_corunner_updates_total ")]
            assert updates and updates[0] >= 4  # two nodes listed, the pod bound, the pod gone
    finally:
        await cleanup(core, namespace, nodes)


@pytest.mark.timeout(300)
async def test_load_term_reads_the_pods_pressure_estimates_from_kafka(
    kube: Kube, core: Any, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    """EXTENDER_LOAD_TERM=true: a memory-bound pod bound to a node is scored at its class's guess until
    podpressure.v1 says how hard it presses. No regime input (penalty 0.5); for an arriving llc-sensitive pod
    (tests/unit/test_extender_load_live.py by hand): beside the guess 1.293 > 1.25 -> penalty 1 -> 3; beside the
    pod measured quiet -> 8; measured as a hog (0.4, 0.9, 0.1, 0.05) -> 3 again (estimates enter at the next
    re-check, here every second). An estimate for another node (the pod's old one) changes nothing."""
    from contracts.models import PodPressure
    from contracts.topics import Topic

    run_id = uuid.uuid4().hex[:8]
    namespace = f"e2e-load-{run_id}"
    nodes = [f"ld-{run_id}-{k}" for k in ("a", "b")]
    settings = {"EXTENDER_WEIGHT_CORUNNER": "0.5", "EXTENDER_LOAD_TERM": "true", "EXTENDER_LOAD_RECHECK_S": "1"}
    producer = Producer(bootstrap=kafka_bootstrap, client_id="e2e-load", topic_prefix=topic_prefix)
    await producer.start()
    try:
        await core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        for name in nodes:
            await create_node(core, name, run_id)
        with extender_process(kube, kafka_bootstrap, topic_prefix, tmp_path, settings) as ext:

            def answers(expected: dict[str, int]) -> bool:
                if ext.proc.poll() is not None:
                    raise AssertionError(f"extender exited:\n{_tail(ext.log)}")
                try:
                    return prioritize(ext.url, "llc_sensitive", nodes) == expected
                except OSError:
                    return False

            await wait_until(lambda: answers({nodes[0]: 8, nodes[1]: 8}), timeout=60, interval=0.2,
                             what="the node watch (both empty)")

            await default_service_account(core, namespace)
            bound = pod("mem-0", namespace, "default-scheduler", run_id, "memory_bound")
            bound["spec"]["nodeName"] = nodes[0]
            created = await core.create_namespaced_pod(namespace, bound)
            uid = created.metadata.uid
            guessed = {nodes[0]: 3, nodes[1]: 8}
            await wait_until(lambda: answers(guessed), timeout=30, interval=0.1, what="the pod at its class guess")

            async def publish(on: str, pressure: tuple[float, float, float, float]) -> None:
                now = int(time.time() * 1000)
                llc, membw, core_p, frontend = pressure
                record = PodPressure(node=on, pod_uid=uid, cgroup=f"kubepods/burstable/pod{uid}", ts_ms=now,
                                     window_ms=10_000, status="ok", llc=llc, membw=membw, core=core_p,
                                     frontend=frontend, model_version="e2e", input_ts_ms=now)
                await producer.send(Topic.PODPRESSURE, on, record)
                await producer.flush()

            await publish(nodes[1], (0.1, 0.1, 0.1, 0.1))  # another node's figure: not this pod's estimate
            await asyncio.sleep(3.0)  # three re-checks
            assert prioritize(ext.url, "llc_sensitive", nodes) == guessed
            await publish(nodes[0], (0.1, 0.1, 0.1, 0.1))
            await wait_until(lambda: answers({nodes[0]: 8, nodes[1]: 8}), timeout=30, interval=0.1,
                             what="the quiet estimate in the score")
            card = http_json(f"{ext.url}/debug/nodes?node={nodes[0]}&class=llc_sensitive")["nodes"][nodes[0]]
            assert card["llc_sensitive"]["corunner"] == {"penalty": 0.0, "resident_classes": ["memory_bound"]}
            await publish(nodes[0], (0.4, 0.9, 0.1, 0.05))
            await wait_until(lambda: answers(guessed), timeout=30, interval=0.1, what="the hog estimate in the score")
            metrics = urllib.request.urlopen(f"{ext.health_url}/metrics", timeout=5).read().decode()
            assert 'borg_extender_pressure_records_total{outcome="ok"} 3.0' in metrics, metrics[-2000:]
            assert "load term on" in ext.log.read_text(errors="replace")
    finally:
        await producer.stop()
        await cleanup(core, namespace, nodes)


@pytest.mark.parametrize("name", ["kube-scheduler-config.yaml", "kube-scheduler-local.yaml"])
def test_shipped_configs_are_accepted_by_kube_scheduler(kube: Kube, tmp_path: Path, name: str) -> None:
    """kube-scheduler parses and validates each file (`--write-config-to` exits before scheduling anything)."""
    config: dict[str, Any] = yaml.safe_load((CONFIG.parent / name).read_text())
    config.setdefault("clientConnection", {"kubeconfig": str(kube.scheduler_kubeconfig)})  # as kube.sh adds it
    source, effective = tmp_path / name, tmp_path / "effective.yaml"
    source.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [str(kube.scheduler_bin), "--config", str(source), "--write-config-to", str(effective), "--secure-port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    written = yaml.safe_load(effective.read_text())
    (ext,) = written["extenders"]
    assert ext["ignorable"] is True
    assert ext["nodeCacheCapable"] is True
    assert "borg-orchestrator" in [p["schedulerName"] for p in written["profiles"]]
