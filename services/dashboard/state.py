"""The dashboard's whole state, fed one message at a time; snapshots and diffs for the browser.

Pure: no I/O, the caller passes the time. Every change bumps one version counter; a snapshot taken
with ``since=v`` holds only what changed after version ``v`` (decisions, nodes, sparkline points),
so a browser that has applied ``v`` stays current with a few kilobytes per update, however many
nodes there are. Clusters, intents and pipeline health are small and sent whole when they change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from contracts.base import Contract
from contracts.models import (
    ActionResult,
    AnomalyScore,
    ClusterState,
    DeadLetterV2,
    Decision,
    DriftReport,
    FailureRiskV2,
    LoadForecast,
    RegimeLabelV2,
    RolloutEvent,
)
from contracts.topics import DRIFT_TOPIC, FORECASTS_TOPIC, REGIMES_TOPIC, RISK_TOPIC, Topic
from services.dashboard.clusters import ClusterBoard
from services.dashboard.decisions import DecisionLog
from services.dashboard.drift import DriftBoard
from services.dashboard.load import LoadBoard
from services.dashboard.nodes import NodeBoard
from services.dashboard.pipeline import PipelineHealth
from services.dashboard.rollouts import RolloutBoard

JsonDict = dict[str, Any]

# The topics the dashboard consumes (base names) and the node signal each compacted one carries.
CONSUMED_TOPICS: tuple[str, ...] = (
    Topic.DECISIONS,
    Topic.ACTIONS,
    REGIMES_TOPIC,
    Topic.PODREGIMES,
    Topic.ANOMALIES,
    RISK_TOPIC,
    Topic.CLUSTERSTATE,
    Topic.DEADLETTER,
    FORECASTS_TOPIC,
    DRIFT_TOPIC,
    Topic.ROLLOUTS,
)
ACTUAL_LOAD_TOPIC = Topic.FEATURES
"""Read only for the actual utilisation beside the forecast (``DASHBOARD_READ_FEATURES``): the one
high-volume topic the dashboard reads, one vector per node per 10 s, decoded on the fast path."""
NODE_SIGNAL_TOPICS = {REGIMES_TOPIC: "regime", Topic.PODREGIMES: "pod_regime", Topic.ANOMALIES: "anomaly",
                      RISK_TOPIC: "risk"}


@dataclass(frozen=True, kw_only=True)
class StateConfig:
    stale_ms: int = 60_000
    history_ms: int = 10 * 60_000
    sparkline_points: int = 60
    max_decisions: int = 500
    max_deadletters: int = 100
    snapshot_decisions: int = 300
    topic_prefix: str = ""
    jaeger_url: str = "http://127.0.0.1:16686"
    load_keep_ms: int = 3600_000
    drift_history_points: int = 120


class DashboardState:
    def __init__(self, config: StateConfig | None = None) -> None:
        self.config = config = config or StateConfig()
        self.version = 0
        self.decisions = DecisionLog(capacity=config.max_decisions)
        self.nodes = NodeBoard(history_ms=config.history_ms, points=config.sparkline_points, stale_ms=config.stale_ms)
        self.clusters = ClusterBoard()
        self.pipeline = PipelineHealth(
            history_ms=config.history_ms,
            points=config.sparkline_points,
            max_deadletters=config.max_deadletters,
            topic_prefix=config.topic_prefix,
        )
        self.load = LoadBoard(keep_ms=config.load_keep_ms)
        self.drift = DriftBoard(history_points=config.drift_history_points)
        self.rollouts = RolloutBoard()
        self.ignored = 0  # valid messages with nothing to show (task-level risk)

    def _bump(self) -> int:
        self.version += 1
        return self.version

    # ---------------------------------------------------------------- input

    def apply(self, base_topic: str, value: Contract, *, trace_id: str | None = None) -> None:
        """One decoded message from `base_topic` (trace_id: from its traceparent header)."""
        self.pipeline.count_read(base_topic)
        v = self._bump()
        if isinstance(value, Decision):
            self.decisions.add_decision(value, trace_id, v)
        elif isinstance(value, ActionResult):
            self.decisions.add_result(value, trace_id, v)
        elif isinstance(value, RegimeLabelV2) and base_topic == Topic.PODREGIMES:
            self.nodes.add_pod_regime(value, v)
        elif isinstance(value, RegimeLabelV2):
            self.nodes.add_regime(value, v)
        elif isinstance(value, AnomalyScore):
            self.nodes.add_anomaly(value, v)
        elif isinstance(value, FailureRiskV2):
            if not self.nodes.add_risk(value, v):
                self.ignored += 1
        elif isinstance(value, ClusterState):
            self.clusters.add(value, v)
        elif isinstance(value, DeadLetterV2):
            self.pipeline.add_deadletter(value, v)
        elif isinstance(value, LoadForecast):
            self.load.add_forecast(value, v)
        elif isinstance(value, DriftReport):
            self.drift.add(value, v)
        elif isinstance(value, RolloutEvent):
            self.rollouts.add(value, v)
        else:
            self.ignored += 1

    def observe_vector(self, node: str, ts_ms: int, window_s: int, values: Sequence[float],
                       valid: Sequence[bool], schema_hash: str) -> None:
        """One features.v1 vector (fields of the fast decoder's FeatureRow): the node's actual load."""
        self.pipeline.count_read(ACTUAL_LOAD_TOPIC)
        if not self.load.observe_vector(node, ts_ms, window_s, values, valid, schema_hash, self.version + 1):
            self.ignored += 1
            return
        self._bump()

    def forget(self, base_topic: str, key: str) -> None:
        """A tombstone (null value) on a compacted topic."""
        self.pipeline.count_read(base_topic)
        v = self._bump()
        if base_topic in NODE_SIGNAL_TOPICS:
            self.nodes.forget(NODE_SIGNAL_TOPICS[base_topic], key, v)
        elif base_topic == Topic.CLUSTERSTATE:
            self.clusters.forget(key, v)
        elif base_topic == FORECASTS_TOPIC:
            self.load.forget_forecast(key, v)
        elif base_topic == DRIFT_TOPIC:
            self.drift.forget(key, v)

    def bad(self, base_topic: str, error: str) -> None:
        """A record that did not decode (it is the producer's job to dead-letter its inputs, not ours)."""
        self.pipeline.count_read(base_topic, bad=True, error=error)
        self._bump()

    def record_offsets(self, now_ms: int, totals: dict[str, int]) -> None:
        self.pipeline.record_offsets(now_ms, totals, self._bump())

    def record_lag(self, now_ms: int, lags: dict[str, dict[str, int]]) -> None:
        self.pipeline.record_lag(now_ms, lags, self._bump())

    def set_reader(self, *, connected: bool | None = None, caught_up: bool | None = None) -> None:
        status = self.pipeline.reader
        if connected is not None:
            status.connected = connected
        if caught_up is not None:
            status.caught_up = caught_up
        self._bump()

    def set_error(self, which: Literal["reader", "monitor"], error: str | None) -> None:
        """The reader's or the monitor's current Kafka problem (None: resolved)."""
        status = self.pipeline.reader
        if which == "reader":
            status.error = error
        else:
            status.monitor_error = error
        self._bump()

    # ---------------------------------------------------------------- output

    def snapshot(self, now_ms: int, since: int | None = None) -> JsonDict:
        """Everything (since=None) or what changed after version `since`, as JSON-ready data."""
        c = self.config
        full = since is None
        out: JsonDict = {
            "type": "snapshot" if full else "diff",
            "version": self.version,
            "now_ms": now_ms,
            "decisions": self.decisions.rows(since, limit=c.snapshot_decisions if full else None),
            "nodes": self.nodes.rows(now_ms, since),
            "removed_nodes": self.nodes.removed(since),
            "load": self.load.rows(since),
            "removed_load": self.load.removed(since),
            "pipeline": self.pipeline.view(since),
            "counts": {
                "nodes": len(self.nodes),
                "stale_nodes": self.nodes.stale_count(now_ms),
                "unknown_nodes": self.nodes.unknown_count(),
                "risk_out_of_range": self.nodes.out_of_range_count(),
                "decisions_seen": self.decisions.total,
                "decisions_held": len(self.decisions),
                "results_waiting": self.decisions.orphans,
                "deadletters": self.pipeline.deadletter_total,
                "ignored": self.ignored,
                "load_nodes": len(self.load),
                "forecast_unknown": self.load.unknown_count(),
                "drift_models": len(self.drift),
                "drifting_models": self.drift.drifting(),
                "rollout_models": len(self.rollouts),
                "active_rollouts": self.rollouts.active(),
            },
        }
        if since is None or self.load.version > since:
            out["load_summary"] = self.load.summary()
        if since is None or self.drift.version > since:
            out["drift"] = self.drift.view()
        if since is None or self.rollouts.version > since:
            out["rollouts"] = self.rollouts.view()
        if since is None or max(self.clusters.version, self.decisions.intent_version) > since:
            out["cluster"] = self.clusters.view(self.decisions.intents)
        if full:
            out["config"] = {
                "jaeger_url": c.jaeger_url.rstrip("/"),
                "stale_ms": c.stale_ms,
                "history_ms": c.history_ms,
                "max_decisions": c.max_decisions,
                "topic_prefix": c.topic_prefix,
            }
        return out
