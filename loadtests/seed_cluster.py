"""Seed the local Kubernetes API with the objects `make run` acts on.

    python -m loadtests.seed_cluster --nodes 20 [--namespace demo] [--ready]

Creates Node objects named like the synthetic simulator's nodes (sim-0000, …) with
capacity and a Ready condition, a namespace with a few Deployments (pods get bound to
those nodes by the real scheduler), and a PodDisruptionBudget. Idempotent (apply).

The nodes carry kwok's annotation (``kwok.x-k8s.io/node: fake``): when infra/kube/kube.sh
runs kwok, kwok plays their kubelets — bound pods become Running and Ready, an evicted or
deleted pod goes away and its ReplicaSet's replacement is scheduled again. Without kwok
(``BORG_KWOK=0``) ``--ready`` reports the bound pods Running and Ready once, and pods of
namespaces stuck Terminating (nothing finishes a graceful deletion there) are forced first.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KUBE = ROOT / "infra" / "kube" / "kube.sh"
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
KWOK_HEALTHZ = "http://127.0.0.1:10247/healthz"
DEPLOYMENTS = (("web", 6, "memory_bound"), ("batch", 4, "cpu_bound"), ("cache", 3, "llc_sensitive"))


def kubectl(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["bash", str(KUBE), "kubectl", *args], input=stdin, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"seed-cluster: kubectl {' '.join(args[:3])} failed: {done.stderr.strip()}")
    return done.stdout


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "borg-orchestrator.io/simulated": "true"},
            "annotations": {KWOK_ANNOTATION[0]: KWOK_ANNOTATION[1]},
        },
    }


def deployment(namespace: str, name: str, replicas: int, workload: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {"borg-orchestrator.io/min-replicas": "2", "borg-orchestrator.io/max-replicas": "12"},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": {**labels, "borg-orchestrator.io/workload-class": workload}},
                "spec": {
                    "containers": [
                        {
                            "name": name,
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                        }
                    ]
                },
            },
        },
    }


def settle_nodes(names: list[str], status: dict[str, Any], timeout_s: float = 30.0) -> None:
    """Patch again until every node shows our allocatable: kwok initialises a node it saw without Ready from
    that (empty) status, with 1k CPUs / 1 Ti, and its patch can land after ours."""
    import time

    want = status["status"]["allocatable"]
    deadline = time.monotonic() + timeout_s
    pending = list(names)
    while pending and time.monotonic() < deadline:
        time.sleep(0.5)
        items = json.loads(kubectl("get", "nodes", *pending, "-o", "json"))["items"]
        pending = [n["metadata"]["name"] for n in items if n.get("status", {}).get("allocatable") != want]
        for name in pending:
            kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    if pending:
        raise SystemExit(f"seed-cluster: nodes {pending[:5]} do not keep allocatable {want} (is kwok fighting it?)")


def finish_terminating_namespaces() -> list[str]:
    """Force the pods of namespaces stuck Terminating, so the namespace controller can remove them.

    Without kubelets a bound pod never finishes graceful deletion, so a deleted namespace
    with pods (an earlier demo or test run) stays Terminating for good, and the services
    keep acting on its Deployments (writes there are refused: the namespace is terminating).
    """
    namespaces = json.loads(kubectl("get", "namespaces", "-o", "json"))["items"]
    stuck = [n["metadata"]["name"] for n in namespaces if n.get("status", {}).get("phase") == "Terminating"]
    for name in stuck:
        kubectl("delete", "pods", "--all", "-n", name, "--force", "--grace-period=0", "--wait=false")
    return stuck


def kwok_running(url: str = KWOK_HEALTHZ) -> bool:
    """Whether kube.sh's kwok answers (it then runs the seeded nodes' pods)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _is_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def wait_pods_ready(namespace: str, timeout_s: float = 60.0) -> int:
    """Wait until kwok has every pod of ``namespace`` Ready (or the timeout); the Ready count."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        pods = json.loads(kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
        ready = sum(1 for p in pods if _is_ready(p))
        if (pods and ready == len(pods)) or time.monotonic() > deadline:
            return ready
        time.sleep(1.0)


def mark_pods_ready(namespace: str, timeout_s: float = 60.0) -> int:
    """Play the kubelet once: report every bound pod Running and Ready (there are no kubelets here)."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        pods = json.loads(kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
        unbound = [p for p in pods if not p["spec"].get("nodeName")]
        if pods and not unbound:
            break
        if time.monotonic() > deadline:
            break
        time.sleep(1.0)
    ready = 0
    for pod in pods:
        if not pod["spec"].get("nodeName"):
            continue
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": t, "status": "True", "lastTransitionTime": now}
                    for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
                ],
                "containerStatuses": [
                    {
                        "name": c["name"],
                        "image": c["image"],
                        "imageID": "",
                        "ready": True,
                        "restartCount": 0,
                        "started": True,
                        "state": {"running": {"startedAt": now}},
                    }
                    for c in pod["spec"]["containers"]
                ],
            }
        }
        kubectl(
            "patch",
            "pod",
            pod["metadata"]["name"],
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(status),
        )
        ready += 1
    return ready


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="seed-cluster", description=__doc__)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--prefix", default="sim-")
    parser.add_argument("--namespace", default="demo")
    parser.add_argument("--ready", action="store_true", help="report the seeded pods Running and Ready once bound")
    args = parser.parse_args(argv)
    stuck = finish_terminating_namespaces()
    if stuck:
        print(f"seed-cluster: forced the pods of namespaces stuck Terminating: {', '.join(stuck)}")
    names = [f"{args.prefix}{i:04d}" for i in range(args.nodes)]
    docs: list[dict[str, Any]] = [node(n) for n in names]
    docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": args.namespace}})
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    status = {
        "status": {
            "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "simulated node"}],
        }
    }
    for name in names:
        kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    settle_nodes(names, status)
    workloads = [deployment(args.namespace, n, r, w) for n, r, w in DEPLOYMENTS]
    workloads.append(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": args.namespace},
            "spec": {"minAvailable": 4, "selector": {"matchLabels": {"app": "web"}}},
        }
    )
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": workloads}))
    if args.ready:
        if kwok_running():
            print(f"seed-cluster: {wait_pods_ready(args.namespace)} pods Running and Ready (kwok runs the nodes)")
        else:
            print(f"seed-cluster: {mark_pods_ready(args.namespace)} pods reported Running and Ready (no kwok)")
    print(
        f"seed-cluster: {len(names)} nodes ({names[0]}…{names[-1]}), namespace {args.namespace} with "
        + ", ".join(f"{n}×{r}" for n, r, _ in DEPLOYMENTS)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
