"""Per-model rollouts (rollouts.v1): the newest RolloutEvent of each model and its last few moves.

A model stage publishes a record each time it moves a rollout (a step, the promotion, a rollback:
``origin`` ``judged``) or sees it moved (``observed``: an operator's ``borgctl model``); the newest
by ``ts_ms`` is the model's state on the panel (version, fraction, status, last reason), the others
its short history. rollouts.v1 is not compacted (the topic is the record).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contracts.models import RolloutEvent

JsonDict = dict[str, Any]


@dataclass(slots=True)
class RolloutRow:
    model: str
    version: int
    latest: RolloutEvent
    moves: list[RolloutEvent] = field(default_factory=list)
    """Oldest first, at most ``RolloutBoard.history``."""


class RolloutBoard:
    def __init__(self, *, history: int = 8) -> None:
        self.history = max(1, history)
        self._rows: dict[str, RolloutRow] = {}
        self.version = 0  # newest change of any model (the panel is small: sent whole when it changes)

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, event: RolloutEvent, version: int) -> None:
        row = self._rows.get(event.model)
        if row is None:
            row = self._rows[event.model] = RolloutRow(model=event.model, version=version, latest=event)
        elif event.ts_ms >= row.latest.ts_ms:
            row.latest = event
        row.moves.append(event)
        if len(row.moves) > 1 and event.ts_ms < row.moves[-2].ts_ms:  # read out of order: keep time order
            row.moves.sort(key=lambda e: e.ts_ms)
        del row.moves[: max(0, len(row.moves) - self.history)]
        row.version = self.version = version

    def active(self) -> int:
        return sum(1 for r in self._rows.values() if r.latest.status in ("shadow", "running", "paused"))

    def view(self) -> list[JsonDict]:
        return [
            {
                "model": r.model,
                "v": r.version,
                "latest": r.latest.model_dump(mode="json"),
                "moves": [
                    {"ts": e.ts_ms, "candidate": e.candidate, "status": e.status, "step": e.step, "steps": e.steps,
                     "fraction": e.fraction, "origin": e.origin, "reason": e.reason}
                    for e in reversed(r.moves)  # newest first
                ],
            }
            for r in sorted(self._rows.values(), key=lambda r: r.model)
        ]
