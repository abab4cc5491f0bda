"""End to end on the real control plane (kwok), Kafka and processes: per-pod pressure → the reliability agent's
interference move → the referee's eviction → the Job's replacement pod.

Two kwok nodes of one run. Node 0 runs a latency-sensitive llc-sensitive pod (job ``web``) beside a memory hog
(job ``etl``); node 1 a calm latency-sensitive cpu-bound pod and the hog's job-mate. Each task is a one-pod Job
pinned to its node (``nodeName``) with the live arena's labels. PodPressure records for the four pods go to
``podpressure.v1``: the hog's pressure puts the llc-sensitive pod at 2.24× (the simulator's interference model)
and node 1 can take the hog without pushing its calm pod over 1.25×. Expected: one ``evict`` proposal by the
reliability agent for the hog, the referee (apply mode) evicts it, kwok stops it, and the Job controller runs a
replacement (a new pod UID) — while no proposal names any other pod.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from contracts import ActionResult, Proposal, decode
from contracts.models import PodPressure
from contracts.topics import Topic
from loadtests.arena_live.kube import CLASS_LABEL, JOB_LABEL, LATENCY_LABEL, ArenaKube, LiveTask, job_manifest
from tests.conftest import wait_until
from tests.integration.test_referee_helpers import kube_admin  # noqa: F401 (fixture)
from tests.integration.test_stream_pipeline import collector
from tests.kafka_helpers import produce_contracts

pytestmark = [pytest.mark.integration, pytest.mark.kube]
ROOT = Path(__file__).resolve().parents[2]

# (task, node index, class, latency-sensitive, job, pressure llc/membw/core/frontend)
TASKS = [("victim", 0, "llc_sensitive", True, "web", (0.2, 0.1, 0.2, 0.1)),
         ("hog", 0, "memory_bound", False, "etl", (0.8, 0.9, 0.3, 0.1)),
         ("calm", 1, "cpu_bound", True, "api", (0.1, 0.1, 0.4, 0.1)),
         ("mate", 1, "cpu_bound", False, "etl", (0.1, 0.1, 0.4, 0.1))]


def serve(name: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "borgctl.main", "serve", name], cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT), "HEALTH_PORT": "0",
                                     "LOG_LEVEL": "WARNING", **env}, stdout=out, stderr=subprocess.STDOUT)


@pytest.mark.timeout(300)
async def test_an_interference_move_is_proposed_evicted_and_replaced(
        kube_admin: Path, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:  # noqa: F811
    from kubernetes_asyncio import config

    run_id = uuid.uuid4().hex[:8]
    api = await config.new_client_from_config(config_file=str(kube_admin))
    arena = ArenaKube(api, run_id=run_id, namespace=f"arena-{run_id}")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        nodes = await arena.create(2)
        for task_id, node, cls, ls, job, _ in TASKS:
            manifest: Any = job_manifest(LiveTask(task_id, "kind", cls, 1000, 512, run_s=600.0, latency_sensitive=ls,
                                                  job_id=job), run_id=run_id, scheduler="default-scheduler")
            manifest["spec"]["template"]["spec"]["nodeName"] = nodes[node]
            await arena.batch.create_namespaced_job(arena.namespace, manifest)

        async def all_running() -> bool:
            runs = await arena.runs()
            return len(runs) == len(TASKS) and all(r.phase == "Running" for r in runs)

        await wait_until(all_running, timeout=60, interval=0.5, what="every task's pod Running (kwok)")
        first = {r.task_id: r for r in await arena.runs()}
        env = {"KAFKA_BOOTSTRAP": kafka_bootstrap, "BORG_TOPIC_PREFIX": topic_prefix}
        procs = [
            serve("agent-reliability", {**env, "AGENT_RELIABILITY_GROUP_ID": f"{topic_prefix}agent-reliability",
                                        "AGENT_RELIABILITY_INTERFERENCE": "true",
                                        "AGENT_RELIABILITY_KUBECONFIG": str(kube_admin),
                                        "AGENT_RELIABILITY_CLASS_LABEL": CLASS_LABEL,
                                        "AGENT_RELIABILITY_LATENCY_LABEL": LATENCY_LABEL,
                                        "AGENT_RELIABILITY_JOB_LABEL": JOB_LABEL,
                                        "AGENT_RELIABILITY_PODS_REFRESH_S": "0.5",
                                        "AGENT_RELIABILITY_MOVE_MIN_AGE_S": "0"}, tmp_path / "agent.log"),
            serve("referee", {**env, "REFEREE_MODE": "apply", "REFEREE_KUBECONFIG": str(kube_admin),
                              "REFEREE_GROUP_ID": f"{topic_prefix}referee"}, tmp_path / "referee.log"),
        ]
        async with collector(kafka_bootstrap, topic_prefix, [Topic.PROPOSALS, Topic.ACTIONS]) as (got, poll_until):
            # estimates every 2 s until the agent has listed the pods and acted (its first plan may predate them)
            def evicted(g: Any) -> bool:
                return any(decode(ActionResult, r.value).action == "evict" for r in g.records[Topic.ACTIONS])

            deadline = time.monotonic() + 90
            while not evicted(got) and time.monotonic() < deadline:
                now_ms = int(time.time() * 1000)
                records: list[tuple[str, Any]] = [
                    (nodes[node], PodPressure(node=nodes[node], pod_uid=first[task_id].uid,
                                              cgroup=f"kubepods/pod{first[task_id].uid}", ts_ms=now_ms,
                                              window_ms=10_000, status="ok", llc=p[0], membw=p[1], core=p[2],
                                              frontend=p[3], model_version="test", input_ts_ms=now_ms))
                    for task_id, node, _, _, _, p in TASKS]
                await produce_contracts(kafka_bootstrap, topic_prefix, Topic.PODPRESSURE, records)
                for p in procs:
                    assert p.poll() is None, (tmp_path / "agent.log").read_text()[-3000:]
                with contextlib.suppress(AssertionError):  # not yet: estimates again
                    await poll_until(evicted, 2, "an evict action")
            with contextlib.suppress(AssertionError):  # 3 s more: any later proposal is read too
                await poll_until(lambda g: False, 3, "nothing")
        proposals = [decode(Proposal, r.value) for r in got.records[Topic.PROPOSALS]]
        actions = [decode(ActionResult, r.value) for r in got.records[Topic.ACTIONS]]
        hog = f"Pod/{arena.namespace}/{first['hog'].pod}"
        assert {p.target.key() for p in proposals} == {hog}, [(p.kind, p.target.key()) for p in proposals]
        assert all(p.kind == "evict" and p.agent == "reliability" and p.payload["reason"] == "interference"
                   for p in proposals)
        assert [(a.action, a.outcome, a.target.key()) for a in actions] == [("evict", "applied", hog)], \
            [(a.action, a.outcome, a.message) for a in actions]

        async def replaced() -> bool:
            runs = [r for r in await arena.runs() if r.task_id == "hog" and r.phase == "Running"]
            return bool(runs) and runs[0].uid != first["hog"].uid

        await wait_until(replaced, timeout=60, interval=0.5, what="the hog's Job runs a replacement pod")
        others = {r.task_id: r.uid for r in await arena.runs() if r.task_id != "hog"}
        assert others == {t: first[t].uid for t in ("victim", "calm", "mate")}  # nobody else was moved
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        await arena.delete()
        await api.close()
