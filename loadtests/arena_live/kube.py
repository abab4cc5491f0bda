"""The live arena's Kubernetes side, on the local control plane with kwok (infra/kube/kube.sh).

* ``ArenaKube`` makes the run's nodes (kwok-annotated, so kwok runs their pods; labelled and
  tainted with the run id, so only the run's pods land there and the run's pods land nowhere
  else), submits each arena task as a one-pod Job whose pod kwok completes after the task's run
  time (``pod-complete.stage.kwok.x-k8s.io/delay``) or when ``complete`` says its work is done,
  lists where every task ran and when, and deletes it all at the end.
* ``private_scheduler`` runs the kube-scheduler binary kube.sh built, under a scheduler name of the
  run's own (pods name it in ``spec.schedulerName``), either with the default profile
  (``kube-default``) or with the project's extender configuration
  (deploy/scheduler-extender/kube-scheduler-config.yaml pointed at a running extender), so
  policies run side by side without touching the cluster's own scheduler.
"""

from __future__ import annotations

import contextlib
import re
import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[2]
EXTENDER_CONFIG = ROOT / "deploy" / "scheduler-extender" / "kube-scheduler-config.yaml"
RUN_LABEL = "borg-orchestrator.io/arena-run"
TASK_LABEL = "borg-orchestrator.io/arena-task"
KIND_LABEL = "borg-orchestrator.io/workload-kind"
CLASS_LABEL = "borg-orchestrator.io/workload-class"
LATENCY_LABEL = "borg-orchestrator.io/latency-sensitive"
"""``"true"`` on latency-sensitive tasks' pods (the reliability agent's AGENT_RELIABILITY_LATENCY_LABEL)."""
JOB_LABEL = "borg-orchestrator.io/job"
"""The trace job a task belongs to (AGENT_RELIABILITY_JOB_LABEL): a task moves only while a job-mate runs."""
KWOK_NODE = ("kwok.x-k8s.io/node", "fake")
KWOK_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"


@dataclass(frozen=True)
class LiveTask:
    """One arena task as the live arena submits it."""

    task_id: str
    kind: str
    workload_class: str
    cpu_m: int
    memory_mib: int
    run_s: float
    """Wall-clock seconds kwok keeps its pod Running before completing it."""
    latency_sensitive: bool = False
    job_id: str = ""


@dataclass(frozen=True)
class TaskRun:
    """Where and when a task's pod ran, as the API server reports it (None: not yet)."""

    task_id: str
    node: str | None
    phase: str
    started_s: float | None
    finished_s: float | None
    pod: str = ""
    """The pod's name (the Job controller's), for ``ArenaKube.complete``."""
    uid: str = ""
    """The pod's UID: its cgroup's name on the node (``kubepods/…/pod<uid>``)."""
    evicted: bool = False
    """Its end was a disruption (an eviction: the DisruptionTarget condition), not the task's own."""


def kube_scheduler_binary() -> Path:
    """The kube-scheduler kube.sh built for the version pinned in infra/kube/go.mod."""
    from borgctl.paths import cache_dir

    text = (ROOT / "infra" / "kube" / "go.mod").read_text()
    match = re.search(r"^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\S+)", text, re.MULTILINE)
    if match is None:
        raise RuntimeError("cannot read the pinned k8s.io/kubernetes version from infra/kube/go.mod")
    binary = cache_dir() / "bin" / f"kube-scheduler-{match.group(1)}"
    if not binary.exists():
        raise RuntimeError(f"{binary} is missing: run `bash infra/kube/kube.sh build`")
    return binary


def scheduler_config(
    name: str, kubeconfig: Path, extender_url: str | None, extender_weight: int | None = None
) -> dict[str, Any]:
    """A KubeSchedulerConfiguration for one policy: the default plugins, or the project's extender config
    (its extender ``weight`` replaced when ``extender_weight`` is given)."""
    if extender_url is None:
        config: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": name}],
        }
    else:
        config = yaml.safe_load(EXTENDER_CONFIG.read_text())
        (extender,) = config["extenders"]
        extender["urlPrefix"] = extender_url
        if extender_weight is not None:
            extender["weight"] = extender_weight
        (profile,) = config["profiles"]
        profile["schedulerName"] = name
    config["leaderElection"] = {"leaderElect": False}
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    return config


