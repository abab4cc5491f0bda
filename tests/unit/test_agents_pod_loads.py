"""The reliability agent's interference moves on Kubernetes objects and podpressure.v1 (pure parts): pods and
nodes read from API JSON, the join to estimates (a node with any unanswered pod is left out), taints and
tolerations, and the agent's evaluation (throttled, each pod proposed once) on hand-built cases."""

from __future__ import annotations

import dataclasses
from typing import Any

from prometheus_client import REGISTRY

from contracts.models import PodPressure
from contracts.topics import Topic
from services.agents.interference_policy import NodeLoad, PodLoad, tolerates
from services.agents.pod_loads import PodLabels, node_loads, node_meta, pod_meta
from services.agents.reliability_policy import evaluate
from services.agents.settings import ReliabilitySettings
from services.agents.view import ClusterView, Scope
from simulator.workloads import CLASS_PRESSURE_GUESS

T0 = 1_790_000_000_000
LABELS = PodLabels("borg-orchestrator.io/workload-class", "borg-orchestrator.io/latency-sensitive",
                   "borg-orchestrator.io/job")
RUN_TAINT = {"key": "run", "value": "r1", "effect": "NoSchedule"}
TOLERATE_RUN = {"key": "run", "operator": "Equal", "value": "r1", "effect": "NoSchedule"}


def pod(name: str, node: str, cls: str, *, ls: bool = False, job: str | None = None, phase: str = "Running",
        cpu: str = "1", owner: str | None = None) -> dict[str, Any]:
    labels = {LABELS.workload_class: cls, LABELS.latency_sensitive: "true" if ls else "false"}
    if job and LABELS.job:
        labels[LABELS.job] = job
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels}
    if owner:
        meta["ownerReferences"] = [{"kind": "Job", "name": owner, "controller": True}]
    return {"metadata": meta,
            "spec": {"nodeName": node, "tolerations": [TOLERATE_RUN],
                     "containers": [{"resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
            "status": {"phase": phase, "startTime": "2026-09-21T10:00:00Z"}}


def node(name: str, *, taints: list[dict[str, str]] | None = None, cpu: str = "16") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"taints": taints or [RUN_TAINT]},
            "status": {"allocatable": {"cpu": cpu, "memory": "64Gi"}}}


def estimate(uid: str, node_name: str, pressure: tuple[float, ...] | None,
             ts_ms: int = T0) -> PodPressure:
    if pressure is None:
        return PodPressure(node=node_name, pod_uid=uid, cgroup=f"kubepods/pod{uid}", ts_ms=ts_ms, window_ms=10_000,
                           status="unknown", reason="counters_missing", model_version="t", input_ts_ms=ts_ms)
    llc, membw, core, frontend = pressure
    return PodPressure(node=node_name, pod_uid=uid, cgroup=f"kubepods/pod{uid}", ts_ms=ts_ms, window_ms=10_000,
                       status="ok", llc=llc, membw=membw, core=core, frontend=frontend, model_version="t",
                       input_ts_ms=ts_ms)


VICTIM, HOG, CALM = (0.2, 0.1, 0.2, 0.1), (0.8, 0.9, 0.3, 0.1), (0.1, 0.1, 0.4, 0.1)


def cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, tuple[float, ...] | None]]:
    """Node a: an LS llc-sensitive pod beside a memory hog (predicted 2.24×); node b: a calm LS cpu-bound pod
    and the hog's job-mate; node c: the same hot pair, but one estimate is unknown."""
    pods = [pod("victim", "a", "llc_sensitive", ls=True, job="web"), pod("hog", "a", "memory_bound", job="etl",
                                                                         owner="hog-job"),
            pod("calm", "b", "cpu_bound", ls=True, job="api"), pod("mate", "b", "cpu_bound", job="etl"),
            pod("victim2", "c", "llc_sensitive", ls=True, job="web"), pod("hog2", "c", "memory_bound", job="etl"),
            pod("pending", "b", "cpu_bound", phase="Pending", cpu="2")]
    pressures: dict[str, tuple[float, ...] | None] = {"victim": VICTIM, "hog": HOG, "calm": CALM, "mate": CALM,
                                                      "victim2": VICTIM, "hog2": None}
    return pods, [node("a"), node("b"), node("c")], pressures


def test_pods_and_nodes_read_from_api_json() -> None:
    meta = pod_meta(pod("hog", "a", "memory_bound", job="etl", owner="hog-job", cpu="1500m"), LABELS)
    assert meta is not None
    assert (meta.key, meta.uid, meta.node, meta.job, meta.owner) == ("ns/hog", "uid-hog", "a", "ns/etl",
                                                                     "ns/Job/hog-job")
    assert (meta.workload_class, meta.latency_sensitive, meta.milli_cpu, meta.memory) == ("memory_bound", False,
                                                                                          1500, 2**30)
    assert meta.started_s == T0 / 1000 - (4 * 3600 + 13 * 60 + 20) and meta.tolerations == (("run", "Equal", "r1",
                                                                                      "NoSchedule"),)
    unbound = pod("x", "a", "cpu_bound")
    unbound["spec"]["nodeName"] = None
    assert pod_meta(unbound, LABELS) is None
    odd = pod_meta(pod("y", "a", "not-a-class"), LABELS)
    assert odd is not None and odd.workload_class is None and odd.job == "ns/Pod/y"
    n = node_meta({**node("a"), "spec": {"unschedulable": True, "taints": [RUN_TAINT]}})
    assert n is not None and (n.milli_cpu, n.schedulable, n.taints) == (16_000, False, (("run", "r1", "NoSchedule"),))


