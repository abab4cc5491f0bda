"""Per node: allocatable, the summed requests and the workload classes of the pods bound there (pure).

What the learned placement state needs and the regime/risk topics do not carry (featurelib/placement.py).
The Kubernetes watch (``kube.py``) feeds Node and Pod objects as JSON dicts; this module keeps the sums.

Requests are what kube-scheduler's NodeResourcesFit counts: the sum over a pod's containers, or the
largest init container when that is more, plus the pod overhead; a pod counts from the moment it is bound
(``spec.nodeName`` set) until it terminates (Succeeded / Failed) or is deleted — whatever its phase, since
a bound pod that is still Pending already holds its requests on the node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from featurelib.placement import CLASS_INDEX
from services.runtime.k8s_quantity import pod_requests, quantity_of

Obj = Mapping[str, Any]
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class NodePods(NamedTuple):
    """One node as the learned state sees it. A new tuple on every change (the scorer caches by identity)."""

    allocatable_milli_cpu: int
    allocatable_memory: int
    requested_milli_cpu: int = 0
    requested_memory: int = 0
    pods: int = 0
    classes: tuple[int, ...] = ()  # class index of each pod bound there


class PodEntry(NamedTuple):
    node: str
    milli_cpu: int
    memory: int
    class_index: int
    uid: str = ""


def pod_class_index(pod: Obj, class_key: str, default_class: str) -> int:
    """The pod's workload class from its label, else annotation, else the default (as the extender reads it)."""
    meta = pod.get("metadata") or {}
    for where in ("labels", "annotations"):
        value = (meta.get(where) or {}).get(class_key)
        if isinstance(value, str):
            return CLASS_INDEX.get(value, CLASS_INDEX[default_class])
    return CLASS_INDEX[default_class]


class PodIndex:
    """Nodes' allocatable and the pods bound to them, updated from watch events."""

    def __init__(self, *, class_key: str, default_class: str) -> None:
        self.class_key = class_key
        self.default_class = default_class
        self._allocatable: dict[str, tuple[int, int]] = {}
        self._pods: dict[str, PodEntry] = {}  # by namespace/name
        self._by_node: dict[str, dict[str, PodEntry]] = {}
        self._view: dict[str, NodePods] = {}
        self._listing = False  # a re-list being applied: nodes are refreshed once at its end
        self.listeners: list[Callable[[str], None]] = []  # told each node whose view changed

    def __len__(self) -> int:
        return len(self._view)

    def node(self, name: str) -> NodePods | None:
        """None while the node's allocatable is unknown (no state can be built for it)."""
        return self._view.get(name)

    @property
    def view(self) -> Mapping[str, NodePods]:
        return self._view

    @property
    def pods(self) -> int:
        return len(self._pods)

    def entries(self, node: str) -> tuple[PodEntry, ...]:
        """The pods bound to ``node`` (any non-terminal phase)."""
        return tuple(self._by_node.get(node, {}).values())

    # ------------------------------------------------------------------ nodes

    def apply_node(self, kind: str, node: Obj) -> None:
        name = str((node.get("metadata") or {}).get("name") or "")
        if not name:
            return
        if kind == "DELETED":
            self._allocatable.pop(name, None)
        else:
            alloc = (node.get("status") or {}).get("allocatable") or {}
            cpu, mem = quantity_of(alloc, "cpu", 1000), quantity_of(alloc, "memory", 1)
            if cpu > 0 and mem > 0:
                self._allocatable[name] = (cpu, mem)
            else:
                self._allocatable.pop(name, None)
        self._refresh(name)

    def replace_nodes(self, nodes: Iterable[Obj]) -> None:
        old = set(self._allocatable)
        self._allocatable.clear()
        for node in nodes:
            self.apply_node("ADDED", node)
        for name in old - set(self._allocatable):
            self._refresh(name)

    # ------------------------------------------------------------------ pods

    def apply_pod(self, kind: str, pod: Obj) -> None:
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        old = self._pods.pop(key, None)
        if old is not None:
            self._by_node.get(old.node, {}).pop(key, None)
        if kind != "DELETED" and isinstance(node, str) and node and phase not in TERMINAL_PHASES:
            cpu, mem = pod_requests(pod)
            uid = str(meta.get("uid") or "")
            entry = PodEntry(node, cpu, mem, pod_class_index(pod, self.class_key, self.default_class), uid)
            self._pods[key] = entry
            self._by_node.setdefault(node, {})[key] = entry
            if old is None or old != entry:
                self._refresh(node)
        if old is not None and (old.node != node or key not in self._pods):
            self._refresh(old.node)

    def replace_pods(self, pods: Iterable[Obj]) -> None:
        touched = set(self._by_node)
        self._pods.clear()
        self._by_node.clear()
        # each node refreshed (and its listeners told) once, not once per pod: a listener may re-score the node
        self._listing = True
        try:
            for pod in pods:
                self.apply_pod("ADDED", pod)
        finally:
            self._listing = False
        for name in touched | set(self._by_node):
            self._refresh(name)

    def _refresh(self, node: str) -> None:
        if self._listing:
            return
        alloc = self._allocatable.get(node)
        view = None
        if alloc is not None:
            entries = tuple(self._by_node.get(node, {}).values())
            view = NodePods(
                alloc[0],
                alloc[1],
                sum(e.milli_cpu for e in entries),
                sum(e.memory for e in entries),
                len(entries),
                tuple(e.class_index for e in entries),
            )
        if self._view.get(node) == view:
            return
        if view is None:
            del self._view[node]
        else:
            self._view[node] = view
        for listener in self.listeners:
            listener(node)
