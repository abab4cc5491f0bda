"""The learned placement policy in the extender (shadow): pure scoring, the pod index, the shadow record, reload."""

from __future__ import annotations

import logging
import random
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from contracts.models import WORKLOAD_CLASSES, RegimeLabelV2, RegimeName
from featurelib.placement import CARD_FILE, TABLE_FILE, PlacementModel
from services.runtime.k8s_quantity import pod_requests
from services.runtime.model_watch import ModelRefusedError, ModelWatcher
from services.scheduler_extender.extender import Extender
from services.scheduler_extender.learned import LearnedScorer, PodIn, decide, learned_scores
from services.scheduler_extender.main import load_placement
from services.scheduler_extender.podindex import NodePods, PodIndex
from services.scheduler_extender.scoring import RegimeIn, ScoringConfig
from services.scheduler_extender.settings import DEFAULT_CLASS_KEY
from services.scheduler_extender.shadow import SHADOW_DECISIONS, Shadow, drain
from services.scheduler_extender.state import NodeStateStore
from simulator.arena.aware import TaskPod
from simulator.arena.kube_default import NodeResources, PodRequest
from simulator.arena.learned import state_key as arena_state_key

GIB = 1 << 30
NOW = 1_800_000_000_000
MEM = "memory_bound"


def _label(regime: str, conf: float, ts_ms: int = NOW, **pred: float) -> RegimeIn:
    return RegimeIn(ts_ms, regime, conf, tuple(pred.items()))


def _node(name: str, cpu: str = "16", memory: str = "64Gi") -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}}


