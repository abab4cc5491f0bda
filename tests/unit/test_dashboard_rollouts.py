"""Dashboard rollouts panel data (rollouts.v1): newest state per model, a bounded history, sent only when changed."""

from __future__ import annotations

from typing import Any

from contracts import decode, encode
from contracts.models import RolloutEvent
from contracts.topics import Topic
from services.dashboard.rollouts import RolloutBoard
from services.dashboard.state import CONSUMED_TOPICS, DashboardState

T0 = 1_800_000_000_000


def event(model: str, ts: int, status: str, step: int, **kw: Any) -> RolloutEvent:
    return RolloutEvent(**{"model": model, "ts_ms": T0 + ts, "rollout_id": T0, "candidate": "v2", "baseline": "v1",
                           "status": status, "step": step, "steps": 3, "fraction": (0.1, 0.5, 1.0)[step - 1],
                           "origin": "judged", "reporter": "regime-0", **kw})


def test_board_keeps_the_newest_event_per_model_and_a_bounded_time_ordered_history() -> None:
    board = RolloutBoard(history=3)
    board.add(event("regime", 0, "running", 1, origin="observed"), 1)
    board.add(event("regime", 2_000, "running", 2), 2)
    board.add(event("regime", 1_000, "running", 1, reason="late copy"), 3)  # an older record read later
    board.add(event("regime", 3_000, "rolled_back", 2, reason="candidate matched_accuracy 0.4 vs current 0.9"), 4)
    board.add(event("failure", 0, "shadow", 1), 5)
    (failure, regime) = board.view()
    assert regime["latest"]["status"] == "rolled_back" and "matched_accuracy" in regime["latest"]["reason"]
    assert [m["ts"] - T0 for m in regime["moves"]] == [3_000, 2_000, 1_000], "newest first, at most 3"
    assert failure["latest"]["status"] == "shadow" and board.active() == 1 and len(board) == 2


def test_state_reads_rollouts_and_sends_the_panel_only_when_it_changed() -> None:
    assert Topic.ROLLOUTS in CONSUMED_TOPICS
    state = DashboardState()
    record = decode(RolloutEvent, encode(event("regime", 0, "running", 2, metrics={"agreement": 0.87})))
    state.apply(Topic.ROLLOUTS, record)
    snap = state.snapshot(T0)
    assert snap["counts"]["rollout_models"] == 1 and snap["counts"]["active_rollouts"] == 1
    latest = snap["rollouts"][0]["latest"]
    assert (latest["candidate"], latest["fraction"], latest["metrics"]) == ("v2", 0.5, {"agreement": 0.87})
    v = state.version
    assert "rollouts" not in state.snapshot(T0, since=v)
    state.apply(Topic.ROLLOUTS, event("regime", 5_000, "promoted", 3, fraction=1.0))
    assert state.snapshot(T0, since=v)["rollouts"][0]["latest"]["status"] == "promoted"
