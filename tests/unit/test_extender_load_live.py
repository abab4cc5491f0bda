"""The load term in the live extender: podpressure.v1 estimates joined to the pods bound to each node.

Hand-computed with the interference model (``simulator.workloads``: excess = (p − 0.25) / 0.75 above 0; an
llc-sensitive pod's slowdown = 1 + 1.2 · llc excess + 0.4 · membw excess + …), weight 0.5, max_slowdown 1.5,
latency-sensitive = llc and frontend. A node with no regime input has card penalty 0.5 for every class.

* a memory-bound resident at its class's guess (0.3125, 0.6125, 0.1125, 0.0375) slows an arriving
  llc-sensitive pod to 1 + 1.2 · 0.0833 + 0.4 · 0.4833 = 1.293 (over the 1.25 SLO): harm 1.293, penalty
  capped at 1, score 10 · (1 − (0.25 + 0.5)) = 2.5 → 3;
* the same resident measured quiet (0.1 everywhere) slows nobody: penalty 0.25 → 7.5 → 8.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from contracts.models import PodPressure
from services.scheduler_extender.corunner import load_harm
from services.scheduler_extender.extender import Extender
from services.scheduler_extender.main import scoring_config
from services.scheduler_extender.podindex import PodIndex
from services.scheduler_extender.pressures import PressureBook, node_residents
from services.scheduler_extender.residents import LoadFollower
from services.scheduler_extender.scoring import (
    CLASS_INDEX,
    NodeInputs,
    ScoringConfig,
    evaluate,
    load_penalties,
    score_with_penalty,
    with_load,
)
from services.scheduler_extender.settings import DEFAULT_CLASS_KEY, ExtenderSettings
from services.scheduler_extender.state import NodeStateStore
from simulator.workloads import CLASS_PRESSURE_GUESS
from tests.unit.test_extender_load_term import MILD
from tests.unit.test_extender_scoring import NOW

CPU, LLC, MEM, FE = (CLASS_INDEX[c] for c in ("cpu_bound", "llc_sensitive", "memory_bound", "frontend_bound"))
ON = ScoringConfig(weight_corunner=0.5)
QUIET = (0.1, 0.1, 0.1, 0.1)
HOG = (0.4, 0.9, 0.1, 0.05)
SENSITIVE = frozenset({LLC, FE})


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "16", "memory": "64Gi"}}}


def pod(name: str, on: str, workload_class: str, uid: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "t", "name": name, "uid": uid, "labels": {DEFAULT_CLASS_KEY: workload_class}},
        "spec": {"nodeName": on, "containers": [{"resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Running"},
    }


def estimate(uid: str, on: str, pressure: tuple[float, ...] | None, ts_ms: int = NOW) -> PodPressure:
    common: dict[str, Any] = {"node": on, "pod_uid": uid, "cgroup": f"kubepods/pod{uid}", "ts_ms": ts_ms,
                              "window_ms": 10_000, "model_version": "t", "input_ts_ms": ts_ms}
    if pressure is None:
        return PodPressure(status="unknown", reason="idle", **common)
    llc, membw, core, frontend = pressure
    return PodPressure(status="ok", llc=llc, membw=membw, core=core, frontend=frontend, **common)


class Clock:
    def __init__(self) -> None:
        self.s = NOW / 1000

    def __call__(self) -> float:
        return self.s


def wired(clock: Clock, max_age_ms: int = 60_000) -> tuple[Extender, PodIndex, LoadFollower]:
    store = NodeStateStore(ON)
    index = PodIndex(class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound")
    follower = LoadFollower(store, index, PressureBook(max_age_ms), clock=clock)
    ext = Extender(store, class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound", clock=clock)
    return ext, index, follower


def scores(ext: Extender, workload_class: str, *names: str) -> dict[str, int]:
    body = {"Pod": {"metadata": {"name": "p", "labels": {DEFAULT_CLASS_KEY: workload_class}}}, "NodeNames": names}
    return {e["Host"]: e["Score"] for e in orjson.loads(ext.prioritize(orjson.dumps(body))[0])}


def test_book_keeps_the_newest_usable_estimate_per_pod() -> None:
    book = PressureBook(max_age_ms=30_000, keep=4)
    assert book.apply(estimate("a", "n1", HOG, NOW))
    assert book.estimate("a", "n1", NOW) == HOG
    assert not book.apply(estimate("a", "n1", QUIET, NOW - 1))  # older than held: refused
    assert book.estimate("a", "n1", NOW) == HOG
    assert book.estimate("a", "n2", NOW) is None  # another node's figure (the pod moved)
    assert book.estimate("a", "n1", NOW + 30_001) is None  # too old
    assert book.apply(estimate("a", "n1", None, NOW + 10))  # unknown: the estimate is dropped
    assert book.estimate("a", "n1", NOW + 10) is None
    assert book.apply(estimate("b", "n1", (0.123, 0.456, 0.004, 0.996)))
    assert book.estimate("b", "n1", NOW) == (0.12, 0.46, 0.0, 1.0)  # rounded to 0.01
    for uid in "cde":
        book.apply(estimate(uid, "n1", QUIET))
    assert len(book) == 3 and book.estimate("a", "n1", NOW + 10) is None  # bounded: the oldest half went
    with pytest.raises(ValueError):
        PressureBook(max_age_ms=0)


def test_residents_take_the_estimate_or_the_class_guess() -> None:
    index = PodIndex(class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound")
    index.apply_node("ADDED", node("n"))
    index.apply_pod("ADDED", pod("m", "n", "memory_bound", "u-m"))
    index.apply_pod("ADDED", pod("f", "n", "frontend_bound", "u-f"))
    book = PressureBook(60_000)
    book.apply(estimate("u-f", "n", QUIET))
    got = node_residents(index.entries("n"), "n", book, NOW, SENSITIVE)
    assert got == ((MEM, CLASS_PRESSURE_GUESS[MEM], False), (FE, QUIET, True))
    assert [e.uid for e in index.entries("n")] == ["u-m", "u-f"]
    index.apply_pod("DELETED", pod("m", "n", "memory_bound", "u-m"))
    assert [e.uid for e in index.entries("n")] == ["u-f"] and index.entries("gone") == ()


def test_with_load_answers_what_the_offline_load_term_scores() -> None:
    card = evaluate(NodeInputs(), ON, NOW)
    residents = ((MEM, HOG, False), (LLC, QUIET, True), (FE, (0.3, 0.3, 0.6, 0.7), True))
    loaded = with_load(card, residents, ON)
    for ci in range(4):
        # the offline orchestrator's node_score (simulator/arena/orchestrator.py) for a pod at its class guess
        harm = load_harm(ci, CLASS_PRESSURE_GUESS[ci], ci in SENSITIVE, residents)
        assert loaded.scores[ci] == score_with_penalty(card, ci, harm / (ON.max_slowdown - 1.0), ON)
    assert loaded.residents == (LLC, MEM, FE) and loaded.corunner == load_penalties(residents, ON)
    assert loaded.summaries[LLC].startswith(f"score={loaded.scores[LLC]} load=1.00 ")
    assert with_load(card, None, ON) is card and with_load(card, residents, ScoringConfig()) is card


def test_estimates_re_score_the_node_at_the_next_recheck() -> None:
    clock = Clock()
    ext, index, follower = wired(clock)
    for name in ("n", "empty"):
        index.apply_node("ADDED", node(name))
    index.apply_pod("ADDED", pod("m", "n", "memory_bound", "u-m"))
    # a bound pod counts at once, at its class's guess: it pushes an llc pod to 1.293 -> 3 (module docstring);
    # cpu pods are batch
    assert scores(ext, "llc_sensitive", "n", "empty") == {"n": 3, "empty": 8}
    assert scores(ext, "cpu_bound", "n", "empty") == {"n": 8, "empty": 8}
    assert ext.store.loads("n") == ((MEM, CLASS_PRESSURE_GUESS[MEM], False),)
    # measured quiet: nobody is slowed any more, from the next re-check on
    assert follower.estimate(estimate("u-m", "n", QUIET))
    assert scores(ext, "llc_sensitive", "n", "empty") == {"n": 3, "empty": 8}
    assert follower.recheck() == 1
    assert scores(ext, "llc_sensitive", "n", "empty") == {"n": 8, "empty": 8}
    # a record for a pod the index does not know changes no node; an older one is refused
    assert follower.estimate(estimate("u-x", "n", HOG)) and follower.recheck() == 0
    assert not follower.estimate(estimate("u-m", "n", HOG, NOW - 5_000))
    # measured as a hog: the llc pod would see 1.587 (re-checked in slices, as the service's sweeper does)
    assert follower.estimate(estimate("u-m", "n", HOG, NOW + 1_000))
    assert asyncio.run(follower.recheck_sliced(slice_nodes=1)) == 1
    assert scores(ext, "llc_sensitive", "n", "empty") == {"n": 3, "empty": 8}
    # the stage goes quiet: after the estimate's age the re-check falls back to the class guess
    clock.s += 30
    assert follower.recheck() == 0
    clock.s += 32  # 61 s after the estimate's window ended
    assert follower.recheck() == 1 and ext.store.loads("n") == ((MEM, CLASS_PRESSURE_GUESS[MEM], False),)
    # the pod leaves: the node is empty again; the node goes: it scores as without the term (the unknown card)
    index.apply_pod("DELETED", pod("m", "n", "memory_bound", "u-m"))
    assert ext.store.loads("n") == () and scores(ext, "llc_sensitive", "n") == {"n": 8}
    index.apply_node("DELETED", node("n"))
    assert ext.store.loads("n") is None and scores(ext, "llc_sensitive", "n") == {"n": 5}


def test_load_term_needs_the_corunner_weight() -> None:
    with pytest.raises(ValueError, match="EXTENDER_LOAD_TERM needs EXTENDER_WEIGHT_CORUNNER"):
        ExtenderSettings(load_term=True)
    assert ExtenderSettings(load_term=True, weight_corunner=0.5).pressure_max_age_s == 60.0


def test_guard_band_setting_reaches_the_scoring_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXTENDER_CORUNNER_SLO_SLOWDOWN", "1.2")
    band = scoring_config(ExtenderSettings())
    assert band.corunner_slo_slowdown == 1.2
    # MILD slows an llc pod to 1.22: a crossing at 1.2, none at 1.25
    residents = [(MEM, MILD, False)]
    at_band, at_slo = load_penalties(residents, band), load_penalties(residents, ScoringConfig())
    assert at_band[LLC] > at_slo[LLC] and at_band[CPU] == at_slo[CPU]  # only a latency-sensitive class crosses
    monkeypatch.setenv("EXTENDER_CORUNNER_SLO_SLOWDOWN", "1")
    with pytest.raises(ValueError, match="corunner_slo_slowdown"):
        ExtenderSettings()
