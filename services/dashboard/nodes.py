"""Per-node view: latest regime, anomaly score and node failure risk, short histories, staleness.

Staleness is judged by each message's own `ts_ms` (event time), as the scheduler extender does: a
node whose newest signal is older than the bound is stale, and each signal is also marked stale on
its own. Task-level risk (target_kind "task") is not a node signal and is not shown here.

A regime ``unknown`` (regimes.v2: the model abstained) is shown as such with its abstain reasons
and out-of-distribution score; its history point is ``UNKNOWN_INDEX`` (after the regimes, so a
sparkline bucket holding an abstention shows it). A node risk from out-of-range inputs (risk.v2,
``in_range`` false) is shown flagged (``in_range: false`` and how many tasks were out of range):
agents and the extender ignore it, and so does the attention ordering of the page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contracts.models import REGIMES, UNKNOWN_REGIME, AnomalyScore, FailureRiskV2, RegimeLabelV2
from services.dashboard.series import Series

JsonDict = dict[str, Any]
UNKNOWN_INDEX = len(REGIMES)
REGIME_INDEX: dict[str, int] = {name: i for i, name in enumerate(REGIMES)} | {UNKNOWN_REGIME: UNKNOWN_INDEX}
SERIES = ("regime", "anomaly", "risk")
SIGNALS = (*SERIES, "pod_regime")
"""``pod_regime``: the pod-relative model's label (podregimes.v1, a shadow nothing acts on), shown beside the
node model's; it has no history strip."""


@dataclass(slots=True)
class NodeRow:
    name: str
    version: int
    series: dict[str, Series]
    regime: RegimeLabelV2 | None = None
    anomaly: AnomalyScore | None = None
    risk: FailureRiskV2 | None = None
    pod_regime: RegimeLabelV2 | None = None
    signal_ts: dict[str, int] = field(default_factory=dict)
    signal_version: dict[str, int] = field(default_factory=dict)  # version at which each signal last changed

    @property
    def last_ts(self) -> int:
        return max(self.signal_ts.values(), default=0)

    def empty(self) -> bool:
        return self.regime is None and self.anomaly is None and self.risk is None and self.pod_regime is None


