"""Real Kafka, the real kube-apiserver with kwok, the real pod-regime process and the shipped pod-relative model.

Five kwok nodes of one run. Nodes 0–3 each run a replica of job ``web`` (a one-pod Job pinned to the node, the
live arena's labels, ``borg-orchestrator.io/job=web``); node 0 also runs a memory hog of job ``etl`` (its only
pod). Their NodeStates — the simulator's node counters and each pod's per-cgroup counters under the pod's real UID
— go to ``nodestate.v1`` for 35 s; node 4 sends NodeStates without per-cgroup counters. Expected on
``podregimes.v1`` (keyed by node): every node gets labels by the shipped model; node 4's are all ``unknown``
(``counters_missing``) and nodes 0–3 never abstain for missing counters. The stage read the jobs from the API
server — with a token of the ServiceAccount deploy/base/pod-regime gives it (list on pods, nothing else): the web
pods (4 distinct replicas) had a reference, the hog (a job of one) had none (``borg_pod_regime_pods_read_total``).
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from contracts import NodeState, RegimeLabelV2
from contracts.base import Contract
from contracts.topics import Topic
from loadtests.arena_live.kube import ArenaKube, LiveTask, job_manifest
from simulator.arena.world import ArenaCluster
from tests.conftest import wait_until
from tests.integration.test_referee_helpers import (
    DEPLOY,
    SYSTEM_NS,
    install_rbac,
    kube_admin,  # noqa: F401 (fixture)
    kubectl,
    token_kubeconfig,
)
from tests.integration.test_stream_pipeline import ServiceProc, collector, running, spawn, wait_ready
from tests.kafka_helpers import produce_contracts

pytestmark = [pytest.mark.integration, pytest.mark.kube]
ROOT = Path(__file__).resolve().parents[2]
MODEL_ROOT = ROOT / "models" / "regime_pods"
# (task, node index, kind, intensity, job)
TASKS = [*((f"web-{i}", i, "web_frontend", 0.6, "web") for i in range(4)), ("hog", 0, "stream_triad", 0.95, "etl")]
SECONDS = 35


async def metrics(service: ServiceProc) -> dict[str, float]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{service.port}/metrics") as r:
        text = await r.text()
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r"^(borg_pod_regime_[a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$", line)
        if match:
            out[match.group(1)] = float(match.group(2))
    return out


def node_states(nodes: list[str], uids: dict[str, str], now_ms: int) -> list[tuple[str, Contract]]:
    cluster = ArenaCluster(len(nodes), seed=11, interval_ms=1000, node_names=nodes, missing_event_prob=0.0,
                           multiplex_prob=0.0)
    for i in range(len(nodes)):
        mine = [t for t in TASKS if t[1] == i]
        cluster.set_corunners(i, [t[2] for t in mine], [t[3] for t in mine], [uids[t[0]] for t in mine])
    out: list[tuple[str, Contract]] = []
    for k in range(SECONDS):
        states = cluster.tick().nodestate_dicts(ts_ms=now_ms - SECONDS * 1000 + 1000 * k)
        for i, state in enumerate(states[:4]):
            state["cgroups"] = cluster.cgroup_dicts(i, 1.0)
        out += [(s["node"], NodeState.model_validate(s)) for s in states]
    return out


@pytest.mark.timeout(300)
async def test_pod_regime_reads_each_pod_against_its_job_listed_by_the_api_server(
        kube_admin: Path, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:  # noqa: F811
    from kubernetes_asyncio import config

    run_id = uuid.uuid4().hex[:8]
    api = await config.new_client_from_config(config_file=str(kube_admin))
    arena = ArenaKube(api, run_id=run_id, namespace=f"podregime-{run_id}")
    try:
        nodes = await arena.create(5)
        for task_id, node, kind, _, job in TASKS:
            manifest: Any = job_manifest(LiveTask(task_id, kind, "cpu_bound", 100, 64, run_s=600.0, job_id=job),
                                         run_id=run_id, scheduler="default-scheduler")
            manifest["spec"]["template"]["spec"]["nodeName"] = nodes[node]
            await arena.batch.create_namespaced_job(arena.namespace, manifest)

        async def all_bound() -> bool:
            runs = await arena.runs()
            return len(runs) == len(TASKS) and all(r.uid and r.node for r in runs)

        await wait_until(all_bound, timeout=60, interval=0.5, what="every task's pod bound")
        uids = {r.task_id: r.uid for r in await arena.runs()}
        # the stage runs with a token of the ServiceAccount deploy/ gives it: list on pods, nothing more
        install_rbac(DEPLOY / "pod-regime" / "rbac.yaml")
        account = f"--as=system:serviceaccount:{SYSTEM_NS}:borg-pod-regime"
        for verb, resource in (("watch", "pods"), ("get", "secrets"), ("delete", "pods"), ("list", "nodes")):
            assert kubectl("auth", "can-i", verb, resource, account, check=False).stdout.strip() == "no"
        sa_config = token_kubeconfig(kube_admin, "borg-pod-regime", SYSTEM_NS, tmp_path / "sa.kubeconfig")
        service = spawn("regime.pods", kafka_bootstrap, topic_prefix, tmp_path, KUBECONFIG=str(sa_config),
                        POD_REGIME_JOB_LABEL="borg-orchestrator.io/job", POD_REGIME_PODS_REFRESH_S="0.5")
        with running(service):
            await wait_ready((service,))

            async def listed() -> bool:
                return (await metrics(service)).get("borg_pod_regime_jobs_known", 0) >= len(TASKS)

            await wait_until(listed, timeout=30, interval=0.5, what="the stage listed the run's pods")
            async with collector(kafka_bootstrap, topic_prefix, [Topic.PODREGIMES]) as (got, poll_until):
                await produce_contracts(kafka_bootstrap, topic_prefix, Topic.NODESTATE,
                                        node_states(nodes, uids, int(time.time() * 1000)))
                await poll_until(lambda g: {v.node for v in g.values(Topic.PODREGIMES, RegimeLabelV2)}
                                 >= set(nodes) and len(g.values(Topic.PODREGIMES, RegimeLabelV2)) >= 3 * len(nodes),
                                 60, "three windows of every node")
            read = await metrics(service)
            assert service.proc.poll() is None, service.tail()
    finally:
        await arena.delete()
        await api.close()
    labels = [v for v in got.values(Topic.PODREGIMES, RegimeLabelV2) if v.node in nodes]
    version = (MODEL_ROOT / "CURRENT").read_text().strip()
    assert {v.model_version for v in labels} == {version}
    plain = [v for v in labels if v.node == nodes[4]]
    assert plain and all(v.regime == "unknown" and v.abstain == ["counters_missing"] for v in plain)
    with_pods = [v for v in labels if v.node != nodes[4]]
    assert with_pods and all("counters_missing" not in v.abstain for v in with_pods)
    assert all(v.interference == {} and (v.regime == "unknown") == bool(v.abstain) for v in labels)
    # node 0 reads two pods per window, nodes 1-3 one: the web replicas against their job, the hog without one
    assert read['borg_pod_regime_pods_read_total{reference="yes"}'] > 0
    assert read['borg_pod_regime_pods_read_total{reference="no"}'] > 0
