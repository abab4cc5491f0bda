"""Wire contracts between borg-orchestrator services.

Every Kafka topic has one pydantic v2 model here; values travel as JSON (orjson)
and are validated strictly on the way in. Nothing in this package imports a
service or the runtime.
"""

from contracts.codec import ContractError, decode, encode
from contracts.models import (
    ActionResult,
    AnomalyScore,
    ClusterState,
    Counter,
    DeadLetter,
    DeadLetterV2,
    Decision,
    FailureRisk,
    FailureRiskV2,
    FeatureVector,
    NodeState,
    Proposal,
    RegimeLabel,
    RegimeLabelV2,
    TaskEvent,
)
from contracts.topics import TOPICS, TopicSpec, topic_spec

__all__ = [
    "TOPICS",
    "ActionResult",
    "AnomalyScore",
    "ClusterState",
    "ContractError",
    "Counter",
    "DeadLetter",
    "DeadLetterV2",
    "Decision",
    "FailureRisk",
    "FailureRiskV2",
    "FeatureVector",
    "NodeState",
    "Proposal",
    "RegimeLabel",
    "RegimeLabelV2",
    "TaskEvent",
    "TopicSpec",
    "decode",
    "encode",
    "topic_spec",
]
