"""The live arena's Kubernetes side on the real control plane with kwok (no Kafka).

A private kube-scheduler with the default profile places one run's Jobs on the run's own kwok
nodes; kwok runs each pod for its task's run time and completes it; the run's view says where and
for how long each ran; deleting the run leaves no node behind.
"""

from __future__ import annotations

import collections
import uuid
from pathlib import Path

import pytest

from loadtests.arena_live.kube import (
    ArenaKube,
    LiveTask,
    kube_scheduler_binary,
    private_scheduler,
    scheduler_config,
)
from loadtests.procs import free_port
from tests.conftest import wait_until
from tests.integration.test_referee_helpers import kube_admin  # noqa: F401 (fixture)

pytestmark = [pytest.mark.integration, pytest.mark.kube]


@pytest.mark.timeout(300)
async def test_default_profile_places_jobs_on_the_runs_kwok_nodes_and_kwok_runs_them(
    kube_admin: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    from kubernetes_asyncio import config

    run_id = uuid.uuid4().hex[:8]
    name = f"arena-{run_id}-kube-default"
    api = await config.new_client_from_config(config_file=str(kube_admin))
    arena = ArenaKube(api, run_id=run_id, namespace=f"arena-{run_id}")
    try:
        nodes = await arena.create(3, cpu="2", memory="4Gi")
        sched = scheduler_config(name, kube_admin.parent / "scheduler.kubeconfig", extender_url=None)
        with private_scheduler(kube_scheduler_binary(), sched, tmp_path, free_port()):
            tasks = [LiveTask(f"t{i}", "kind-a", "cpu_bound", 500, 256, run_s=3.0) for i in range(5)]
            for task in tasks:
                await arena.submit(task, name)

            async def all_done() -> bool:
                runs = await arena.runs()
                return len(runs) == len(tasks) and all(r.phase == "Succeeded" for r in runs)

            await wait_until(all_done, timeout=120, interval=0.5, what="every task's pod Succeeded (kwok)")
        runs = {r.task_id: r for r in await arena.runs()}
        assert set(runs) == {t.task_id for t in tasks}
        assert {r.node for r in runs.values()} <= set(nodes)
        # LeastAllocated spreads 5 half-CPU pods over 3 two-CPU nodes: never more than 2 on one
        assert max(collections.Counter(r.node for r in runs.values()).values()) == 2
        for r in runs.values():
            assert r.started_s is not None and r.finished_s is not None
            assert r.finished_s - r.started_s >= 2.0, r  # kwok's delay, at the API's one-second resolution
    finally:
        await arena.delete()
        left = [
            n.metadata.name
            for n in (await arena.core.list_node(label_selector=f"borg-orchestrator.io/arena-run={run_id}")).items
        ]
        await api.close()
    assert left == []


@pytest.mark.timeout(240)
async def test_complete_ends_a_running_pod_long_before_its_kwok_delay(
    kube_admin: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Stretched completion times rest on this: kwok reschedules a pod's completion from its delay
    annotation whenever the pod changes, so setting the delay to 0 s completes it now."""
    import time

    from kubernetes_asyncio import config

    run_id = uuid.uuid4().hex[:8]
    name = f"arena-{run_id}-kube-default"
    api = await config.new_client_from_config(config_file=str(kube_admin))
    arena = ArenaKube(api, run_id=run_id, namespace=f"arena-{run_id}")
    try:
        await arena.create(1, cpu="2", memory="4Gi")
        sched = scheduler_config(name, kube_admin.parent / "scheduler.kubeconfig", extender_url=None)
        with private_scheduler(kube_scheduler_binary(), sched, tmp_path, free_port()):
            tasks = [LiveTask(f"t{i}", "kind-a", "cpu_bound", 500, 256, run_s=600.0) for i in range(2)]
            for task in tasks:
                await arena.submit(task, name)

            async def both_running() -> bool:
                runs = await arena.runs()
                return len(runs) == 2 and all(r.phase == "Running" and r.pod for r in runs)

            await wait_until(both_running, timeout=90, interval=0.5, what="both pods Running (kwok)")
            pods = {r.task_id: r.pod for r in await arena.runs()}
            asked = time.monotonic()
            await arena.complete(pods["t0"])

            async def first_done() -> bool:
                return {r.task_id: r.phase for r in await arena.runs()}.get("t0") == "Succeeded"

            await wait_until(first_done, timeout=30, interval=0.3, what="t0 Succeeded after complete()")
            assert time.monotonic() - asked < 30
            phases = {r.task_id: r.phase for r in await arena.runs()}
            assert phases["t1"] == "Running", phases  # the other keeps its 600 s delay
            await arena.complete("no-such-pod")  # a pod already gone is no error
    finally:
        await arena.delete()
        await api.close()


@pytest.mark.timeout(240)
async def test_a_stopped_live_run_cleans_up_its_nodes(
    kube_admin: Path,  # noqa: F811
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    """SIGTERM mid-pass: the driver's clean-up still runs (its kwok nodes go) and it exits 130."""
    import asyncio
    import os
    import signal
    import subprocess
    import sys

    from kubernetes_asyncio import client, config

    api = await config.new_client_from_config(config_file=str(kube_admin))
    core = client.CoreV1Api(api)

    async def arena_nodes() -> set[str]:
        nodes = await core.list_node(label_selector="borg-orchestrator.io/arena-run")
        return {n.metadata.name for n in nodes.items}

    try:
        before = await arena_nodes()
        root = Path(__file__).resolve().parents[2]
        proc = subprocess.Popen(
            [sys.executable, "-m", "loadtests.arena_live.run", "--quick", "--nodes", "2", "--horizon-s", "600",
             "--synthetic", "20", "--policies", "kube-default", "--out", str(tmp_path / "out"), "--quiet"],
            cwd=root, env={**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap, "PYTHONPATH": str(root)},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        try:
            async def run_nodes_exist() -> bool:
                return len(await arena_nodes() - before) == 2

            await wait_until(run_nodes_exist, timeout=90, interval=0.5, what="the run's two kwok nodes")
            await asyncio.sleep(3)  # into the pass
            proc.send_signal(signal.SIGTERM)
            out, _ = await asyncio.to_thread(proc.communicate, timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, out.decode(errors="replace")[-2000:]
        assert b"cleaned up" in out
        assert await arena_nodes() - before == set()
    finally:
        await api.close()