def _pod(
    name: str,
    node: str | None,
    cls: str | None = MEM,
    cpu: str = "500m",
    memory: str = "1Gi",
    phase: str = "Pending",
    **spec: Any,
) -> dict[str, Any]:
    labels = {DEFAULT_CLASS_KEY: cls} if cls else {}
    body: dict[str, Any] = {"containers": [{"name": "a", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    if node:
        body["nodeName"] = node
    body.update(spec)
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels}, "spec": body, "status": {"phase": phase}}


def test_the_extender_builds_the_keys_the_arena_trains_on() -> None:
    rng = random.Random(3)
    for _ in range(200):
        cls = rng.choice(WORKLOAD_CLASSES)
        residents = [PodRequest(rng.randrange(0, 4000), rng.randrange(0, 16 * GIB)) for _ in range(rng.randrange(4))]
        node = NodeResources.with_pods(16000, 64 * GIB, residents)
        classes = [rng.randrange(4) for _ in residents]
        label = rng.choice(
            [None, _label("unknown", 0.0), RegimeIn(NOW, "llc", rng.random(), ((cls, 1 + rng.random()),))]
        )
        pod = TaskPod(rng.randrange(0, 4000), GIB, cls)
        ctx = NodePods(16000, 64 * GIB, node.requested_milli_cpu, node.requested_memory, node.pods, tuple(classes))
        arena = arena_state_key(pod, node, label, np.asarray(classes, dtype=np.int64), "extender+pods")
        model = PlacementModel("extender+pods", {arena: 1.5})
        # the extender's path (cache included) finds the arena's key in the table
        (q,) = LearnedScorer(120_000).scores(
            PodIn(cls, pod.milli_cpu), ["n"], {"n": tuple(label) if label else None}.get, {"n": ctx}, model, NOW
        )
        assert q == 1.5, arena


def test_learned_scores_hand_built() -> None:
    model = PlacementModel(
        "extender+pods", {"2|0|absent|-|-|e|0|0000": 1.0, "2|0|llc|2|1|0|0|0010": -2.0, "2|1|absent|-|-|e|0|0000": 5.0}
    )
    nodes = {
        "empty": NodePods(16000, 64 * GIB),
        "busy": NodePods(16000, 64 * GIB, 1000, GIB, 1, (2,)),
        "small": NodePods(2000, 8 * GIB),
    }
    llc = _label("llc", 0.85, memory_bound=1.2)
    q = learned_scores(PodIn(MEM, 500), [("empty", None), ("busy", llc), ("small", None), ("gone", llc)], nodes, model)
    # small: 500m of 2 cores is a large request (bin 1); gone: allocatable unknown → no Q
    assert q == [1.0, -2.0, 5.0, None]
    assert learned_scores(PodIn(MEM, 500), [("busy", None)], nodes, model) == [model.default]  # unseen: table mean
    assert model.default == pytest.approx(4.0 / 3)


class EveryKey(dict[str, float]):
    """A Q-table holding every key, each with its own value (so any wrong key shows)."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> float:
        return zlib.crc32(key.encode()) / 2**32

    def get(self, key: str, default: object = None) -> float:  # type: ignore[override]
        return self[key]


def test_cached_scorer_matches_the_reference_as_state_changes() -> None:
    rng = random.Random(5)
    names = [f"n{i}" for i in range(30)]
    model = PlacementModel("extender+pods", EveryKey())
    scorer = LearnedScorer(staleness_ms=120_000)
    ctxs: dict[str, NodePods] = {}
    regimes: dict[str, tuple[Any, ...] | None] = {}
    for step in range(60):
        for name in rng.sample(names, 5):  # some nodes change pods and labels (the listeners invalidate them)
            alloc = rng.choice([16000, 2000])
            ctxs[name] = NodePods(
                alloc,
                64 * GIB,
                rng.randrange(alloc),
                rng.randrange(64 * GIB),
                rng.randrange(9),
                tuple(rng.randrange(4) for _ in range(rng.randrange(3))),
            )
            ts = NOW + step * 5_000 - rng.randrange(150_000)
            regimes[name] = rng.choice([None, tuple(_label("membw", rng.random(), ts, memory_bound=1 + rng.random()))])
            scorer.invalidate(name)
        gone = rng.choice(names)
        ctxs.pop(gone, None)
        scorer.invalidate(gone)
        now = NOW + step * 5_000  # held labels turn stale as time goes on
        if step % 20 == 19:  # a hot reload: another table
            model = PlacementModel("extender+pods", EveryKey())
        pod = PodIn(rng.choice(WORKLOAD_CLASSES), rng.choice([100, 1000, 4000]))
        fresh = [
            RegimeIn._make(r) if (r := regimes.get(n)) is not None and now - r[0] <= 120_000 else None for n in names
        ]
        expected = learned_scores(pod, list(zip(names, fresh, strict=True)), ctxs, model)
        if step % 2:  # every other step the changed nodes are rebuilt in slices (2 at a time)
            steps = scorer.steps(pod, names, scorer.ids.of(names), regimes.get, ctxs, model, now, slice_fills=2)
            sliced = drain(steps)
            assert [None if np.isnan(v) else float(v) for v in sliced] == expected, step
        got = scorer.scores(pod, names, regimes.get, ctxs, model, now)
        assert [None if np.isnan(v) else float(v) for v in got] == expected, step
    assert len(scorer.ids) == len(names)
    scorer.reset()  # every node's key parts forgotten: rebuilt to the same numbers
    assert np.array_equal(scorer.scores(pod, names, regimes.get, ctxs, model, now), got, equal_nan=True)


def test_decide_agree_disagree_ties_and_nothing_known() -> None:
    names = ["a", "b", "c"]
    d = decide(names, [9, 5, 9], [0.1, 0.9, None])
    assert d is not None and not d.agree
    assert (d.heuristic_node, d.heuristic_score, d.heuristic_q) == ("a", 9, 0.1)
    assert (d.learned_node, d.learned_q, d.learned_score, d.scored) == ("b", 0.9, 5, 2)
    # the heuristic's tie set (a, c) meets the learned top (c): agree on c
    d = decide(names, [9, 5, 9], [0.1, 0.2, 0.5])
    assert d is not None and d.agree and d.heuristic_node == d.learned_node == "c"
    # every Q equal (all unseen): the learned policy is indifferent, so it agrees with the heuristic
    d = decide(names, [3, 7, 5], [-1.0, -1.0, -1.0])
    assert d is not None and d.agree and d.learned_node == "b"
    assert decide(names, [1, 2, 3], [None, None, None]) is None


def test_pod_index_sums_requests_and_follows_events() -> None:
    index = PodIndex(class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound")
    index.replace_nodes([_node("n1"), _node("n2", cpu="8", memory="32Gi"), {"metadata": {"name": "bad"}}])
    assert index.node("n1") == NodePods(16000, 64 * GIB) and index.node("bad") is None
    index.replace_pods(
        [
            _pod("p1", "n1"),
            _pod("p2", "n1", cls="llc_sensitive", cpu="1"),
            _pod("nolabel", "n2", cls=None),
            _pod("pending", None),
        ]
    )
    n1 = index.node("n1")
    assert n1 is not None and (n1.requested_milli_cpu, n1.requested_memory, n1.pods) == (1500, 2 * GIB, 2)
    assert sorted(n1.classes) == [1, 2]
    assert index.node("n2") == NodePods(8000, 32 * GIB, 500, GIB, 1, (0,))  # no label: the default class
    index.apply_pod("MODIFIED", _pod("p1", "n1", phase="Succeeded"))  # finished: frees its requests
    index.apply_pod("DELETED", _pod("p2", "n1"))
    assert index.node("n1") == NodePods(16000, 64 * GIB)
    index.apply_pod("ADDED", _pod("p3", "n2"))
    before = index.node("n2")
    index.apply_pod("MODIFIED", _pod("p3", "n2"))  # no change: same tuple (the scorer's cache stays valid)
    assert index.node("n2") is before
    index.apply_node("DELETED", _node("n2"))
    assert index.node("n2") is None and index.pods == 2
    # init containers: the larger of their max and the containers' sum; plus the pod overhead
    init = [{"name": "i", "resources": {"requests": {"cpu": "2", "memory": "100Mi"}}}]
    assert pod_requests(_pod("x", "n1", cpu="500m", initContainers=init, overhead={"cpu": "250m"})) == (2250, GIB)
    assert pod_requests({"spec": "garbage"}) == (0, 0)


def _store_with(nodes: dict[str, RegimeLabelV2 | None]) -> NodeStateStore:
    store = NodeStateStore(ScoringConfig())
    for label in nodes.values():
        if label is not None:
            store.apply(label, NOW)
    return store


def _regime(node: str, interference: dict[str, float], regime: RegimeName = "membw") -> RegimeLabelV2:
    return RegimeLabelV2(
        node=node,
        ts_ms=NOW,
        regime=regime,
        confidence=0.9,
        raw_regime=regime,
        changed=False,
        interference=interference,
        model_version="m",
        input_ts_ms=NOW,
    )


def _args(cls: str, names: list[str]) -> bytes:
    pod = {
        "metadata": {"name": "web-0", "namespace": "ns", "labels": {DEFAULT_CLASS_KEY: cls}},
        "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
    }
    return orjson.dumps({"Pod": pod, "NodeNames": names})


def test_shadow_records_disagreements_and_rate_limits_the_log(caplog: pytest.LogCaptureFixture) -> None:
    # "hot" has memory-bandwidth contention: the heuristic prefers "calm"; the table prefers "hot"
    store = _store_with({"hot": _regime("hot", {MEM: 1.4}), "calm": _regime("calm", {MEM: 1.0}, "none")})
    index = PodIndex(class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound")
    index.replace_nodes([_node("hot"), _node("calm")])
    model = PlacementModel("extender+pods", {"2|0|membw|2|2|e|0|0000": 1.0, "2|0|none|2|0|e|0|0000": -1.0})
    current: list[PlacementModel | None] = [model]
    clock = [0.0]
    shadow = Shadow(store, index, lambda: current[0], staleness_ms=120_000, log_per_min=2, clock=lambda: clock[0])
    extender = Extender(store, class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound", clock=lambda: NOW / 1000)
    before = SHADOW_DECISIONS.labels("false")._value.get()
    out, ex = extender.prioritize(_args(MEM, ["hot", "calm"]))
    assert orjson.loads(out)[1]["Score"] > orjson.loads(out)[0]["Score"]  # the answer is the heuristic's
    caplog.set_level(logging.INFO, logger="services.scheduler_extender.shadow")
    d = shadow.observe(ex, "ab" * 16)
    assert d is not None and not d.agree and (d.heuristic_node, d.learned_node) == ("calm", "hot")
    assert SHADOW_DECISIONS.labels("false")._value.get() == before + 1
    assert shadow.recent[-1]["trace_id"] == "ab" * 16 and shadow.recent[-1]["pod"] == "ns/web-0"
    line = next(r.getMessage() for r in caplog.records if "disagreement" in r.getMessage())
    assert "pod=ns/web-0" in line and "heuristic=calm" in line and "learned=hot (q 1.0000" in line
    assert f"trace_id={'ab' * 16}" in line
    for _ in range(4):
        shadow.observe(ex)
    assert sum("disagreement" in r.getMessage() for r in caplog.records) == 2 and shadow.suppressed == 3
    clock[0] = 61.0  # a new minute: logging resumes
    shadow.observe(ex)
    assert sum("disagreement pod" in r.getMessage() for r in caplog.records) == 3
    # llc_sensitive: both tables' keys unseen → indifferent → agrees with the heuristic
    _, ex2 = extender.prioritize(_args("llc_sensitive", ["hot", "calm"]))
    d2 = shadow.observe(ex2)
    assert d2 is not None and d2.agree
    assert shadow.counts == {"true": 1, "false": 6, "skipped": 0}
    current[0] = None
    assert shadow.observe(ex) is None and shadow.counts["skipped"] == 1
    current[0] = model
    _, unknown_nodes = extender.prioritize(_args(MEM, ["x", "y"]))  # no allocatable known: nothing to compare
    assert shadow.observe(unknown_nodes) is None and shadow.counts["skipped"] == 2


def _version(root: Path, name: str, values: dict[str, float]) -> None:
    (root / name).mkdir(parents=True)
    (root / name / TABLE_FILE).write_bytes(PlacementModel("extender+pods", values).to_json())
    (root / name / CARD_FILE).write_bytes(orjson.dumps({"model": "placement", "version": name}))


def test_placement_model_hot_reload(tmp_path: Path) -> None:
    _version(tmp_path, "v1", {"k": 1.0})
    _version(tmp_path, "v2", {"k": 2.0})
    (tmp_path / "CURRENT").write_text("v1\n")
    models: ModelWatcher[PlacementModel] = ModelWatcher("placement-test", tmp_path, load_placement)
    assert models.current.q("k") == 1.0 and not models.check()
    (tmp_path / "CURRENT").write_text("v2\n")
    assert models.check() and models.current.q("k") == 2.0 and models.version_dir.name == "v2"
    (tmp_path / "v3").mkdir()
    (tmp_path / "v3" / CARD_FILE).write_text("{}")
    (tmp_path / "v3" / TABLE_FILE).write_text("not json")
    (tmp_path / "CURRENT").write_text("v3\n")
    assert not models.check() and models.version_dir.name == "v2"  # refused: v2 keeps serving
    with pytest.raises(ModelRefusedError, match="placement Q-table"):
        load_placement(tmp_path / "v3")


def test_the_shipped_placement_model_loads() -> None:
    root = Path(__file__).resolve().parents[2] / "models" / "placement"
    models: ModelWatcher[PlacementModel] = ModelWatcher("placement-shipped", root, load_placement)
    assert models.current.features == "extender+pods" and len(models.current.values) > 100
