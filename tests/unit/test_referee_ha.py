"""Pure parts of the HA referee: the lease rules, the durable guard state, the election settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contracts.models import TargetRef
from services.referee import durable
from services.referee.lease_rules import LeaseRecord, Observation, next_step, transitions_after
from services.referee.policy import RefereeState, resolve, settle
from services.referee.settings import RefereeSettings
from tests.unit.test_referee_policy import NOW, POD, prop, settings


def lease(holder: str | None, renew: str = "t1", transitions: int = 0, duration: int = 15) -> LeaseRecord:
    return LeaseRecord(holder=holder, duration_s=duration, transitions=transitions, renew_time=renew,
                       resource_version="1")


def test_a_missing_lease_is_created_and_the_holder_renews() -> None:
    seen = Observation()
    seen.see(None, 0.0)
    assert next_step(seen, "a", 0.0) == "create"
    seen.see(lease("a"), 1.0)
    assert next_step(seen, "a", 1.0) == "renew"


def test_a_live_holder_is_waited_for_and_a_silent_one_replaced_after_the_duration() -> None:
    seen = Observation()
    seen.see(lease("a", renew="t1"), 100.0)
    assert next_step(seen, "b", 100.0) == "wait"
    # the holder renews: the record changes, so the candidate's clock restarts there
    seen.see(lease("a", renew="t2"), 110.0)
    assert next_step(seen, "b", 124.9) == "wait"
    # the same record for a whole lease duration of the candidate's own time: expired
    seen.see(lease("a", renew="t2"), 125.0)
    assert next_step(seen, "b", 125.0) == "acquire"


def test_the_candidates_clock_is_never_compared_with_the_holders() -> None:
    """A renewTime far in the past (a holder whose clock lags) is not expiry: only an unchanged record is."""
    seen = Observation()
    seen.see(lease("a", renew="1970-01-01T00:00:00.000000Z"), 50.0)
    assert next_step(seen, "b", 50.0) == "wait"


def test_a_released_lease_is_taken_at_once_and_transitions_count_holder_changes() -> None:
    seen = Observation()
    seen.see(lease(None, transitions=3), 0.0)
    assert next_step(seen, "b", 0.0) == "acquire"
    assert transitions_after(lease("a", transitions=3), "b") == 4
    assert transitions_after(lease("b", transitions=3), "b") == 3
    assert transitions_after(None, "b") == 0


def test_durable_state_round_trip_keeps_cooldowns_budgets_and_decisions() -> None:
    s = settings(max_disruptions=2)
    state = RefereeState()
    stored: dict[bytes, bytes] = {}

    def carry_out(target: TargetRef, pid: str, at: int, outcome: str) -> str:
        res = resolve(target, [prop("evict", 0.9, target, pid=pid)], now_ms=at, state=state, s=s)
        evicted = settle(state, res, outcome)
        for key, value in durable.records_after(state, res, evicted, now_ms=at, budget_horizon_ms=300_000):
            if value is None:
                stored.pop(key, None)
            else:
                stored[key] = value
        return res.decision.action

    other = TargetRef(kind="Pod", name="web-2", namespace="ns")
    assert carry_out(POD, "p1", NOW, "applied") == "evict"
    assert carry_out(other, "p2", NOW + 1000, "failed") == "evict"  # failed: its reservation is given back
    restored = durable.restore(stored)
    assert restored.last.keys() == {POD.key()}
    assert list(restored.disruptions) == [NOW]
    assert list(restored.actions) == [NOW]
    assert len(restored.decided) == 1
    # the restored referee refuses what the old one would have: a cooldown on POD ...
    again = resolve(POD, [prop("evict", 0.95, POD, pid="p3")], now_ms=NOW + 5000, state=restored, s=s)
    assert again.decision.action == "none" and "cooldown" in again.decision.reason
    # ... and recognises the decision it already carried out as a replay
    replay = resolve(POD, [prop("evict", 0.9, POD, pid="p1")], now_ms=NOW + 6000, state=restored, s=s)
    assert replay.replay
    # one more disruption fits the budget of 2, a third does not
    third = TargetRef(kind="Pod", name="web-3", namespace="ns")
    fourth = TargetRef(kind="Pod", name="web-4", namespace="ns")
    assert resolve(third, [prop("evict", 0.9, third)], now_ms=NOW + 7000, state=restored, s=s).decision.action \
        == "evict"
    blocked = resolve(fourth, [prop("evict", 0.9, fourth)], now_ms=NOW + 8000, state=restored, s=s)
    assert blocked.decision.action == "none" and "disruption budget" in blocked.decision.reason


def test_durable_state_drops_evicted_decisions_and_skips_garbage() -> None:
    s = settings(cooldown_s=0)
    state = RefereeState(max_decided=2)
    stored: dict[bytes, bytes] = {b"t/Pod/ns/x": b"not json", b"budget": b"[]"}
    for i in range(4):
        target = TargetRef(kind="Pod", name=f"p{i}", namespace="ns")
        res = resolve(target, [prop("evict", 0.9, target, pid=f"q{i}")], now_ms=NOW + i, state=state, s=s)
        evicted = settle(state, res, "applied")
        for key, value in durable.records_after(state, res, evicted, now_ms=NOW + i, budget_horizon_ms=300_000):
            if value is None:
                stored.pop(key, None)
            else:
                stored[key] = value
    decided = [k for k in stored if k.startswith(durable.DECIDED_PREFIX)]
    assert len(decided) == 2, "the bounded memory's evictions are tombstoned"
    restored = durable.restore(stored, max_decided=2)
    assert set(restored.decided) == set(state.decided)
    assert "Pod/ns/x" not in restored.last


def test_the_budget_record_keeps_only_what_is_inside_its_window() -> None:
    state = RefereeState()
    state.actions.extend([NOW - 400_000, NOW - 10])
    state.disruptions.extend([NOW - 400_000, NOW - 10])
    res = resolve(POD, [prop("evict", 0.9, POD)], now_ms=NOW, state=state, s=settings())
    records = dict(durable.records_after(state, res, [], now_ms=NOW, budget_horizon_ms=300_000))
    restored = durable.restore({k: v for k, v in records.items() if v is not None})
    assert list(restored.actions) == [NOW - 10, NOW]
    assert list(restored.disruptions) == [NOW - 10, NOW]


def test_election_timing_must_let_a_leader_give_up_before_its_lease_expires() -> None:
    with pytest.raises(ValidationError, match="REFEREE_RENEW_DEADLINE_S"):
        RefereeSettings(leader_election=True, lease_duration_s=10, renew_deadline_s=12)  # type: ignore[call-arg]
    ok = RefereeSettings(leader_election=True, lease_duration_s=6, renew_deadline_s=4,  # type: ignore[call-arg]
                         retry_period_s=1)
    assert ok.identity