@contextlib.contextmanager
def private_scheduler(
    binary: Path, config: dict[str, Any], workdir: Path, port: int, timeout_s: float = 90.0
) -> Iterator[Path]:
    """kube-scheduler with ``config`` until the block ends; yields its log file."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"scheduler-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    log = workdir / f"scheduler-{port}.log"
    kubeconfig = config["clientConnection"]["kubeconfig"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(binary),
                "--config",
                str(path),
                "--authentication-kubeconfig",
                kubeconfig,
                "--authorization-kubeconfig",
                kubeconfig,
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"kube-scheduler exited ({proc.returncode}); log {log}:\n{_tail(log)}")
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=2, context=insecure) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"kube-scheduler not healthy within {timeout_s:.0f}s; log {log}:\n{_tail(log)}")
            time.sleep(0.25)
        yield log
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen[Any], grace_s: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def job_manifest(task: LiveTask, *, run_id: str, scheduler: str) -> dict[str, Any]:
    """A one-pod Job for ``task``: on the run's nodes only, named scheduler, completed by kwok after run_s."""
    labels = {RUN_LABEL: run_id, TASK_LABEL: task.task_id, KIND_LABEL: task.kind, CLASS_LABEL: task.workload_class,
              LATENCY_LABEL: "true" if task.latency_sensitive else "false", JOB_LABEL: task.job_id or task.task_id}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": task.task_id, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            # an evicted pod (a corrective move) is replaced by the Job controller, not counted as a failure
            # (after its pod-failure backoff: ~10 s wall); kwok stops a deleted pod as Failed first
            # (infra/kube/kwok/stages.yaml, pod-stop-on-delete)
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
            "ttlSecondsAfterFinished": 600,
            "template": {
                "metadata": {"labels": labels, "annotations": {KWOK_DELAY: f"{max(task.run_s, 0.0):.3f}s"}},
                "spec": {
                    "schedulerName": scheduler,
                    "restartPolicy": "Never",
                    "nodeSelector": {RUN_LABEL: run_id},
                    "tolerations": [{"key": RUN_LABEL, "operator": "Equal", "value": run_id, "effect": "NoSchedule"}],
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "task",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": f"{task.cpu_m}m", "memory": f"{task.memory_mib}Mi"}},
                        }
                    ],
                },
            },
        },
    }


def node_manifest(name: str, *, run_id: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {RUN_LABEL: run_id, "kubernetes.io/hostname": name},
            "annotations": {KWOK_NODE[0]: KWOK_NODE[1]},
        },
        "spec": {"taints": [{"key": RUN_LABEL, "value": run_id, "effect": "NoSchedule"}]},
    }


