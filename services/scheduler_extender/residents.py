"""The co-runner term live (issue 21): the pod index's per-node classes folded into the store's cards.

The pod index (``podindex.PodIndex``, fed by the pods/nodes watch in ``kube.py``) tells a listener each node
whose view changed; the store then re-evaluates that node's slot (``NodeStateStore.set_residents``), so
prioritize keeps answering pre-encoded bytes and the work happens once per pod event, not per call.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import Counter

from services.scheduler_extender.podindex import PodIndex
from services.scheduler_extender.state import NodeStateStore

CORUNNER_UPDATES = Counter(
    "borg_extender_corunner_updates_total",
    "Nodes re-scored because the classes of the pods bound to them changed (the co-runner term)",
)


def follow_pods(store: NodeStateStore, index: PodIndex, clock: Callable[[], float] = time.time) -> None:
    """Keep the store's per-node resident classes equal to the index's (None while the index lacks the node)."""

    def changed(node: str) -> None:
        view = index.node(node)
        if store.set_residents(node, view.classes if view is not None else None, int(clock() * 1000)):
            CORUNNER_UPDATES.inc()

    index.listeners.append(changed)
    for node in index.view:  # what the index already holds (it is normally empty here)
        changed(node)
