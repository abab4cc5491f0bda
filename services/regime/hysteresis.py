"""Reporting regime changes with hysteresis: one noisy window never flips the reported regime.

State per node (JSON in the ``hysteresis`` table): the reported regime, a candidate and how
many consecutive windows proposed it, the newest window handled and the last output (so a
re-delivered window is answered with the identical label instead of advancing the count).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class Step:
    regime: str
    changed: bool
    state: dict[str, Any]


def load(raw: bytes | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    state: dict[str, Any] = orjson.loads(raw)
    return state


def advance(state: dict[str, Any] | None, raw_regime: str, ts_ms: int, *, windows: int) -> Step:
    """The reported regime after one more window (``windows`` = consecutive agreeing windows to switch)."""
    if state is None:
        return Step(raw_regime, True, {"reported": raw_regime, "candidate": None, "count": 0, "ts": ts_ms})
    reported = state["reported"]
    if raw_regime == reported:
        return Step(reported, False, {"reported": reported, "candidate": None, "count": 0, "ts": ts_ms})
    count = state["count"] + 1 if state.get("candidate") == raw_regime else 1
    if count >= windows:
        return Step(raw_regime, True, {"reported": raw_regime, "candidate": None, "count": 0, "ts": ts_ms})
    return Step(reported, False, {"reported": reported, "candidate": raw_regime, "count": count, "ts": ts_ms})
