"""Registry of span names and span attribute names used anywhere in the project.

A test scans the code base and fails when a span attribute or span name is used
that is not declared here, so traces stay queryable by stable names.
"""

from __future__ import annotations

# OpenTelemetry messaging semantic conventions (Kafka).
MESSAGING_SYSTEM = "messaging.system"
MESSAGING_OPERATION = "messaging.operation.type"
MESSAGING_OPERATION_NAME = "messaging.operation.name"
MESSAGING_DESTINATION = "messaging.destination.name"
MESSAGING_CONSUMER_GROUP = "messaging.consumer.group.name"
MESSAGING_KAFKA_PARTITION = "messaging.destination.partition.id"
MESSAGING_KAFKA_OFFSET = "messaging.kafka.offset"
MESSAGING_KAFKA_KEY = "messaging.kafka.message.key"
MESSAGING_BATCH_COUNT = "messaging.batch.message_count"

# Project attributes, all under "borg." (OpenTelemetry reserves un-prefixed names for its
# semantic conventions); k8s.namespace.name is the convention's own.
SERVICE_STAGE = "borg.stage"
NODE_NAME = "borg.node.name"
TASK_ID = "borg.task.id"
REGIME_LABEL = "borg.regime.label"
REGIME_CONFIDENCE = "borg.regime.confidence"
REGIME_ABSTAIN = "borg.regime.abstain"  # comma-joined abstain reasons; only on windows answered "unknown"
ANOMALY_SCORE = "borg.anomaly.score"
RISK_HORIZON_S = "borg.risk.horizon_s"
RISK_PROBABILITY = "borg.risk.probability"
PROPOSAL_AGENT = "borg.proposal.agent"
PROPOSAL_KIND = "borg.proposal.kind"
PROPOSAL_ID = "borg.proposal.id"
PROPOSAL_COUNT = "borg.proposal.count"
DECISION_ID = "borg.decision.id"
DECISION_ACTION = "borg.decision.action"
DECISION_MODE = "borg.decision.mode"
ACTION_OUTCOME = "borg.action.outcome"
K8S_VERB = "borg.k8s.verb"
K8S_OBJECT = "borg.k8s.object"
K8S_NAMESPACE = "k8s.namespace.name"
K8S_STATUS_CODE = "borg.k8s.status_code"
DEADLETTER_KIND = "borg.deadletter.kind"
ERROR_MESSAGE = "borg.error.message"
MODEL_VERSION = "borg.model.version"
EXTENDER_NODES = "borg.extender.nodes"
EXTENDER_WORKLOAD_CLASS = "borg.extender.workload_class"
# Decision plane (agents, referee, cluster watcher).
PROPOSAL_SCORE = "borg.proposal.score"
DECISION_TARGET = "borg.decision.target"
DECISION_REASON = "borg.decision.reason"
K8S_RESOURCE = "borg.k8s.resource"
K8S_WATCH_EVENT = "borg.k8s.watch.event_type"
K8S_EVENTS_EMITTED = "borg.k8s.watch.task_events"
# Scheduler extender (one span per filter/prioritize request; per-node arrays are parallel to node.names).
EXTENDER_POD = "borg.extender.pod"
EXTENDER_CLASS_SOURCE = "borg.extender.workload_class.source"
EXTENDER_FILTERED = "borg.extender.filtered"
EXTENDER_FALLBACK = "borg.extender.fallback"
EXTENDER_NODES_UNKNOWN = "borg.extender.nodes_unknown"
EXTENDER_NODE_NAMES = "borg.extender.node.names"
EXTENDER_NODE_SCORES = "borg.extender.node.scores"
EXTENDER_NODE_VERDICTS = "borg.extender.node.verdicts"
EXTENDER_NODE_INPUTS = "borg.extender.node.inputs"
EXTENDER_DETAIL_TRUNCATED = "borg.extender.detail_truncated"

SPAN_ATTRIBUTES: frozenset[str] = frozenset(
    value for name, value in dict(globals()).items() if name.isupper() and isinstance(value, str)
)

# Span names: "<topic> process" / "<topic> publish" follow the messaging conventions;
# the rest name one step of work.
SPAN_PROCESS = "{topic} process"
SPAN_PUBLISH = "{topic} publish"
SPAN_DEADLETTER = "deadletter publish"
SPAN_NODE_SAMPLE = "node_agent sample"
SPAN_FEATURES_WINDOW = "features window"
SPAN_REGIME_INFER = "regime infer"
SPAN_ANOMALY_INFER = "anomaly infer"
SPAN_RISK_INFER = "risk infer"
SPAN_FORECAST_INFER = "forecast infer"
SPAN_POD_PRESSURE_INFER = "pod_pressure infer"
SPAN_POD_REGIME_INFER = "pod_regime infer"
SPAN_AGENT_EVALUATE = "agent evaluate"
SPAN_REFEREE_DECIDE = "referee decide"
SPAN_K8S_WRITE = "k8s write"
SPAN_EXTENDER_FILTER = "extender filter"
SPAN_EXTENDER_PRIORITIZE = "extender prioritize"
SPAN_WATCHER_EVENT = "cluster_watcher event"
SPAN_WATCHER_STATE = "cluster_watcher state"

SPAN_NAMES: frozenset[str] = frozenset(
    {
        SPAN_DEADLETTER,
        SPAN_NODE_SAMPLE,
        SPAN_FEATURES_WINDOW,
        SPAN_POD_REGIME_INFER,
        SPAN_REGIME_INFER,
        SPAN_ANOMALY_INFER,
        SPAN_RISK_INFER,
        SPAN_FORECAST_INFER,
        SPAN_POD_PRESSURE_INFER,
        SPAN_AGENT_EVALUATE,
        SPAN_REFEREE_DECIDE,
        SPAN_K8S_WRITE,
        SPAN_EXTENDER_FILTER,
        SPAN_EXTENDER_PRIORITIZE,
        SPAN_WATCHER_EVENT,
        SPAN_WATCHER_STATE,
    }
)
