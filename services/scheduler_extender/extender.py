"""The kube-scheduler extender protocol (``k8s.io/kube-scheduler/extender/v1``): bytes in, bytes out.

``ExtenderArgs`` is ``{"Pod": <v1.Pod>, "Nodes": <v1.NodeList>|null, "NodeNames": [..]|null}`` (Go field
names; Go decodes them case-insensitively, so lower-case spellings are accepted too). With
``nodeCacheCapable: true`` only ``NodeNames`` is sent and ``ExtenderFilterResult.NodeNames`` is returned;
otherwise ``Nodes`` comes in and the filtered ``Nodes`` goes back. Prioritize returns a
``HostPriorityList`` ``[{"Host": name, "Score": 0..10}]``.

No I/O here: the HTTP layer passes request bodies and records the returned ``Explanation``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from itertools import compress
from operator import not_
from typing import Any, Literal

import orjson

from contracts.models import WORKLOAD_CLASSES
from services.runtime.k8s_quantity import pod_requests
from services.scheduler_extender.scoring import CLASS_INDEX, NodeCard
from services.scheduler_extender.state import NodeStateStore, PackedCard

Verb = Literal["filter", "prioritize"]
_KNOWN = NodeCard._fields.index("known")
ClassSource = Literal["label", "annotation", "default", "invalid"]


def _controller(refs: Any) -> str | None:
    """``<kind>/<name>`` of the pod's controlling owner (None when there is none or it is malformed)."""
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, dict) and ref.get("controller") and isinstance(ref.get("kind"), str) \
                and isinstance(ref.get("name"), str):
            return f"{ref['kind']}/{ref['name']}"
    return None


class BadRequestError(ValueError):
    """The request body is not a usable ExtenderArgs."""


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str
    uid: str
    workload_class: str
    class_source: ClassSource
    class_value: str | None = None  # the label/annotation value as found (also when invalid)
    owner: str | None = None  # the controller's "<kind>/<name>" (ownerReferences), e.g. "ReplicaSet/web-5d8f7c9b4"
    milli_cpu: int = 0  # the CPU the scheduler reserves for it (the learned shadow's state reads it)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class Explanation:
    """One answered request: everything needed to say why each node got its verdict or score."""

    verb: Verb
    ts_ms: int
    pod: PodRef
    nodes: list[str]
    cards: list[PackedCard]  # NodeCard._make(card) for each node, as it was when answering
    failed: dict[str, str] = field(default_factory=dict)
    fallback: str | None = None
    duration_ms: float = 0.0

    @property
    def class_index(self) -> int:
        return CLASS_INDEX[self.pod.workload_class]

    def unknown_nodes(self) -> int:
        return sum(1 for card in self.cards if not card[_KNOWN])

    def card(self, i: int) -> NodeCard:
        return NodeCard._make(self.cards[i])

    def render(self, max_nodes: int | None = None) -> dict[str, Any]:
        """JSON-ready: the pod, the class and how it was found, each node's inputs, score and verdict."""
        ci = self.class_index
        shown = len(self.nodes) if max_nodes is None else min(max_nodes, len(self.nodes))
        nodes = {}
        for name, card in zip(self.nodes[:shown], self.cards[:shown], strict=True):
            entry = NodeCard._make(card).explain(ci)
            if self.verb == "filter":
                entry["passed"] = name not in self.failed
            nodes[name] = entry
        return {
            "verb": self.verb,
            "ts_ms": self.ts_ms,
            "duration_ms": round(self.duration_ms, 3),
            "pod": {"namespace": self.pod.namespace, "name": self.pod.name, "uid": self.pod.uid},
            "workload_class": self.pod.workload_class,
            "workload_class_source": self.pod.class_source,
            "workload_class_value": self.pod.class_value,
            "candidates": len(self.nodes),
            "filtered": len(self.failed),
            "fallback": self.fallback,
            "truncated": shown < len(self.nodes),
            "nodes": nodes,
        }


@dataclass(frozen=True, slots=True)
class ParsedArgs:
    pod: PodRef
    names: list[str]
    node_list: dict[str, Any] | None  # the NodeList when the scheduler is not node-cache-capable


def _get(obj: dict[str, Any], name: str) -> Any:
    value = obj.get(name)
    return obj.get(name.lower()) if value is None else value


def pod_class(pod: dict[str, Any], key: str, default: str) -> tuple[str, ClassSource, str | None]:
    """The workload class from the pod's label, else its annotation, else the default."""
    meta = pod.get("metadata") or {}
    for source, where in (("label", "labels"), ("annotation", "annotations")):
        value = (meta.get(where) or {}).get(key)
        if isinstance(value, str):
            if value in CLASS_INDEX:
                return value, source, value  # type: ignore[return-value]
            return default, "invalid", value
    return default, "default", None


