"""API failures become ActionResults (never a crash), and the dry-run and shadow modes write nothing."""

# ruff: noqa: F811 (pytest fixtures imported from test_referee_helpers are test parameters here)

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from contracts.models import ActionResult, TargetRef
from services.runtime.admin import create_topics
from tests.integration.test_referee_helpers import (  # noqa: F401 (fixtures)
    Nodes,
    apply,
    collect,
    deployment,
    kube_admin,
    kube_ns,
    kubectl,
    kubectl_json,
    mark_running,
    nodes,
    pdb,
    pod,
    referee_kubeconfig,
    token_kubeconfig,
)
from tests.integration.test_referee_kube import (
    Running,
    dep_ref,
    node_ref,
    pod_ref,
    proposal,
    results_for,
    send,
    settings,
    wait_pdb_observed,
)

pytestmark = [pytest.mark.integration, pytest.mark.kube]


async def test_api_errors_become_action_results_and_the_referee_keeps_going(
    kafka_bootstrap: str,
    topic_prefix: str,
    referee_kubeconfig: Path,
    kube_admin: Path,
    kube_ns: str,
    nodes: Nodes,
    tmp_path: Path,
) -> None:
    ns = kube_ns
    worker, other = nodes.make(), nodes.make()
    apply(
        [
            deployment("web", 1, worker),
            deployment("low", 1, worker),
            pod("moved", worker),
            pod("guarded", worker, labels={"app": "guarded"}),
            pdb("guarded", {"app": "guarded"}, 1),
        ],
        namespace=ns,
    )
    mark_running(ns, "guarded")  # a Pending pod is not protected by a PDB: make it Running and Ready
    await wait_pdb_observed(ns, "guarded", healthy=1)
    failing = [
        proposal("scale_out", dep_ref(ns, "ghost"), 0.8, replicas=2),  # 404
        proposal("evict", pod_ref(ns, "moved"), 0.9, pod_uid=str(uuid.uuid4())),  # 409: UID precondition
        proposal("deprioritize", dep_ref(ns, "low"), 0.7, tier="not a label value!"),  # 422
        proposal("evict", pod_ref(ns, "guarded"), 0.9),  # 429 from the Eviction API (PDB)
    ]
    await send(kafka_bootstrap, topic_prefix, failing)
    # The referee's own PDB check is off, so the API server's disruption budget answers.
    s = settings(kafka_bootstrap, topic_prefix, referee_kubeconfig, pdb_precheck=False)
    async with Running(s) as run:
        got = await collect(
            kafka_bootstrap, f"{topic_prefix}actions.v1", ActionResult, results_for({p.target.key() for p in failing})
        )
        results = {r.target.key(): r for r, _ in got}
        # Still alive: a later proposal is applied.
        later = proposal("scale_out", dep_ref(ns, "web"), 0.8, replicas=2)
        await send(kafka_bootstrap, topic_prefix, [later])
        done = await collect(
            kafka_bootstrap,
            f"{topic_prefix}actions.v1",
            ActionResult,
            lambda g: any(r.target.key() == later.target.key() for r, _ in g),
        )
        assert not run.task.done()
    summary = {k: (r.outcome, r.api_status) for k, r in results.items()}
    assert summary == {
        dep_ref(ns, "ghost").key(): ("failed", 404),
        pod_ref(ns, "moved").key(): ("failed", 409),
        dep_ref(ns, "low").key(): ("failed", 422),
        pod_ref(ns, "guarded").key(): ("refused", 429),
    }, {k: r.message for k, r in results.items()}
    assert results[dep_ref(ns, "ghost").key()].api_response == {
        "code": 404,
        "reason": "NotFound",
        "message": 'deployments.apps "ghost" not found',
    }
    assert "disruption budget" in results[pod_ref(ns, "guarded").key()].message
    assert "the UID in the precondition" in results[pod_ref(ns, "moved").key()].message
    assert [r.outcome for r, _ in done if r.target.key() == later.target.key()] == ["applied"]
    assert kubectl_json("get", "deploy", "web", "-n", ns)["spec"]["replicas"] == 2
    assert not kubectl_json("get", "pod", "guarded", "-n", ns)["metadata"].get("deletionTimestamp")
    failed_events = kubectl_json("get", "events", "-n", ns, "--field-selector", "reason=BorgDecisionFailed")["items"]
    assert {e["involvedObject"]["name"] for e in failed_events} == {"ghost", "moved", "low"}

    # A referee bound only to the workload role (no borg-referee-disruptive): 403 on nodes.
    kubectl("create", "serviceaccount", "limited-referee", "-n", ns)
    kubectl(
        "create",
        "rolebinding",
        "limited-referee",
        "-n",
        ns,
        "--clusterrole=borg-referee",
        f"--serviceaccount={ns}:limited-referee",
    )
    limited = token_kubeconfig(kube_admin, "limited-referee", ns, tmp_path / "limited.kubeconfig")
    prefix = f"{topic_prefix}limited-"
    await create_topics(kafka_bootstrap, prefix=prefix)
    plan = [
        proposal("taint", node_ref(other), 0.9, key="borg-orchestrator.io/contended", value="llc", effect="NoSchedule"),
        proposal("scale_out", dep_ref(ns, "web"), 0.9, replicas=3),
    ]
    await send(kafka_bootstrap, prefix, plan)
    async with Running(settings(kafka_bootstrap, prefix, limited)):
        got = await collect(
            kafka_bootstrap, f"{prefix}actions.v1", ActionResult, results_for({p.target.key() for p in plan})
        )
    outcomes = {r.target.key(): (r.outcome, r.api_status) for r, _ in got}
    assert outcomes == {node_ref(other).key(): ("failed", 403), dep_ref(ns, "web").key(): ("applied", 200)}
    assert "forbidden" in next(r.message for r, _ in got if r.api_status == 403)
    assert "taints" not in kubectl_json("get", "node", other)["spec"]


