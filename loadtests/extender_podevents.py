"""CPU of the extender's pod events with and without the co-runner term (docs/scheduler_extender.md).

    python -m loadtests.extender_podevents [--nodes 5000] [--pods-per-node 20] [--events 20000]

In-process, no Kubernetes: the ``PodIndex`` the watch feeds, with the store re-scoring each node whose bound
classes change (``residents.follow_pods``) when the weight is > 0. Printed per weight: the CPU of applying a
re-list of every pod, and per pod event (a pod bound or gone on a random node) in the steady state.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from typing import Any

from contracts.models import WORKLOAD_CLASSES, RegimeLabelV2
from services.scheduler_extender.podindex import PodIndex
from services.scheduler_extender.residents import follow_pods
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
            "metadata": {"namespace": "ns", "name": f"p{n}-{k}",
                         "labels": {DEFAULT_CLASS_KEY: rng.choice(WORKLOAD_CLASSES)}},
            "spec": {"nodeName": f"n{n}", "containers": [{"resources": requests}]},
            "status": {"phase": "Running"},
        }
        for n in range(nodes)
        for k in range(per_node)
    ]


def measure(weight: float, nodes: int, per_node: int, events: int) -> tuple[float, float]:
    """(re-list CPU s, CPU µs per pod event) for one co-runner weight; 95 % of nodes hold a regime label."""
    store = NodeStateStore(ScoringConfig(weight_corunner=weight))
    for n in range(int(nodes * 0.95)):
        label = RegimeLabelV2(node=f"n{n}", ts_ms=NOW_MS, regime="membw", confidence=0.9, raw_regime="membw",
                              changed=False, interference=MEMBW, model_version="bench", input_ts_ms=NOW_MS)
        store.apply(label, NOW_MS)
    index = PodIndex(class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound")
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
    return listed, (time.process_time() - started) / events * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtests.extender_podevents", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods-per-node", type=int, default=20)
    p.add_argument("--events", type=int, default=20000)
    args = p.parse_args(argv)
    for weight in (0.0, 0.5):
        listed, per_event = measure(weight, args.nodes, args.pods_per_node, args.events)
        print(f"weight_corunner {weight}: re-list of {args.nodes * args.pods_per_node} pods {listed:.2f} s CPU, "
              f"{per_event:.1f} µs CPU per pod event")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