def test_join_leaves_out_nodes_with_an_unanswered_or_stale_pod() -> None:
    pods, nodes, pressures = cluster()
    metas = [m for p in pods if (m := pod_meta(p, LABELS)) is not None]
    estimates = {f"uid-{k}": estimate(f"uid-{k}", next(m.node for m in metas if m.key == f"ns/{k}"), v)
                 for k, v in pressures.items()}
    node_metas = [k for x in nodes if (k := node_meta(x)) is not None]
    loads = {n.name: n for n in node_loads(metas, node_metas, estimates, T0 + 5_000, 30.0)}
    assert sorted(loads) == ["a", "b"]  # c: hog2's estimate is unknown
    assert [p.key for p in loads["a"].pods] == ["ns/victim", "ns/hog"]
    assert loads["b"].free_milli_cpu == 16_000 - 1000 - 1000 - 2000  # the Pending pod holds its requests too
    assert [p.key for p in loads["b"].pods] == ["ns/calm", "ns/mate"]  # ... but has no estimate to read
    assert loads["a"].pods[1].pressure == HOG and loads["a"].pods[0].latency_sensitive
    stale = node_loads(metas, node_metas, estimates, T0 + 31_000, 30.0)
    assert stale == []
    # a pod not measured yet (started 5 s ago, its first window still open): its class's guess, never moved
    fresh = pod("fresh", "b", "memory_bound")
    fresh["status"]["startTime"] = "2026-09-21T14:13:20Z"  # T0
    new = pod_meta(fresh, LABELS)
    assert new is not None
    b = {n.name: n for n in node_loads([*metas, new], node_metas, estimates, T0 + 5_000, 30.0)}["b"]
    assert b.pods[-1].key == "ns/fresh" and b.pods[-1].pressure == CLASS_PRESSURE_GUESS[2] and b.pods[-1].age_s == 0
    assert "b" not in {n.name for n in node_loads([*metas, new], node_metas, estimates, T0 + 31_000, 30.0)}


def test_a_pod_moves_only_where_it_tolerates_the_taints() -> None:
    p = PodLoad("ns/p", "j", "cpu_bound", False, CALM, 60.0, 100, 100, tolerations=(("run", "Equal", "r1", ""),))
    assert tolerates(p, [("run", "r1", "NoSchedule"), ("soft", "", "PreferNoSchedule")])
    assert not tolerates(p, [("run", "r2", "NoSchedule")])
    assert not tolerates(p, [("borg-orchestrator.io/contended", "", "NoSchedule")])
    anything = PodLoad("ns/q", "j", "cpu_bound", False, CALM, 60.0, 100, 100, tolerations=(("", "Exists", "", ""),))
    assert tolerates(anything, [("x", "y", "NoExecute")])
    assert NodeLoad("n", (), 0, 0).taints == ()


def agent_view(now_ms: int) -> ClusterView:
    pods, nodes, pressures = cluster()
    view = ClusterView()
    view.kube_pods = tuple(m for p in pods if (m := pod_meta(p, LABELS)) is not None)
    view.kube_nodes = tuple(k for n in nodes if (k := node_meta(n)) is not None)
    view.kube_listed_ms = now_ms
    for name, value in pressures.items():
        meta = next(m for m in view.kube_pods if m.key == f"ns/{name}")
        view.update(Topic.PODPRESSURE, meta.node, estimate(meta.uid, meta.node, value))
    return view


def test_the_agent_proposes_evicting_the_hog_once_and_only_when_asked() -> None:
    now = T0 + 2_000
    settings = ReliabilitySettings(interference=True, job_label=LABELS.job, move_min_age_s=0.0)
    view = agent_view(now)
    (candidate,) = evaluate(view, settings, Scope(nodes={"a"}), now)
    proposal = candidate.proposal
    assert (proposal.kind, proposal.agent, proposal.target.key(), proposal.score) == ("evict", "reliability",
                                                                                     "Pod/ns/hog", 0.8)
    assert proposal.payload["reason"] == "interference" and proposal.payload["node"] == "a"
    assert [s.topic for s in candidate.sources] == [Topic.PODPRESSURE]
    assert REGISTRY.get_sample_value("borg_agent_interference_verdict_nodes", {"verdict": "move"}) == 1.0
    assert REGISTRY.get_sample_value("borg_agent_interference_verdict_nodes", {"verdict": "no_target"}) == 0.0
    assert evaluate(view, settings, Scope(nodes={"a"}), now + 500) == []  # re-planned at most every 2 s
    assert evaluate(view, settings, Scope(nodes={"a"}), now + 5_000) == []  # the hog's Job was proposed once
    assert list(view.moved) == ["ns/Job/hog-job"]
    off = ReliabilitySettings(job_label=LABELS.job, move_min_age_s=0.0)
    assert evaluate(agent_view(now), off, Scope(nodes={"a"}), now) == []
    blocked = agent_view(now)
    contended = (("borg-orchestrator.io/contended", "", "NoSchedule"),)
    blocked.kube_nodes = tuple(n if n.name != "b" else dataclasses.replace(n, taints=contended)
                               for n in blocked.kube_nodes)
    assert evaluate(blocked, settings, Scope(nodes={"a"}), now) == []  # the only room is a node it cannot enter
    assert REGISTRY.get_sample_value("borg_agent_interference_verdict_nodes", {"verdict": "no_target"}) == 1.0
    unlisted = agent_view(now)
    unlisted.kube_listed_ms = None
    assert evaluate(unlisted, settings, Scope(nodes={"a"}), now) == []
    outdated = agent_view(now)
    outdated.kube_listed_ms = now - 31_000  # the API server unreachable for longer than an estimate lives
    assert evaluate(outdated, settings, Scope(nodes={"a"}), now) == []
    assert len(evaluate(agent_view(now - 29_000), settings, Scope(nodes={"a"}), now)) == 1
