"""Per-model drift (drift.v1): the newest DriftReport of each model and a short history of its scores.

The report is passed on whole, as its contract dumps it (``model_dump(mode="json")``), so fields added
to drift.v1 later (e.g. concept drift: online AUCPR / Brier per horizon) reach the page without a change
here; the page draws the fields it knows and lists any other generically. drift.v1 is not compacted
(the topic is the history); a report older than the one held (by ``ts_ms``) only adds a history point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contracts.models import DriftReport

JsonDict = dict[str, Any]
STATUS_VALUE = {"insufficient_data": -1, "no_drift": 0, "drift": 1}


@dataclass(slots=True)
class DriftRow:
    model: str
    version: int
    report: DriftReport
    history: list[tuple[int, float | None, float | None, str]] = field(default_factory=list)
    # (ts_ms, data_score, prediction_psi, status), oldest first


class DriftBoard:
    def __init__(self, *, history_points: int = 120) -> None:
        self.history_points = max(2, history_points)
        self._rows: dict[str, DriftRow] = {}
        self.version = 0  # newest change of any model (the panel is small: sent whole when it changes)

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, report: DriftReport, version: int) -> None:
        row = self._rows.get(report.model)
        if row is None:
            row = self._rows[report.model] = DriftRow(model=report.model, version=version, report=report)
        elif report.ts_ms >= row.report.ts_ms:
            row.report = report
        point = (report.ts_ms, report.data_score, report.prediction_psi, report.status)
        history = row.history
        history.append(point)
        if len(history) > 1 and point[0] < history[-2][0]:  # read out of order: keep time order
            history.sort(key=lambda p: p[0])
        del history[: max(0, len(history) - self.history_points)]
        row.version = self.version = version

    def forget(self, model: str, version: int) -> None:
        if self._rows.pop(model, None) is not None:
            self.version = version

    def drifting(self) -> int:
        return sum(1 for r in self._rows.values() if r.report.status == "drift")

    def view(self) -> list[JsonDict]:
        return [
            {
                "model": r.model,
                "v": r.version,
                "report": r.report.model_dump(mode="json"),
                "history": [
                    {"ts": ts, "data_score": _r(d), "prediction_psi": _r(p), "status": st,
                     "level": STATUS_VALUE.get(st, 0)}
                    for ts, d, p, st in r.history
                ],
            }
            for r in sorted(self._rows.values(), key=lambda r: r.model)
        ]


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
