"""Reporting regime changes with hysteresis: one noisy window never flips the reported regime.

State per node (JSON in the ``hysteresis`` table): the reported regime, a candidate and how
many consecutive windows proposed it, the newest window handled and the last outputs (so a
re-delivered window is answered with the identical label instead of advancing the count).

``unknown`` (the model abstained on the window, :func:`abstain`) bypasses hysteresis both ways:

* it is reported **at once**, from the first window the model cannot judge: the label that was
  reported before describes counters the node no longer provides (or a state the model no longer
  recognises), and nothing may act on it; a pending candidate is dropped;
* the next answered window **starts afresh**, exactly like a node's first window: its regime is
  reported at once (``changed``). Hysteresis keeps a known label from flipping on one noisy
  window; after an ``unknown`` spell there is no known label left to protect, and continuing
  would mean reporting ``unknown`` for windows the model did answer, without a reason to give
  (regimes.v2 lists reasons exactly when the regime is ``unknown``).

The record is ``{"reported", "candidate", "count", "ts", "history": [label, ...]}``, each
label the RegimeLabelV2 as sent (records written before regimes.v2 hold v1 RegimeLabels, which
read as v2 labels without abstain reasons). :class:`Memory` is a record decoded once and kept: the
labels stay encoded (``orjson.Fragment``), so writing the next record re-serialises
none of them; records are the same bytes as before, so either version reads the other's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import orjson

from contracts.models import UNKNOWN_REGIME as UNKNOWN


class Step(NamedTuple):
    regime: str
    changed: bool
    state: dict[str, Any]


class Label(NamedTuple):
    """One label of a node's history: its window, its JSON as sent, the same as a fragment."""

    ts_ms: int
    encoded: bytes
    fragment: orjson.Fragment


def label(ts_ms: int, encoded: bytes) -> Label:
    return Label(ts_ms, encoded, orjson.Fragment(encoded))


class Memory(NamedTuple):
    """A node's record, decoded: ``state`` as :func:`advance` returns it, and the newest labels."""

    state: dict[str, Any]
    history: Sequence[Label]

    def earlier(self, ts_ms: int) -> Label | None:
        """The label already sent for window ``ts_ms``, if still in the history."""
        for h in self.history:
            if h.ts_ms == ts_ms:
                return h
        return None


def decode(raw: bytes) -> Memory:
    """A record as any version wrote it."""
    state: dict[str, Any] = orjson.loads(raw)
    # orjson writes a dict it parsed back byte for byte: the label as it was sent
    history = [label(h.get("ts_ms"), orjson.dumps(h)) for h in state.pop("history", None) or ()]
    return Memory(state, history)


def encode(state: dict[str, Any], history: Sequence[Label]) -> bytes:
    return orjson.dumps({**state, "history": [h.fragment for h in history]})


def advance(state: dict[str, Any] | None, raw_regime: str, ts_ms: int, *, windows: int) -> Step:
    """The reported regime after one more answered window (``windows`` = consecutive agreeing windows to switch)."""
    if state is None or state["reported"] == UNKNOWN:  # a first window, or the first after an unknown spell
        return Step(raw_regime, True, {"reported": raw_regime, "candidate": None, "count": 0, "ts": ts_ms})
    reported = state["reported"]
    if raw_regime == reported:
        return Step(reported, False, {"reported": reported, "candidate": None, "count": 0, "ts": ts_ms})
    count = state["count"] + 1 if state.get("candidate") == raw_regime else 1
    if count >= windows:
        return Step(raw_regime, True, {"reported": raw_regime, "candidate": None, "count": 0, "ts": ts_ms})
    return Step(reported, False, {"reported": reported, "candidate": raw_regime, "count": count, "ts": ts_ms})


def abstain(state: dict[str, Any] | None, ts_ms: int) -> Step:
    """The reported regime after a window the model abstains on: ``unknown`` at once (``changed`` when it
    was not already), candidate dropped."""
    changed = state is None or state["reported"] != UNKNOWN
    return Step(UNKNOWN, changed, {"reported": UNKNOWN, "candidate": None, "count": 0, "ts": ts_ms})