class Extender:
    def __init__(
        self,
        store: NodeStateStore,
        *,
        class_key: str,
        default_class: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if default_class not in CLASS_INDEX:
            raise ValueError(f"default class {default_class!r} is not one of {WORKLOAD_CLASSES}")
        self.store = store
        self.class_key = class_key
        self.default_class = default_class
        self.clock = clock
        self.last: dict[Verb, Explanation] = {}

    def parse(self, body: bytes) -> ParsedArgs:
        try:
            args = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BadRequestError(f"ExtenderArgs is not JSON: {exc}") from None
        if not isinstance(args, dict):
            raise BadRequestError("ExtenderArgs must be a JSON object")
        pod = _get(args, "Pod")
        if not isinstance(pod, dict):
            raise BadRequestError("ExtenderArgs.Pod is missing")
        node_list: dict[str, Any] | None = None
        names = _get(args, "NodeNames")
        if names is None:
            node_list = _get(args, "Nodes")
            if not isinstance(node_list, dict):
                raise BadRequestError("ExtenderArgs has neither NodeNames nor Nodes")
            try:
                names = [item["metadata"]["name"] for item in node_list.get("items") or ()]
            except (KeyError, TypeError):
                raise BadRequestError("ExtenderArgs.Nodes.items[].metadata.name is missing") from None
        if not isinstance(names, list):
            raise BadRequestError("ExtenderArgs.NodeNames must be a list of strings")
        meta = pod.get("metadata")
        meta = {} if meta is None else meta
        if not isinstance(meta, dict) or not all(
            isinstance(meta.get(k) or {}, dict) for k in ("labels", "annotations")
        ):
            raise BadRequestError("ExtenderArgs.Pod.metadata (labels, annotations) must be objects")
        cls, source, value = pod_class(pod, self.class_key, self.default_class)
        ref = PodRef(
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name") or meta.get("generateName") or "?"),
            uid=str(meta.get("uid") or ""),
            workload_class=cls,
            class_source=source,
            class_value=value,
            owner=_controller(meta.get("ownerReferences")),
            milli_cpu=pod_requests(pod)[0],
        )
        return ParsedArgs(ref, names, node_list)

    # ------------------------------------------------------------------ verbs

    def filter(self, body: bytes) -> tuple[bytes, Explanation]:
        started = time.perf_counter()
        args = self.parse(body)
        names = args.names
        now_ms = int(self.clock() * 1000)
        try:
            cards, reasons = self.store.verdicts(names, CLASS_INDEX[args.pod.workload_class], now_ms)
        except TypeError:
            raise BadRequestError("ExtenderArgs.NodeNames must be a list of strings") from None
        failed = dict(zip(compress(names, reasons), filter(None, reasons), strict=True))
        fallback = None
        if failed and len(failed) == len(names):
            fallback = (
                f"every one of the {len(names)} candidate nodes is severe for "
                f"{args.pod.workload_class}; returning them all unfiltered (the scheduler's scores decide)"
            )
            failed = {}
        if args.node_list is None:
            passed = list(compress(names, map(not_, reasons))) if failed else names
            result: dict[str, Any] = {"Nodes": None, "NodeNames": passed}
        else:
            items = [i for i in args.node_list.get("items") or () if i["metadata"]["name"] not in failed]
            result = {"Nodes": {**args.node_list, "items": items}, "NodeNames": None}
        result.update({"FailedNodes": failed, "FailedAndUnresolvableNodes": {}, "Error": ""})
        out = orjson.dumps(result)
        explanation = Explanation(
            "filter", now_ms, args.pod, names, cards, failed, fallback, (time.perf_counter() - started) * 1000
        )
        self.last["filter"] = explanation
        return out, explanation

    def prioritize(self, body: bytes) -> tuple[bytes, Explanation]:
        started = time.perf_counter()
        args = self.parse(body)
        now_ms = int(self.clock() * 1000)
        try:
            cards, out = self.store.priorities(args.names, CLASS_INDEX[args.pod.workload_class], now_ms)
        except TypeError:
            raise BadRequestError("ExtenderArgs.NodeNames must be a list of strings") from None
        explanation = Explanation(
            "prioritize", now_ms, args.pod, args.names, cards, duration_ms=(time.perf_counter() - started) * 1000
        )
        self.last["prioritize"] = explanation
        return out, explanation

    # ------------------------------------------------------------------ debug

    def debug_nodes(self, workload_class: str | None = None, node: str | None = None) -> dict[str, Any]:
        """Every node held (or one), with its inputs and its verdict/score for one class or all classes."""
        now_ms = int(self.clock() * 1000)
        classes = [workload_class] if workload_class else list(WORKLOAD_CLASSES)
        names = [node] if node else self.store.nodes()
        out: dict[str, Any] = {}
        for name in names:
            card = self.store.card(name, now_ms)
            out[name] = {c: card.explain(CLASS_INDEX[c]) for c in classes}
        cfg = self.store.cfg
        return {
            "ts_ms": now_ms,
            "nodes_held": len(self.store),
            "config": asdict(cfg),
            "class_key": self.class_key,
            "default_class": self.default_class,
            "nodes": out,
        }
