"""The co-runner term in the live extender: pod events re-score a node's pre-encoded prioritize answer.

Hand-computed with ``CORUNNER_SLOWDOWN`` (rows = the pod slowed: cpu, llc, memory, frontend), weight 0.5,
max_slowdown 1.5, latency-sensitive = llc and frontend. A node with no inputs has penalty 0.5 for every class
(the unknown card); a calm node (regime ``none``, slowdown 1, risk and anomaly unknown) 0.2.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from services.scheduler_extender.extender import Extender
from services.scheduler_extender.podindex import PodIndex
from services.scheduler_extender.residents import follow_pods
from services.scheduler_extender.scoring import CLASS_INDEX, ScoringConfig, placement_score
from services.scheduler_extender.settings import DEFAULT_CLASS_KEY, ExtenderSettings
from services.scheduler_extender.state import NodeStateStore
from tests.unit.test_extender_scoring import CALM, NOW, regime

CPU, LLC, MEM, FE = (CLASS_INDEX[c] for c in ("cpu_bound", "llc_sensitive", "memory_bound", "frontend_bound"))
ON = ScoringConfig(weight_corunner=0.5)


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "16", "memory": "64Gi"}}}


def pod(name: str, on: str, workload_class: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "t", "name": name, "labels": {DEFAULT_CLASS_KEY: workload_class}},
        "spec": {"nodeName": on, "containers": [{"resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Running"},
    }


def wired(cfg: ScoringConfig) -> tuple[Extender, PodIndex]:
    store = NodeStateStore(cfg)
    index = PodIndex(class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound")
    follow_pods(store, index, clock=lambda: NOW / 1000)
    return Extender(store, class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound", clock=lambda: NOW / 1000), index


def answer(ext: Extender, workload_class: str, *names: str) -> bytes:
    body = {"Pod": {"metadata": {"name": "p", "labels": {DEFAULT_CLASS_KEY: workload_class}}}, "NodeNames": names}
    return ext.prioritize(orjson.dumps(body))[0]


def scores(ext: Extender, workload_class: str, *names: str) -> dict[str, int]:
    return {e["Host"]: e["Score"] for e in orjson.loads(answer(ext, workload_class, *names))}


def test_a_bound_pod_changes_the_nodes_scores_by_the_hand_computed_amount() -> None:
    ext, index = wired(ON)
    ext.store.apply(regime(CALM, name="none", node="calm"), NOW)
    for name in ("calm", "bare"):
        index.apply_node("ADDED", node(name))
    # known and empty: p_co 0, penalty halved: calm 0.5*0.2 = 0.1 -> 9; no inputs 0.5*0.5 = 0.25 -> 8 (7.5 up)
    for cls in CLASS_INDEX:
        assert scores(ext, cls, "calm", "bare") == {"calm": 9, "bare": 8}
    index.apply_pod("ADDED", pod("fe-1", "calm", "frontend_bound"))
    index.apply_pod("ADDED", pod("fe-2", "bare", "frontend_bound"))
    # frontend pod beside a frontend pod: its own 0.417 + the resident's 0.417 -> p_co 1;
    #   calm 0.1 + 0.5 = 0.6 -> 4, bare 0.25 + 0.5 = 0.75 -> 3 (2.5 up)
    assert scores(ext, "frontend_bound", "calm", "bare") == {"calm": 4, "bare": 3}
    # cpu pod: only the frontend resident's harm 1.153 - 1 -> p_co 0.306: calm 0.253 -> 7, bare 0.403 -> 6
    assert scores(ext, "cpu_bound", "calm", "bare") == {"calm": 7, "bare": 6}
    # memory pod: 1.062 - 1 -> p_co 0.124: calm 0.162 -> 8, bare 0.312 -> 7
    assert scores(ext, "memory_bound", "calm", "bare") == {"calm": 8, "bare": 7}
    # llc pod (sensitive): own 1.048 - 1, the resident's 1.074 - 1 -> p_co 0.244: calm 0.222 -> 8, bare 0.372 -> 6
    assert scores(ext, "llc_sensitive", "calm", "bare") == {"calm": 8, "bare": 6}
    # the store's answer is placement_score on the card without the term, as the offline arena scores
    card = ext.store.card("calm", NOW)
    assert card.residents == (FE,) and card.explain(FE)["corunner"] == {"penalty": 1.0,
                                                                          "resident_classes": ["frontend_bound"]}
    bare = NodeStateStore(ON)
    bare.apply(regime(CALM, name="none", node="calm"), NOW)
    for ci in range(4):
        assert card.scores[ci] == placement_score(bare.card("calm", NOW), ci, [FE], ON)
    # the learned shadow's dense score rows follow the same numbers
    ids = ext.store.node_ids.of(["calm", "bare"])
    assert ext.store.heuristic_scores(ids, FE, 0)[0].tolist() == [4, 3]


def test_a_deleted_or_finished_pod_restores_the_score() -> None:
    ext, index = wired(ON)
    index.apply_node("ADDED", node("n1"))
    before = answer(ext, "frontend_bound", "n1")
    index.apply_pod("ADDED", pod("a", "n1", "llc_sensitive"))
    changed = answer(ext, "frontend_bound", "n1")
    assert changed != before
    done = pod("a", "n1", "llc_sensitive")
    done["status"]["phase"] = "Succeeded"
    index.apply_pod("MODIFIED", done)
    assert answer(ext, "frontend_bound", "n1") == before
    index.apply_pod("ADDED", pod("b", "n1", "memory_bound"))
    assert answer(ext, "frontend_bound", "n1") != before
    index.apply_pod("DELETED", pod("b", "n1", "memory_bound"))
    assert answer(ext, "frontend_bound", "n1") == before


def test_a_node_the_pod_index_does_not_know_scores_as_without_the_term() -> None:
    plain = Extender(NodeStateStore(ScoringConfig()), class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound")
    ext, index = wired(ON)
    for e in (plain, ext):
        e.store.apply(regime(CALM, name="none", node="calm"), NOW)
    # a pod bound to a node whose allocatable the index has not seen: no view, no term
    index.apply_pod("ADDED", pod("fe", "calm", "frontend_bound"))
    assert ext.store.residents("calm") is None
    for cls in CLASS_INDEX:
        assert answer(ext, cls, "calm", "ghost") == answer(plain, cls, "calm", "ghost")
    index.apply_node("ADDED", node("calm"))
    assert ext.store.residents("calm") == (FE,)
    assert scores(ext, "frontend_bound", "calm") == {"calm": 4}
    index.apply_node("DELETED", node("calm"))  # the node leaves the index: back to the card alone
    assert answer(ext, "frontend_bound", "calm") == answer(plain, "frontend_bound", "calm")


def test_weight_zero_answers_byte_for_byte_as_without_the_pod_index() -> None:
    plain = Extender(NodeStateStore(ScoringConfig()), class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound")
    ext, index = wired(ScoringConfig())
    for e in (plain, ext):
        e.store.apply(regime(CALM, name="none", node="calm"), NOW)
    index.apply_node("ADDED", node("calm"))
    index.apply_node("ADDED", node("bare"))
    index.apply_pod("ADDED", pod("fe", "calm", "frontend_bound"))
    index.apply_pod("ADDED", pod("fe2", "bare", "frontend_bound"))
    for cls in CLASS_INDEX:
        assert answer(ext, cls, "calm", "bare") == answer(plain, cls, "calm", "bare")
    assert ext.store.residents("calm") is None


def test_inputs_arriving_and_expiring_keep_the_term() -> None:
    ext, index = wired(ON)
    index.apply_node("ADDED", node("n1"))
    index.apply_pod("ADDED", pod("fe", "n1", "frontend_bound"))
    assert scores(ext, "frontend_bound", "n1") == {"n1": 3}  # no inputs: 0.25 + 0.5 -> 3
    ext.store.apply(regime(CALM, name="none", node="n1"), NOW)
    assert scores(ext, "frontend_bound", "n1") == {"n1": 4}  # calm regime: 0.1 + 0.5 -> 4
    later = NOW + 121_000  # the regime turns stale: the unknown card again, with the term
    assert ext.store.refresh_expired(later) == 1
    assert ext.store.card("n1", later).scores[FE] == 3


def test_renumbering_node_ids_keeps_a_resident_only_nodes_row() -> None:
    ext, index = wired(ON)
    index.apply_node("ADDED", node("n1"))
    index.apply_pod("ADDED", pod("fe", "n1", "frontend_bound"))
    for k in range(30_000):  # names seen once and gone (unknown slots, then dropped)
        ext.store.node_ids.get(f"gone-{k}")
    assert ext.store.compact_ids()
    ids = ext.store.node_ids.of(["n1"])
    assert ext.store.heuristic_scores(ids, FE, 0)[0].tolist() == [3]


@pytest.mark.parametrize("value", ["1.5", "-0.1"])
def test_the_setting_is_range_checked(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("EXTENDER_WEIGHT_CORUNNER", value)
    with pytest.raises(ValueError, match="weight_corunner"):
        ExtenderSettings()


def test_the_setting_is_accepted_now_that_prioritize_applies_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXTENDER_WEIGHT_CORUNNER", "0.5")
    assert ExtenderSettings().weight_corunner == 0.5
