"""Pure conflict resolution: the proposals of one decision window on one target → a Decision.

Order of precedence (documented in docs/decision_plane.md):

1. class: **safety** (taint, cordon, evict, hold_admission — protecting nodes and the
   queue) over **SLA** (scale_out, replicate, and admission's gentle throttle /
   deprioritize) over **efficiency** (consolidate, memory_balloon, scale_in);
2. then score, then agent name and proposal id (deterministic).

Only the winner is checked against the guards, in this order; a blocked winner means
no action (the next proposal is not tried: a blocked SLA action must not let a
lower-ranked efficiency action through):

- ``min_score``: proposals below it are not candidates at all;
- per-target **cooldown**: no action within ``cooldown_s`` of the last one on the
  target, except a safety action of a different kind (escalation: taint → cordon);
- **hysteresis**: reversing the last action (up ↔ down) within ``hysteresis_s``
  needs a score at least ``hysteresis_margin`` above the last action's score;
- cluster-wide **rate limit**: at most ``rate_limit_per_min`` actions per minute;
- **disruption budget**: at most ``max_disruptions`` disruptive actions (evict, cordon,
  consolidate, scale_in, throttle, memory_balloon) per ``disruption_window_s``.

The decision id hashes the target and the sorted proposal ids, so the same window
replayed yields the same id.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Literal

from contracts.models import Decision, Proposal, ProposalKind, TargetRef
from services.referee.settings import Mode, RefereeSettings

Action = ProposalKind | Literal["none"]
SAFETY: frozenset[str] = frozenset({"taint", "cordon", "evict", "hold_admission"})
SLA: frozenset[str] = frozenset({"scale_out", "replicate", "throttle", "deprioritize"})
EFFICIENCY: frozenset[str] = frozenset({"consolidate", "memory_balloon", "scale_in"})
UP: frozenset[str] = frozenset({"scale_out", "replicate"})
DOWN: frozenset[str] = frozenset({"scale_in", "throttle"})
DISRUPTIVE: frozenset[str] = frozenset({"evict", "cordon", "consolidate", "scale_in", "throttle", "memory_balloon"})
TARGET_KINDS: dict[str, str] = {
    "scale_out": "Deployment",
    "replicate": "Deployment",
    "scale_in": "Deployment",
    "throttle": "Deployment",
    "deprioritize": "Deployment",
    "taint": "Node",
    "cordon": "Node",
    "consolidate": "Node",
    "evict": "Pod",
    "memory_balloon": "Pod",
    "hold_admission": "Namespace",
}
APPLIED_OUTCOMES = frozenset({"applied", "dry-run", "shadow", "duplicate"})


def action_class(kind: str) -> str:
    return "safety" if kind in SAFETY else "SLA" if kind in SLA else "efficiency"


def class_rank(kind: str) -> int:
    return 0 if kind in SAFETY else 1 if kind in SLA else 2


def rank_key(p: Proposal) -> tuple[int, float, str, str]:
    return (class_rank(p.kind), -p.score, p.agent, p.proposal_id)


def decision_id(target: TargetRef, proposals: list[Proposal]) -> str:
    ids = ",".join(sorted({p.proposal_id for p in proposals}))
    return "d-" + hashlib.sha256(f"{target.key()}|{ids}".encode()).hexdigest()[:32]


def reverses(last: str, new: str) -> bool:
    return (last in UP and new in DOWN) or (last in DOWN and new in UP)


@dataclass(frozen=True)
class LastAction:
    kind: str
    ts_ms: int
    score: float
    decision_id: str


@dataclass
class RefereeState:
    """What the guards remember: last action per target, recent actions, recent decisions."""

    last: dict[str, LastAction] = field(default_factory=dict)
    actions: deque[int] = field(default_factory=deque)
    disruptions: deque[int] = field(default_factory=deque)
    decided: OrderedDict[str, tuple[Action, str | None]] = field(default_factory=OrderedDict)
    max_decided: int = 10_000


@dataclass(frozen=True)
class Resolution:
    decision: Decision
    chosen: Proposal | None
    replay: bool = False  # this process already made this very decision
    previous: LastAction | None = None  # the target's last action before this one reserved its slot


def _fmt(p: Proposal) -> str:
    return f"{p.kind} by {p.agent} ({p.score:.2f}, {action_class(p.kind)})"


def _decision(
    did: str,
    target: TargetRef,
    proposals: list[Proposal],
    now_ms: int,
    mode: Mode,
    chosen: Proposal | None,
    reason: str,
) -> Decision:
    return Decision(
        decision_id=did,
        ts_ms=now_ms,
        target=target,
        action=chosen.kind if chosen is not None else "none",
        chosen_proposal_id=chosen.proposal_id if chosen is not None else None,
        reason=reason,
        proposals=proposals,
        mode=mode,
    )


def _expire(times: deque[int], horizon_ms: int) -> None:
    while times and times[0] <= horizon_ms:
        times.popleft()


def resolve(
    target: TargetRef, proposals: list[Proposal], *, now_ms: int, state: RefereeState, s: RefereeSettings
) -> Resolution:
    """Choose at most one action for `target` from the window's proposals."""
    weighed = sorted({p.proposal_id: p for p in proposals}.values(), key=rank_key)
    did = decision_id(target, weighed)
    if did in state.decided:
        action, chosen_id = state.decided[did]
        chosen = next((p for p in weighed if p.proposal_id == chosen_id), None)
        reason = f"replay of decision {did} (already decided by this referee: {action})"
        return Resolution(_decision(did, target, weighed, now_ms, s.mode, chosen, reason), chosen, replay=True)

    def none(reason: str) -> Resolution:
        return Resolution(_decision(did, target, weighed, now_ms, s.mode, None, reason), None)

    misaimed = [p for p in weighed if TARGET_KINDS.get(p.kind) != target.kind or p.target != target]
    weak = [p for p in weighed if p not in misaimed and p.score < s.min_score]
    candidates = [p for p in weighed if p not in misaimed and p not in weak]
    notes = []
    if misaimed:
        notes.append("ignored (wrong target kind): " + ", ".join(_fmt(p) for p in misaimed))
    if weak:
        notes.append(f"below min score {s.min_score:.2f}: " + ", ".join(_fmt(p) for p in weak))
    suffix = ("; " + "; ".join(notes)) if notes else ""
    if not candidates:
        return none("no action: no proposal qualifies" + suffix)

    best = candidates[0]
    others = candidates[1:]
    reason = f"{_fmt(best)} chosen"
    if others:
        why = (
            "higher score"
            if all(class_rank(o.kind) == class_rank(best.kind) for o in others)
            else "safety outranks SLA outranks efficiency, then score"
        )
        reason += " over " + ", ".join(_fmt(o) for o in others) + f" ({why})"

    last = state.last.get(target.key())
    if last is not None:
        since_s = (now_ms - last.ts_ms) / 1000.0
        escalation = best.kind in SAFETY and last.kind != best.kind
        if since_s < s.cooldown_s and not escalation:
            return none(
                f"no action: cooldown ({last.kind} {since_s:.0f}s ago, cooldown {s.cooldown_s:.0f}s); {reason}{suffix}"
            )
        if (
            reverses(last.kind, best.kind)
            and since_s < s.hysteresis_s
            and best.score < last.score + s.hysteresis_margin
        ):
            return none(
                f"no action: hysteresis ({best.kind} would reverse {last.kind} of {since_s:.0f}s ago and needs "
                f"score >= {last.score + s.hysteresis_margin:.2f}); {reason}{suffix}"
            )
    _expire(state.actions, now_ms - 60_000)
    if s.rate_limit_per_min and len(state.actions) >= s.rate_limit_per_min:
        return none(f"no action: rate limit ({s.rate_limit_per_min}/min cluster-wide reached); {reason}{suffix}")
    _expire(state.disruptions, now_ms - int(s.disruption_window_s * 1000))
    if best.kind in DISRUPTIVE and len(state.disruptions) >= s.max_disruptions:
        return none(
            f"no action: disruption budget ({s.max_disruptions} per {s.disruption_window_s:.0f}s spent); "
            f"{reason}{suffix}"
        )
    decision = _decision(did, target, weighed, now_ms, s.mode, best, reason + suffix)
    # Reserve the slot now, so decisions executed concurrently see each other; `settle` gives it back on failure.
    state.last[target.key()] = LastAction(best.kind, now_ms, best.score, did)
    state.actions.append(now_ms)
    if best.kind in DISRUPTIVE:
        state.disruptions.append(now_ms)
    return Resolution(decision, best, previous=last)