class ArenaKube:
    """One run's nodes, namespace and tasks on the API server (``kubernetes_asyncio`` ApiClient)."""

    def __init__(self, api: Any, *, run_id: str, namespace: str) -> None:
        from kubernetes_asyncio import client

        self.api = api
        self.run_id = run_id
        self.namespace = namespace
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.nodes: list[str] = []

    async def create(self, nodes: int, *, cpu: str = "16", memory: str = "64Gi", pods: int = 110) -> list[str]:
        """The run's namespace and ``nodes`` kwok nodes with the given allocatable."""
        namespace: Any = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": self.namespace, "labels": {RUN_LABEL: self.run_id}},
        }
        await self.core.create_namespace(namespace)
        resources = {"cpu": cpu, "memory": memory, "pods": str(pods)}
        for i in range(nodes):
            name = f"arena-{self.run_id}-{i:03d}"
            node: Any = node_manifest(name, run_id=self.run_id)
            await self.core.create_node(node)
            self.nodes.append(name)
        await self._settle(resources)
        return list(self.nodes)

    async def _settle(self, resources: dict[str, str], timeout_s: float = 60.0) -> None:
        """Every node Ready (kwok) with ``resources`` as capacity and allocatable.

        kwok initialises a node that is not Ready from the status it saw, and fills in 1k CPUs / 1 Ti when
        that had no allocatable: a patch of ours that lands before kwok's is overwritten. So patch, then
        check, and patch again until kwok has made each node Ready and the numbers are ours.
        """
        import asyncio

        from services.runtime.k8s_quantity import parse_quantity

        want = {k: str(v) for k, v in resources.items()}
        want_values = {k: parse_quantity(v) for k, v in want.items()}
        deadline = asyncio.get_running_loop().time() + timeout_s
        pending = list(self.nodes)
        while pending:
            for name in pending:
                await self.core.patch_node_status(name, {"status": {"capacity": want, "allocatable": want}})
            await asyncio.sleep(0.5)
            left = []
            for name in pending:
                status = (await self.core.read_node(name)).status
                ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])
                allocatable = {k: parse_quantity(v) for k, v in (status.allocatable or {}).items()}
                if not ready or any(allocatable.get(k) != v for k, v in want_values.items()):
                    left.append(name)
            pending = left
            if pending and asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"nodes {pending} not Ready with allocatable {want} within {timeout_s:.0f}s "
                                   "(is kwok running? bash infra/kube/kube.sh status)")

    async def submit(self, task: LiveTask, scheduler: str) -> None:
        job: Any = job_manifest(task, run_id=self.run_id, scheduler=scheduler)  # the client takes a dict too
        await self.batch.create_namespaced_job(self.namespace, job)

    async def runs(self) -> list[TaskRun]:
        """Every task pod of the run: node, phase, Running since / finished at (API server clock)."""
        pods = await self.core.list_namespaced_pod(self.namespace, label_selector=f"{RUN_LABEL}={self.run_id}")
        out = []
        for p in pods.items:
            statuses = p.status.container_statuses or []
            state = statuses[0].state if statuses else None
            # startTime: when the pod started running (kwok's pod-ready); the terminated state's own
            # startedAt is kwok's completion time, not the start
            started = p.status.start_time.timestamp() if p.status.start_time is not None else None
            finished = None
            if state is not None and state.terminated is not None and state.terminated.finished_at is not None:
                finished = state.terminated.finished_at.timestamp()
            out.append(
                TaskRun(
                    p.metadata.labels.get(TASK_LABEL, p.metadata.name),
                    p.spec.node_name,
                    p.status.phase or "Pending",
                    started,
                    finished,
                    p.metadata.name,
                    p.metadata.uid or "",
                    any(c.type == "DisruptionTarget" and c.status == "True" for c in p.status.conditions or []),
                )
            )
        return out

    async def complete(self, pod: str) -> None:
        """Let kwok complete ``pod`` now: its delay annotation set to 0 s.

        kwok matches a pod's stage again on every change and schedules it with the delay read afresh,
        cancelling the one it had scheduled (``addStageJob`` in sigs.k8s.io/kwok's pod controller), so a
        Running Job pod whose delay becomes 0 s is completed at once. A pod already gone is no error.
        """
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            await self.core.patch_namespaced_pod(pod, self.namespace,
                                                 {"metadata": {"annotations": {KWOK_DELAY: "0s"}}})
        except ApiException as e:
            if e.status != 404:
                raise

    async def delete(self) -> None:
        """The namespace (Jobs and pods with it: kwok finishes their deletion) and the nodes."""
        from kubernetes_asyncio.client.exceptions import ApiException

        with contextlib.suppress(ApiException):
            await self.core.delete_namespace(self.namespace)
        for name in self.nodes:
            with contextlib.suppress(ApiException):
                await self.core.delete_node(name)
        self.nodes.clear()
