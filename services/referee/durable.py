"""The referee's guard state as changelog records, and back (pure).

What a restart or a fail-over must not forget (``RefereeState``): each target's last action
(cooldown and hysteresis), the cluster-wide actions of the last minute (rate limit) and the
disruptive actions of the disruption window (budget), and the decisions already carried out
(a replayed window is recognised without asking the API server). Keys of the compacted topic:

* ``t/<target key>``: the target's last action (a tombstone when it was given back);
* ``budget``: the action and disruption timestamps still inside their windows;
* ``d/<decision id>``: one decision carried out (a tombstone once it leaves the bounded memory).

The records are written after every settled decision and flushed before the proposals that led
to it are committed, so the state restored on start is never older than the committed input.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import orjson

from services.referee.policy import LastAction, RefereeState, Resolution
from services.runtime.stream_settings import changelog_name

BUDGET_KEY = b"budget"
TARGET_PREFIX = b"t/"
DECIDED_PREFIX = b"d/"
Record = tuple[bytes, bytes | None]


def state_topic(group_id: str) -> str:
    """The state topic of the referees of one consumer group (before the topic prefix)."""
    return changelog_name(group_id, "state")


def records_after(state: RefereeState, resolution: Resolution, evicted: Iterable[str], *, now_ms: int,
                  budget_horizon_ms: int) -> list[Record]:
    """The records that bring the stored state up to ``state`` after ``resolution`` was settled."""
    decision = resolution.decision
    out: list[Record] = []
    key = decision.target.key()
    last = state.last.get(key)
    out.append((TARGET_PREFIX + key.encode(), None if last is None else orjson.dumps(
        {"kind": last.kind, "ts_ms": last.ts_ms, "score": last.score, "decision_id": last.decision_id})))
    horizon = now_ms - budget_horizon_ms
    out.append((BUDGET_KEY, orjson.dumps({"actions": [t for t in state.actions if t > horizon],
                                          "disruptions": [t for t in state.disruptions if t > horizon]})))
    done = state.decided.get(decision.decision_id)
    if done is not None:
        out.append((DECIDED_PREFIX + decision.decision_id.encode(), orjson.dumps(list(done))))
    out.extend((DECIDED_PREFIX + did.encode(), None) for did in evicted)
    return out


def restore(records: Mapping[bytes, bytes], *, max_decided: int = 10_000) -> RefereeState:
    """The state the live records describe (a record that does not parse is skipped, never fatal)."""
    state = RefereeState(max_decided=max_decided)
    decided: list[tuple[str, str, str | None]] = []
    for key, value in records.items():
        try:
            data = orjson.loads(value)
            if key == BUDGET_KEY:
                state.actions.extend(sorted(int(t) for t in data["actions"]))
                state.disruptions.extend(sorted(int(t) for t in data["disruptions"]))
            elif key.startswith(TARGET_PREFIX):
                state.last[key[len(TARGET_PREFIX):].decode()] = LastAction(
                    str(data["kind"]), int(data["ts_ms"]), float(data["score"]), str(data["decision_id"]))
            elif key.startswith(DECIDED_PREFIX):
                action, chosen = data
                did = key[len(DECIDED_PREFIX):].decode()
                decided.append((did, str(action), None if chosen is None else str(chosen)))
        except (ValueError, TypeError, KeyError, UnicodeDecodeError):
            continue
    # the records' order is lost in compaction: keep the newest ids when there are too many
    for did, action, chosen in decided[-max_decided:]:
        state.decided[did] = (action, chosen)  # type: ignore[assignment]
    return state
