"""The topic registry: the one place that says which topics exist and what they carry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from contracts.base import Contract
from contracts.models import (
    ActionResult,
    AnomalyScore,
    ClusterCapabilities,
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
    PodPressure,
    Proposal,
    RegimeLabel,
    RegimeLabelV2,
    RolloutEvent,
    TaskEvent,
)


class Topic:
    """Every registered topic's (base) name: code names a topic through these, never a string literal.

    The unversioned name is the version services write today; ``_V1`` names are older versions
    kept read-only for their old records. With a test/namespace prefix: ``f"{prefix}{Topic.X}"``
    (``RuntimeSettings.topic``).
    """

    NODESTATE: Final = "nodestate.v1"
    TASKEVENTS: Final = "taskevents.v1"
    CLUSTERSTATE: Final = "clusterstate.v1"
    FEATURES: Final = "features.v1"
    REGIMES_V1: Final = "regimes.v1"
    REGIMES: Final = "regimes.v2"
    ANOMALIES: Final = "anomalies.v1"
    RISK_V1: Final = "risk.v1"
    RISK: Final = "risk.v2"
    FORECASTS: Final = "forecasts.v1"
    PODPRESSURE: Final = "podpressure.v1"
    PODREGIMES: Final = "podregimes.v1"
    PROPOSALS: Final = "proposals.v1"
    DECISIONS: Final = "decisions.v1"
    ACTIONS: Final = "actions.v1"
    CAPABILITIES: Final = "capabilities.v1"
    DRIFT: Final = "drift.v1"
    ROLLOUTS: Final = "rollouts.v1"
    DEADLETTER_V1: Final = "deadletter.v1"
    DEADLETTER: Final = "deadletter.v2"


def topic_names() -> tuple[str, ...]:
    """Every name ``Topic`` declares (a test checks they are exactly the registry's)."""
    return tuple(v for k, v in vars(Topic).items() if k.isupper() and isinstance(v, str))


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
    TopicSpec(name=Topic.NODESTATE, key="node", model=NodeState, partitions=6, extra_config=_LARGE_SEGMENTS),
    TopicSpec(name=Topic.TASKEVENTS, key="task id", model=TaskEvent, partitions=6),
    TopicSpec(name=Topic.CLUSTERSTATE, key="cluster/namespace", model=ClusterState, partitions=1, compacted=True),
    TopicSpec(name=Topic.FEATURES, key="node", model=FeatureVector, partitions=6, extra_config=_LARGE_SEGMENTS),
    TopicSpec(name=Topic.REGIMES_V1, key="node", model=RegimeLabel, partitions=6, compacted=True),
    TopicSpec(name=Topic.REGIMES, key="node", model=RegimeLabelV2, partitions=6, compacted=True),
    TopicSpec(name=Topic.ANOMALIES, key="node", model=AnomalyScore, partitions=6, compacted=True),
    TopicSpec(name=Topic.RISK_V1, key="task or node", model=FailureRisk, partitions=6, compacted=True),
    TopicSpec(name=Topic.RISK, key="task or node", model=FailureRiskV2, partitions=6, compacted=True),
    TopicSpec(name=Topic.FORECASTS, key="node", model=LoadForecast, partitions=6, compacted=True),
    # one record per running pod per 10 s window: a stream, not compacted (pods come and go; no tombstones)
    TopicSpec(name=Topic.PODPRESSURE, key="node", model=PodPressure, partitions=6, retention_ms=6 * 3600 * 1000),
    # the pod-relative regime (a shadow beside regimes.v2: nothing acts on it yet); one record per node window
    TopicSpec(name=Topic.PODREGIMES, key="node", model=RegimeLabelV2, partitions=6, compacted=True),
    TopicSpec(name=Topic.PROPOSALS, key="target", model=Proposal, partitions=3),
    TopicSpec(name=Topic.DECISIONS, key="target", model=Decision, partitions=3),
    TopicSpec(name=Topic.ACTIONS, key="target", model=ActionResult, partitions=3),
    TopicSpec(name=Topic.CAPABILITIES, key="cluster", model=ClusterCapabilities, partitions=1, compacted=True),
    TopicSpec(name=Topic.DRIFT, key="model", model=DriftReport, partitions=1, retention_ms=7 * 24 * 3600 * 1000),
    TopicSpec(name=Topic.ROLLOUTS, key="model", model=RolloutEvent, partitions=1, retention_ms=30 * 24 * 3600 * 1000),
    TopicSpec(
        name=Topic.DEADLETTER_V1, key="source topic", model=DeadLetter, partitions=1, retention_ms=7 * 24 * 3600 * 1000
    ),
    TopicSpec(
        name=Topic.DEADLETTER, key="source topic", model=DeadLetterV2, partitions=1, retention_ms=7 * 24 * 3600 * 1000
    ),
)

_BY_NAME = {spec.name: spec for spec in TOPICS}
# Older spellings of the Topic names services write today (many users; new code: ``Topic.X``).
DEADLETTER_TOPIC = Topic.DEADLETTER
"""Where every service writes dead letters; deadletter.v1 (unbounded copies) is read-only, kept for old letters."""
REGIMES_TOPIC = Topic.REGIMES
"""Where the regime stage writes; regimes.v1 (no ``unknown``) is read-only, kept for old labels."""
FORECASTS_TOPIC = Topic.FORECASTS
"""Where the forecast stage writes each node's load forecast (docs/forecast.md)."""
DRIFT_TOPIC = Topic.DRIFT
"""Where the drift stage writes one DriftReport per model and report period (docs/drift.md)."""
CAPABILITIES_TOPIC = Topic.CAPABILITIES
"""Where the referee's actuator writes which actions the cluster's API serves (read by the agents)."""
RISK_TOPIC = Topic.RISK
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
