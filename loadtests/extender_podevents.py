"""CPU of the extender's pod events without the co-runner term, with it, and with the load term
(docs/scheduler_extender.md).

    python -m loadtests.extender_podevents [--nodes 5000] [--pods-per-node 20] [--events 20000]

In-process, no Kubernetes, no Kafka: the ``PodIndex`` the watch feeds, with the store re-scoring each node whose
bound classes change (``residents.follow_pods``) when the weight is > 0, or each node whose pods or their
estimates change (``residents.LoadFollower``) with the load term. Printed per case: the CPU of applying a
re-list of every pod, per pod event (a pod bound or gone on a random node) in the steady state, and with the
load term per podpressure.v1 record (a new estimate for a random running pod, every pod measured first) and
per re-check after every pod got a new estimate (the worst case: every node re-scored).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from typing import Any

from contracts.models import WORKLOAD_CLASSES, PodPressure, RegimeLabelV2
from services.scheduler_extender.podindex import PodIndex
from services.scheduler_extender.pressures import PressureBook
from services.scheduler_extender.residents import LoadFollower, follow_pods
from services.scheduler_extender.scoring import ScoringConfig
from services.scheduler_extender.settings import DEFAULT_CLASS_KEY
from services.scheduler_extender.state import NodeStateStore

NOW_MS = 1_800_000_000_000
MEMBW = {"memory_bound": 2.4, "llc_sensitive": 1.3, "cpu_bound": 1.05, "frontend_bound": 1.0}


def _pods(nodes: int, per_node: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    requests = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    return [
        {
            "metadata": {"namespace": "ns", "name": f"p{n}-{k}", "uid": f"u{n}-{k}",
                         "labels": {DEFAULT_CLASS_KEY: rng.choice(WORKLOAD_CLASSES)}},
            "spec": {"nodeName": f"n{n}", "containers": [{"resources": requests}]},
            "status": {"phase": "Running"},
        }
        for n in range(nodes)
        for k in range(per_node)
    ]


def _estimate(rng: random.Random, pod: dict[str, Any], ts_ms: int) -> PodPressure:
    uid = pod["metadata"]["uid"]
    llc, membw, core, frontend = (round(rng.random(), 3) for _ in range(4))
    return PodPressure(node=pod["spec"]["nodeName"], pod_uid=uid, cgroup=f"kubepods/pod{uid}", ts_ms=ts_ms,
                       window_ms=10_000, status="ok", llc=llc, membw=membw, core=core, frontend=frontend,
                       model_version="bench", input_ts_ms=ts_ms)


def measure(weight: float, nodes: int, per_node: int, events: int,
            load_term: bool = False) -> tuple[float, float, float, float]:
    """(re-list CPU s, CPU µs per pod event, CPU µs per estimate, CPU s per re-check; NaN without the load term)
    for one co-runner weight, with the class table or the load term; 95 % of nodes hold a regime label."""
    store = NodeStateStore(ScoringConfig(weight_corunner=weight))
    for n in range(int(nodes * 0.95)):
        label = RegimeLabelV2(node=f"n{n}", ts_ms=NOW_MS, regime="membw", confidence=0.9, raw_regime="membw",
                              changed=False, interference=MEMBW, model_version="bench", input_ts_ms=NOW_MS)
        store.apply(label, NOW_MS)
    index = PodIndex(class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound")
    loads = None
    if load_term:
        loads = LoadFollower(store, index, PressureBook(60_000), clock=lambda: NOW_MS / 1000)
    else:
        follow_pods(store, index, clock=lambda: NOW_MS / 1000)
    for n in range(nodes):
        index.apply_node("ADDED", {"metadata": {"name": f"n{n}"},
                                   "status": {"allocatable": {"cpu": "16", "memory": "64Gi"}}})
    pods = _pods(nodes, per_node, 1)
    started = time.process_time()
    index.replace_pods(pods)
    listed = time.process_time() - started
    rng = random.Random(2)
    started = time.process_time()
    for i in range(events):
        index.apply_pod("DELETED" if i % 2 else "ADDED", pods[rng.randrange(len(pods))])
    per_event = (time.process_time() - started) / events * 1e6
    if loads is None:
        return listed, per_event, float("nan"), float("nan")
    index.replace_pods(pods)
    records = [_estimate(rng, pod, NOW_MS) for pod in pods]  # every pod measured once (untimed)
    for record in records:
        loads.estimate(record)
    records = [_estimate(rng, pods[rng.randrange(len(pods))], NOW_MS + 1 + i) for i in range(events)]
    started = time.process_time()
    for record in records:
        loads.estimate(record)
    per_estimate = (time.process_time() - started) / events * 1e6
    loads.recheck()
    for i, pod in enumerate(pods):  # a new estimate for every pod, then one re-check re-scores every node
        loads.estimate(_estimate(rng, pod, NOW_MS + events + 1 + i))
    started = time.process_time()
    loads.recheck()
    return listed, per_event, per_estimate, time.process_time() - started


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtests.extender_podevents", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods-per-node", type=int, default=20)
    p.add_argument("--events", type=int, default=20000)
    args = p.parse_args(argv)
    for weight, load_term in ((0.0, False), (0.5, False), (0.5, True)):
        listed, per_event, per_estimate, recheck = measure(weight, args.nodes, args.pods_per_node, args.events,
                                                           load_term)
        print(f"weight_corunner {weight}{' + load term' if load_term else ''}: re-list of "
              f"{args.nodes * args.pods_per_node} pods {listed:.2f} s CPU, {per_event:.1f} µs CPU per pod event"
              + (f", {per_estimate:.1f} µs CPU per podpressure record, {recheck:.2f} s CPU per re-check with "
                 "every estimate new" if load_term else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