def settle(state: RefereeState, resolution: Resolution, outcome: str) -> list[str]:
    """Feed an ActionResult's outcome back: keep the reserved slot when acted on, give it back otherwise.

    Returns the decision ids dropped from ``state.decided`` to keep it bounded (the durable state
    deletes them too).
    """
    decision = resolution.decision
    chosen = resolution.chosen
    evicted: list[str] = []
    if outcome in APPLIED_OUTCOMES:
        state.decided[decision.decision_id] = (decision.action, decision.chosen_proposal_id)
        state.decided.move_to_end(decision.decision_id)
        while len(state.decided) > state.max_decided:
            evicted.append(state.decided.popitem(last=False)[0])
    # ``duplicate``: the object already carries this decision, so the action *is* in effect: it keeps
    # its cooldown and budget slot. A referee that knew it would have recognised the replay before
    # reserving anything; one that did not (a restart or fail-over that lost the last state record)
    # must count it, or the cluster gets one disruption more than the budget.
    if chosen is None or resolution.replay or outcome in APPLIED_OUTCOMES:
        return evicted
    # Not acted on (refused or failed): release what resolve() reserved.
    key = decision.target.key()
    if resolution.previous is not None:
        state.last[key] = resolution.previous
    else:
        state.last.pop(key, None)
    _discard(state.actions, decision.ts_ms)
    if chosen.kind in DISRUPTIVE:
        _discard(state.disruptions, decision.ts_ms)
    return evicted


def _discard(times: deque[int], ts: int) -> None:
    try:
        times.remove(ts)
    except ValueError:
        pass