class NodeBoard:
    def __init__(self, *, history_ms: int, points: int, stale_ms: int) -> None:
        self.history_ms = history_ms
        self.bucket_ms = max(1000, history_ms // max(1, points))
        self.stale_ms = stale_ms
        self._rows: dict[str, NodeRow] = {}
        self._removed: dict[str, int] = {}  # node -> version at which it disappeared

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, name: str) -> NodeRow | None:
        return self._rows.get(name)

    def _row(self, name: str, version: int) -> NodeRow:
        row = self._rows.get(name)
        if row is None:
            series = {
                "regime": Series(bucket_ms=self.bucket_ms, window_ms=self.history_ms, combine="max"),
                "anomaly": Series(bucket_ms=self.bucket_ms, window_ms=self.history_ms, combine="max"),
                "risk": Series(bucket_ms=self.bucket_ms, window_ms=self.history_ms, combine="max"),
            }
            row = self._rows[name] = NodeRow(name=name, version=version, series=series)
            self._removed.pop(name, None)
        row.version = version
        return row

    def add_regime(self, label: RegimeLabelV2, version: int) -> None:
        row = self._row(label.node, version)
        row.signal_version["regime"] = version
        if row.regime is None or label.ts_ms >= row.regime.ts_ms:
            row.regime = label
            row.signal_ts["regime"] = label.ts_ms
        row.series["regime"].add(label.ts_ms, REGIME_INDEX[label.regime], version)

    def add_pod_regime(self, label: RegimeLabelV2, version: int) -> None:
        row = self._row(label.node, version)
        row.signal_version["pod_regime"] = version
        if row.pod_regime is None or label.ts_ms >= row.pod_regime.ts_ms:
            row.pod_regime = label
            row.signal_ts["pod_regime"] = label.ts_ms

    def add_anomaly(self, score: AnomalyScore, version: int) -> None:
        row = self._row(score.node, version)
        row.signal_version["anomaly"] = version
        if row.anomaly is None or score.ts_ms >= row.anomaly.ts_ms:
            row.anomaly = score
            row.signal_ts["anomaly"] = score.ts_ms
        row.series["anomaly"].add(score.ts_ms, score.score, version)

    def add_risk(self, risk: FailureRiskV2, version: int) -> bool:
        if risk.target_kind != "node":
            return False
        row = self._row(risk.target, version)
        row.signal_version["risk"] = version
        if row.risk is None or risk.ts_ms >= row.risk.ts_ms:
            row.risk = risk
            row.signal_ts["risk"] = risk.ts_ms
        row.series["risk"].add(risk.ts_ms, max(h.probability for h in risk.horizons), version)
        return True

    def forget(self, signal: str, node: str, version: int) -> None:
        """A tombstone on a compacted topic: drop that signal; drop the node when nothing is left."""
        row = self._rows.get(node)
        if row is None:
            return
        setattr(row, signal, None)
        row.signal_ts.pop(signal, None)
        row.signal_version[signal] = version
        row.version = version
        if row.empty():
            del self._rows[node]
            self._removed[node] = version

    def stale_count(self, now_ms: int) -> int:
        return sum(1 for r in self._rows.values() if now_ms - r.last_ts > self.stale_ms)

    def unknown_count(self) -> int:
        """Nodes whose latest regime is ``unknown``."""
        return sum(1 for r in self._rows.values() if r.regime is not None and r.regime.regime == UNKNOWN_REGIME)

    def out_of_range_count(self) -> int:
        """Nodes whose latest node risk was computed from out-of-range inputs."""
        return sum(1 for r in self._rows.values() if r.risk is not None and not r.risk.in_range)

    def view(self, row: NodeRow, now_ms: int, since: int | None = None) -> JsonDict:
        """One node as JSON; with `since`, only the signals and series changed after that version
        (a browser merges them into what it has: absent keys are unchanged, null means removed)."""
        stale = [s for s in SIGNALS if s in row.signal_ts and now_ms - row.signal_ts[s] > self.stale_ms]
        changed = [s for s in SIGNALS if since is None or row.signal_version.get(s, 0) > since]
        out: JsonDict = {
            "node": row.name,
            "v": row.version,
            "last_ts": row.last_ts,
            "stale": now_ms - row.last_ts > self.stale_ms,
            "stale_signals": stale,
            "series": {name: row.series[name].view(since) for name in changed if name in SERIES},
        }
        out |= {name: None for name in changed}
        if row.regime is not None and "regime" in changed:
            r = row.regime
            worst = max(r.interference.items(), key=lambda kv: kv[1], default=(None, 1.0))
            out["regime"] = {
                "label": r.regime,
                "confidence": round(r.confidence, 3),
                "raw": r.raw_regime,
                "changed": r.changed,
                "ts": r.ts_ms,
                "worst_class": worst[0],
                "slowdown": round(worst[1], 3),
                "model": r.model_version,
                "abstain": list(r.abstain),
                "ood_score": None if r.ood_score is None else round(r.ood_score, 3),
            }
        if row.pod_regime is not None and "pod_regime" in changed:
            p = row.pod_regime
            out["pod_regime"] = {"label": p.regime, "confidence": round(p.confidence, 3), "ts": p.ts_ms,
                                 "model": p.model_version, "abstain": list(p.abstain)}
        if row.anomaly is not None and "anomaly" in changed:
            a = row.anomaly
            out["anomaly"] = {
                "score": round(a.score, 3),
                "is_anomaly": a.is_anomaly,
                "threshold": a.threshold,
                "ts": a.ts_ms,
            }
        if row.risk is not None and "risk" in changed:
            k = row.risk
            horizons = sorted((h.horizon_s, round(h.probability, 3)) for h in k.horizons)
            out["risk"] = {
                "horizons": [list(h) for h in horizons],
                "max": max(p for _, p in horizons),
                "tasks": k.tasks,
                "ts": k.ts_ms,
                "in_range": k.in_range,
                "tasks_out_of_range": k.tasks_out_of_range,
            }
        return out

    def rows(self, now_ms: int, since: int | None = None) -> list[JsonDict]:
        return [self.view(r, now_ms, since) for r in self._rows.values() if since is None or r.version > since]

    def removed(self, since: int | None) -> list[str]:
        if since is None:
            return []
        return [name for name, v in self._removed.items() if v > since]
