"""The learned shadow runs in slices behind the answers: answers first, one call waiting at most, exact records."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from contracts.models import RegimeLabelV2
from featurelib.placement import PlacementModel
from services.scheduler_extender.extender import Explanation, Extender
from services.scheduler_extender.podindex import PodIndex
from services.scheduler_extender.scoring import ScoringConfig
from services.scheduler_extender.settings import DEFAULT_CLASS_KEY
from services.scheduler_extender.shadow import SHADOW_SKIPPED, Shadow
from services.scheduler_extender.state import SLOT_ID, NodeStateStore
from tests.conftest import wait_until

NOW = 1_800_000_000_000
MEM = "memory_bound"
NODES = [f"n{i:02d}" for i in range(40)]


def _regime(node: str, slowdown: float, regime: str = "membw") -> RegimeLabelV2:
    return RegimeLabelV2.model_validate(
        {
            "node": node,
            "ts_ms": NOW,
            "regime": regime,
            "confidence": 0.9,
            "raw_regime": regime,
            "changed": False,
            "interference": {MEM: slowdown},
            "model_version": "m",
            "input_ts_ms": NOW,
        }
    )


def _args(names: list[str]) -> bytes:
    pod = {
        "metadata": {"name": "web-0", "namespace": "ns", "labels": {DEFAULT_CLASS_KEY: MEM}},
        "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
    }
    return orjson.dumps({"Pod": pod, "NodeNames": names})


class Setup:
    """40 nodes (n00 calm, the rest more and more contended); a table preferring n39 (the most); slices of 4."""

    def __init__(self, seen_before: int = 0, **shadow: Any) -> None:
        self.store = NodeStateStore(ScoringConfig())
        for i in range(seen_before):  # names given ids before these nodes' (nodes gone since)
            self.store.node_ids.get(f"gone-{i}")
        for i, node in enumerate(NODES):
            slowdown = 1.4 if i == 39 else 1.0 + i / 200  # only n39 over the SLO (slowdown bin 2)
            self.store.apply(_regime(node, slowdown, "none" if i == 0 else "membw"), NOW)
        self.index = PodIndex(class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound")
        capacity = {"cpu": "16", "memory": "64Gi"}
        self.index.replace_nodes([{"metadata": {"name": n}, "status": {"allocatable": capacity}} for n in NODES])
        # n39's state is the table's favourite, n00's its worst; every other state is unseen (the mean)
        self.model = PlacementModel("extender+pods", {"2|0|membw|2|2|e|0|0000": 5.0, "2|0|none|2|0|e|0|0000": -1.0})
        self.shadow = Shadow(
            self.store, self.index, lambda: self.model, staleness_ms=120_000, slice_nodes=4, slice_fills=3, **shadow
        )
        self.extender = Extender(self.store, class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound", clock=self.clock)

    @staticmethod
    def clock() -> float:
        return NOW / 1000

    def answer(self, names: list[str] = NODES) -> Explanation:
        return self.extender.prioritize(_args(names))[1]


async def test_a_call_arriving_during_shadow_work_is_answered_before_the_shadow_finishes() -> None:
    s = Setup()
    s.shadow.submit(s.answer())
    await asyncio.sleep(0)  # the worker starts: one slice, then it gives the loop a turn
    assert s.shadow.slices == 1 and not s.shadow.idle
    # a scheduler call comes in: while it is answered the shadow does not move
    s.shadow.gate.enter()
    for _ in range(5):
        await asyncio.sleep(0)
    assert s.shadow.slices == 1
    out, _ = s.extender.prioritize(_args(NODES))
    s.shadow.gate.leave()
    assert len(orjson.loads(out)) == len(NODES) and not s.shadow.idle  # answered with most shadow work still to do
    await wait_until(lambda: s.shadow.idle, what="the shadow to finish")
    # 40 candidates in slices of 4 (10 id slices, 10 scoring slices, cold rebuilds 3 at a time)
    assert s.shadow.slices > 20
    (recent,) = s.shadow.recent
    assert (recent["heuristic_node"], recent["learned_node"], recent["agree"]) == ("n00", "n39", False)


async def test_a_newer_call_replaces_the_one_waiting_and_is_counted_busy() -> None:
    s = Setup()
    before = SHADOW_SKIPPED.labels("busy")._value.get()
    first, second, third = s.answer(NODES), s.answer(NODES[:20]), s.answer(NODES[:30])
    s.shadow.submit(first)
    await asyncio.sleep(0)  # the worker takes `first`
    s.shadow.submit(second)  # waits
    s.shadow.submit(third)  # replaces `second`
    assert SHADOW_SKIPPED.labels("busy")._value.get() == before + 1
    await wait_until(lambda: s.shadow.idle, what="the shadow to finish")
    assert [r["candidates"] for r in s.shadow.recent] == [40, 30]
    # without n39 the table only knows it would avoid n00: it agrees with the heuristic's other top nodes
    assert s.shadow.counts == {"true": 1, "false": 1, "skipped": 1}


async def test_the_record_keeps_the_answered_scores_when_state_changes_in_between() -> None:
    s = Setup()
    ex = s.answer()
    s.shadow.submit(ex)
    # before the shadow runs, n00 turns contended: its score drops, and the Q-table's choice does not move
    s.store.apply(_regime("n00", 2.5).model_copy(update={"ts_ms": NOW + 1}), NOW)
    await wait_until(lambda: s.shadow.idle, what="the shadow to finish")
    (recent,) = s.shadow.recent
    assert recent["heuristic_node"] == "n00" and recent["heuristic_score"] == ex.card(0).scores[2]
    assert ex.card(0).scores[2] > s.store.card("n00", NOW).scores[2]


async def test_renumbered_node_ids_drop_the_call_in_flight() -> None:
    s = Setup(seen_before=20_000)  # far more ids than nodes held
    before = SHADOW_SKIPPED.labels("renumbered")._value.get()
    s.shadow.submit(s.answer())
    await asyncio.sleep(0)
    assert s.store.compact_ids() and len(s.store.node_ids) == len(NODES)
    assert sorted(slot[SLOT_ID] for slot in s.store._slots.values()) == list(range(len(NODES)))  # were 20,000+
    assert all(slot[SLOT_ID] == s.store.node_ids.peek(node) for node, slot in s.store._slots.items())
    await wait_until(lambda: s.shadow.idle, what="the shadow to stop")
    assert SHADOW_SKIPPED.labels("renumbered")._value.get() == before + 1 and not s.shadow.recent
    # the next call is scored against the new ids, with the heuristic's rows rebuilt
    decision = s.shadow.observe(s.answer())
    assert decision is not None and (decision.heuristic_node, decision.learned_node) == ("n00", "n39")
    assert decision.heuristic_score == s.store.card("n00", NOW).scores[2]


async def test_a_shadow_bug_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    s = Setup()

    def broken() -> PlacementModel:
        raise RuntimeError("boom")

    s.shadow.model = broken
    s.shadow.submit(s.answer())
    await wait_until(lambda: s.shadow.idle, what="the shadow to stop")
    assert "shadow scoring failed for ns/web-0" in caplog.text
    s.shadow.model = lambda: s.model  # the worker is not wedged: the next call is scored
    s.shadow.submit(s.answer())
    await wait_until(lambda: s.shadow.idle, what="the shadow to finish")
    assert s.shadow.counts["false"] == 1


def test_ids_from_the_answers_lookup_and_from_the_names_agree() -> None:
    s = Setup()
    ex = s.answer()
    assert s.store.last_lookup[0] is ex.nodes  # the answer's own slots carry the node ids
    from_slots = s.shadow.observe(ex)
    s.answer(NODES[:10])  # another lookup since: the shadow looks the names up instead
    assert s.store.last_lookup[0] is not ex.nodes
    from_names = s.shadow.observe(ex)
    assert from_slots is not None and from_slots == from_names
    assert (from_slots.heuristic_node, from_slots.learned_node, from_slots.scored) == ("n00", "n39", 40)