async def test_dry_run_and_shadow_modes_write_nothing(
    kafka_bootstrap: str, topic_prefix: str, referee_kubeconfig: Path, kube_ns: str, nodes: Nodes
) -> None:
    ns = kube_ns
    worker = nodes.make()
    apply([deployment("web", 1, worker), pod("victim", worker, memory="256Mi")], namespace=ns)
    # what each action would write; not resourceVersions, which the Deployment controller and kwok bump with
    # status updates of their own while the test runs
    web_generation = kubectl_json("get", "deploy", "web", "-n", ns)["metadata"]["generation"]
    victim = kubectl_json("get", "pod", "victim", "-n", ns)
    plan = [
        proposal("scale_out", dep_ref(ns, "web"), 0.8, replicas=4),
        proposal(
            "taint", node_ref(worker), 0.8, key="borg-orchestrator.io/contended", value="membw", effect="NoSchedule"
        ),
        proposal("evict", pod_ref(ns, "victim"), 0.9),
        proposal("memory_balloon", TargetRef(kind="Pod", name="victim", namespace=ns), 0.4, memory_request_mib=128),
    ]
    await send(kafka_bootstrap, topic_prefix, plan)
    dry, shadow = (
        settings(kafka_bootstrap, topic_prefix, referee_kubeconfig, mode="dry-run"),
        settings(kafka_bootstrap, topic_prefix, None, mode="shadow"),
    )
    async with Running(dry), Running(shadow):
        got = await collect(kafka_bootstrap, f"{topic_prefix}actions.v1", ActionResult, lambda g: len(g) >= 6)
    by_mode: dict[str, dict[str, str]] = {"dry-run": {}, "shadow": {}}
    for r, _ in got:
        by_mode["shadow" if r.outcome == "shadow" else "dry-run"][r.target.key()] = r.outcome
    targets = {dep_ref(ns, "web").key(), node_ref(worker).key(), pod_ref(ns, "victim").key()}
    assert by_mode["dry-run"] == dict.fromkeys(targets, "dry-run"), got
    assert by_mode["shadow"] == dict.fromkeys(targets, "shadow")
    # The server validated every write (dry run) and persisted none of them.
    web = kubectl_json("get", "deploy", "web", "-n", ns)
    assert (web["spec"]["replicas"], web["metadata"]["generation"]) == (1, web_generation)
    taints = kubectl_json("get", "node", worker)["spec"].get("taints", [])
    assert [t for t in taints if t["key"] == "borg-orchestrator.io/contended"] == []
    still = kubectl_json("get", "pod", "victim", "-n", ns)
    assert still["metadata"]["uid"] == victim["metadata"]["uid"] and "deletionTimestamp" not in still["metadata"]
    resources = [c["resources"] for c in victim["spec"]["containers"]]
    assert [c["resources"] for c in still["spec"]["containers"]] == resources
    events = kubectl_json("get", "events", "-n", ns, "--field-selector", "reason=BorgDecisionDryRun")["items"]
    assert {e["involvedObject"]["name"] for e in events} == {"web", "victim"}
    assert [e for e in kubectl_json("get", "events", "-n", ns)["items"] if "shadow" in e["metadata"]["name"]] == []
