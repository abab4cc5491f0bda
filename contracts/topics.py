"""The topic registry: the one place that says which topics exist and what they carry."""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.base import Contract
from contracts.models import (
    ActionResult,
    AnomalyScore,
    ClusterState,
    DeadLetter,
    DeadLetterV2,
    Decision,
    DriftReport,
    FailureRisk,
    FailureRiskV2,
    FeatureVector,
    LoadForecast,
    NodeState,
    Proposal,
    RegimeLabel,
    RegimeLabelV2,
    TaskEvent,
)


@dataclass(frozen=True, kw_only=True)
class TopicSpec:
    name: str
    key: str
    model: type[Contract]
    partitions: int
    compacted: bool = False
    retention_ms: int = 24 * 3600 * 1000
    extra_config: dict[str, str] = field(default_factory=dict)

    @property
    def schema(self) -> str:
        return self.name

    @property
    def cleanup_policy(self) -> str:
        return "compact" if self.compacted else "delete"

    def config(self) -> dict[str, str]:
        cfg = {"cleanup.policy": self.cleanup_policy, **self.extra_config}
        if not self.compacted:
            cfg["retention.ms"] = str(self.retention_ms)
        return cfg


_LARGE_SEGMENTS = {"segment.bytes": str(1024**3)}
"""Kafka's default segment size, pinned for the two high-volume streams whatever the broker's
default (the local broker's is 64 MB): at 10,000 NodeState/s a 64 MB segment of nodestate.v1
fills in ~16 s per partition, and the seconds around each roll of the six partitions were
where the pipeline's p99 went over 250 ms (docs/stream.md, "Benchmark")."""

TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec(name="nodestate.v1", key="node", model=NodeState, partitions=6, extra_config=_LARGE_SEGMENTS),
    TopicSpec(name="taskevents.v1", key="task id", model=TaskEvent, partitions=6),
    TopicSpec(name="clusterstate.v1", key="cluster/namespace", model=ClusterState, partitions=1, compacted=True),
    TopicSpec(name="features.v1", key="node", model=FeatureVector, partitions=6, extra_config=_LARGE_SEGMENTS),
    TopicSpec(name="regimes.v1", key="node", model=RegimeLabel, partitions=6, compacted=True),
    TopicSpec(name="regimes.v2", key="node", model=RegimeLabelV2, partitions=6, compacted=True),
    TopicSpec(name="anomalies.v1", key="node", model=AnomalyScore, partitions=6, compacted=True),
    TopicSpec(name="risk.v1", key="task or node", model=FailureRisk, partitions=6, compacted=True),
    TopicSpec(name="risk.v2", key="task or node", model=FailureRiskV2, partitions=6, compacted=True),
    TopicSpec(name="forecasts.v1", key="node", model=LoadForecast, partitions=6, compacted=True),
    TopicSpec(name="proposals.v1", key="target", model=Proposal, partitions=3),
    TopicSpec(name="decisions.v1", key="target", model=Decision, partitions=3),
    TopicSpec(name="actions.v1", key="target", model=ActionResult, partitions=3),
    TopicSpec(name="drift.v1", key="model", model=DriftReport, partitions=1, retention_ms=7 * 24 * 3600 * 1000),
    TopicSpec(
        name="deadletter.v1", key="source topic", model=DeadLetter, partitions=1, retention_ms=7 * 24 * 3600 * 1000
    ),
    TopicSpec(
        name="deadletter.v2", key="source topic", model=DeadLetterV2, partitions=1, retention_ms=7 * 24 * 3600 * 1000
    ),
)

_BY_NAME = {spec.name: spec for spec in TOPICS}
DEADLETTER_TOPIC = "deadletter.v2"
"""Where every service writes dead letters; deadletter.v1 (unbounded copies) is read-only, kept for old letters."""
REGIMES_TOPIC = "regimes.v2"
"""Where the regime stage writes; regimes.v1 (no ``unknown``) is read-only, kept for old labels."""
FORECASTS_TOPIC = "forecasts.v1"
"""Where the forecast stage writes each node's load forecast (docs/forecast.md)."""
DRIFT_TOPIC = "drift.v1"
"""Where the drift stage writes one DriftReport per model and report period (docs/drift.md)."""
RISK_TOPIC = "risk.v2"
"""Where the risk stage writes; risk.v1 (no input-range flag) is read-only, kept for old records."""


def topic_spec(name: str) -> TopicSpec:
    """The spec of a registered topic; a topic with a test/namespace prefix maps to its base."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    for base, spec in _BY_NAME.items():
        if name.endswith("." + base) or name.endswith("-" + base):
            return spec
    known = ", ".join(_BY_NAME)
    raise KeyError(f"unknown topic {name!r}; registered topics: {known}")
