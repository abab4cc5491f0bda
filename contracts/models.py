"""Pydantic models for every topic in the architecture's topic table."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from contracts.base import (
    Contract,
    Name,
    NonNegFloat,
    NonNegInt,
    Probability,
    TimestampMs,
)

WORKLOAD_CLASSES: tuple[str, ...] = ("cpu_bound", "llc_sensitive", "memory_bound", "frontend_bound")
WorkloadClass = Literal["cpu_bound", "llc_sensitive", "memory_bound", "frontend_bound"]
RegimeName = Literal["none", "llc", "membw", "core", "mixed"]
REGIMES: tuple[str, ...] = ("none", "llc", "membw", "core", "mixed")
RegimeAnswer = Literal["none", "llc", "membw", "core", "mixed", "unknown"]
"""A regime, or ``unknown`` when the model abstains (regimes.v2)."""
UNKNOWN_REGIME = "unknown"
AbstainReason = Literal["counters_missing", "out_of_distribution", "low_confidence"]
"""Why a model abstained. ``counters_missing``: counters the model needs are missing, unsupported or
multiplexed too thinly to trust (the features stage marks those invalid); ``out_of_distribution``: the
window is unlike the training windows; ``low_confidence``: no regime is likely enough."""
ABSTAIN_REASONS: tuple[str, ...] = ("counters_missing", "out_of_distribution", "low_confidence")

CounterStatus = Literal["counted", "multiplexed", "not_counted", "not_supported"]


class Counter(Contract):
    """One PMU counter reading for one interval.

    `value` is the count scaled for multiplexing (raw * enabled / running);
    it is absent exactly when the counter produced no number.
    """

    raw: NonNegFloat | None = None
    value: NonNegFloat | None = None
    enabled_ns: NonNegInt = 0
    running_ns: NonNegInt = 0
    status: CounterStatus = "counted"

    @model_validator(mode="after")
    def _value_matches_status(self) -> Counter:
        counted = self.status in ("counted", "multiplexed")
        if counted and self.value is None:
            raise ValueError(f"status {self.status!r} requires a value")
        if not counted and (self.value is not None or self.raw is not None):
            raise ValueError(f"status {self.status!r} must not carry a number")
        if self.running_ns > self.enabled_ns:
            raise ValueError("running_ns cannot exceed enabled_ns")
        return self


class NodeState(Contract):
    """What a node agent saw on one node during one sampling interval."""

    node: Name
    ts_ms: TimestampMs
    seq: NonNegInt = Field(description="Per-node sequence number, +1 per sample; gaps mean loss")
    interval_ms: Annotated[int, Field(gt=0, le=3_600_000)]
    source: Literal[
        "perf_stat", "perf_event", "software", "replay_perfstat", "replay_alibaba", "replay_bitbrains", "synthetic"
    ]
    pmu: Literal["hardware", "software", "recorded"] = Field(
        description="hardware PMU, software events only (no PMU exposed), or recorded data"
    )
    supported_events: list[str] = Field(description="Events this node can count; differs per node")
    counters: dict[str, Counter] = Field(default_factory=dict)
    cpu_util: Probability
    mem_util: Probability
    cpu_freq_mhz: NonNegFloat | None = Field(
        default=None,
        description="Recorded for operators only: excluded from regime features (utilisation confound)",
    )
    metrics: dict[str, NonNegFloat] = Field(
        default_factory=dict,
        description="Derived metrics reported as such by the source (e.g. Alibaba mem_gps, mkpi)",
    )
    cgroups: dict[str, dict[str, Counter]] = Field(
        default_factory=dict, description="Per-cgroup (per-pod) counters when a cgroup root is configured"
    )


TaskEventType = Literal[
    "SUBMIT", "SCHEDULE", "EVICT", "FAIL", "FINISH", "KILL", "LOST", "UPDATE_PENDING", "UPDATE_RUNNING"
]
BORG_EVENT_TYPES: tuple[str, ...] = (
    "SUBMIT", "SCHEDULE", "EVICT", "FAIL", "FINISH", "KILL", "LOST", "UPDATE_PENDING", "UPDATE_RUNNING",
)


class TaskEvent(Contract):
    """A task lifecycle event in the Borg vocabulary (pods map onto tasks)."""

    task_id: Name
    job_id: Name
    task_index: NonNegInt
    ts_ms: TimestampMs
    event: TaskEventType
    source: Literal["kubernetes", "google2011", "google2019", "synthetic"]
    trace_time_us: NonNegInt | None = Field(default=None, description="Original trace time, when replayed")
    machine: Name | None = None
    user: str | None = None
    scheduling_class: Annotated[int, Field(ge=0, le=3)] | None = None
    priority: int | None = None
    cpu_request: NonNegFloat | None = None
    memory_request: NonNegFloat | None = None
    disk_request: NonNegFloat | None = None
    different_machines_restriction: bool | None = None
    missing_info: bool = False
    namespace: str | None = None


class DeploymentState(Contract):
    namespace: Name
    name: Name
    desired_replicas: NonNegInt
    ready_replicas: NonNegInt
    available_replicas: NonNegInt


class ClusterState(Contract):
    """Queue and replica health of one cluster (or namespace)."""

    cluster: Name
    namespace: str | None = None
    ts_ms: TimestampMs
    pending_pods: NonNegInt
    running_pods: NonNegInt
    oldest_pending_s: NonNegFloat = 0.0
    queue_health: Literal["healthy", "degraded", "critical"]
    nodes_total: NonNegInt = 0
    nodes_ready: NonNegInt = 0
    deployments: list[DeploymentState] = Field(default_factory=list)


class FeatureVector(Contract):
    """Windowed per-node features; `valid[i]` says whether `values[i]` was measurable."""

    node: Name
    ts_ms: TimestampMs = Field(description="Window end")
    window_s: Annotated[int, Field(gt=0)]
    schema_hash: Annotated[str, Field(min_length=8, max_length=64)]
    values: list[float]
    valid: list[bool]
    samples: Annotated[int, Field(gt=0)]
    input_ts_ms: TimestampMs = Field(description="Produce time of the newest NodeState in the window")

    @model_validator(mode="after")
    def _mask_matches(self) -> FeatureVector:
        if len(self.values) != len(self.valid):
            raise ValueError(f"values has {len(self.values)} entries but valid has {len(self.valid)}")
        return self


class RegimeLabel(Contract):
    """Contention regime of a node and the slowdown each workload class would see there."""

    node: Name
    ts_ms: TimestampMs
    regime: RegimeName
    confidence: Probability
    raw_regime: RegimeName = Field(description="Model output for this window before hysteresis")
    changed: bool = Field(description="True when the reported regime changed with this message")
    interference: dict[str, Annotated[float, Field(ge=1.0, le=100.0)]] = Field(
        description="Predicted slowdown factor per workload class (worst case over co-runners)"
    )
    model_version: Name
    input_ts_ms: TimestampMs


class RegimeLabelV2(Contract):
    """regimes.v2: a node's contention regime, or ``unknown`` with the reasons the model abstained.

    Replaces regimes.v1, whose consumers cannot parse a label that is not a regime. When
    ``regime`` is ``unknown`` the node must be treated as neutral (never tainted, evicted or
    penalised for it), ``abstain`` names why, and ``interference`` is empty.
    """

    node: Name
    ts_ms: TimestampMs
    regime: RegimeAnswer
    confidence: Probability = Field(description="Model probability of the reported regime (0 when unknown)")
    raw_regime: RegimeAnswer = Field(description="Model answer for this window before hysteresis")
    changed: bool = Field(description="True when the reported regime changed with this message")
    interference: dict[str, Annotated[float, Field(ge=1.0, le=100.0)]] = Field(
        description="Predicted slowdown factor per workload class (worst case over co-runners); empty when unknown"
    )
    abstain: Annotated[list[AbstainReason], Field(max_length=3)] = Field(
        default_factory=list, description="Why the model abstained; empty exactly when a regime is reported"
    )
    ood_score: NonNegFloat | None = Field(
        default=None, description="Distance of the window from the training windows (1.0 = the abstention threshold)"
    )
    model_version: Name
    input_ts_ms: TimestampMs

    @model_validator(mode="after")
    def _abstains_exactly_when_unknown(self) -> RegimeLabelV2:
        if (self.regime == UNKNOWN_REGIME) != bool(self.abstain):
            raise ValueError("abstain must list reasons exactly when regime is 'unknown'")
        if self.regime == UNKNOWN_REGIME and self.interference:
            raise ValueError("an 'unknown' regime carries no interference prediction")
        return self


class AnomalyScore(Contract):
    node: Name
    ts_ms: TimestampMs
    score: Probability = Field(description="0 normal .. 1 most anomalous")
    is_anomaly: bool
    threshold: Probability
    model_version: Name
    input_ts_ms: TimestampMs


class HorizonRisk(Contract):
    horizon_s: Annotated[int, Field(gt=0)]
    probability: Probability


class FailureRisk(Contract):
    target_kind: Literal["task", "node"]
    target: Name
    node: Name | None = None
    ts_ms: TimestampMs
    horizons: Annotated[list[HorizonRisk], Field(min_length=1)]
    tasks: NonNegInt = Field(default=1, description="Tasks aggregated (node risk)")
    model_version: Name
    input_ts_ms: TimestampMs


class FailureRiskV2(Contract):
    """risk.v2: FailureRisk plus whether its inputs lay inside the model's training range.

    Replaces risk.v1. A probability computed from inputs outside the range the model was
    trained on (``out_of_range`` names them) is reported, but no agent acts on it alone.
    """

    target_kind: Literal["task", "node"]
    target: Name
    node: Name | None = None
    ts_ms: TimestampMs
    horizons: Annotated[list[HorizonRisk], Field(min_length=1)]
    tasks: NonNegInt = Field(default=1, description="Tasks aggregated (node risk)")
    out_of_range: Annotated[list[Name], Field(max_length=64)] = Field(
        default_factory=list,
        description="Inputs outside the training range (task risk), empty when every input was in range",
    )
    tasks_out_of_range: NonNegInt = Field(
        default=0, description="Aggregated tasks whose inputs were out of range (node risk)"
    )
    model_version: Name
    input_ts_ms: TimestampMs

    @property
    def in_range(self) -> bool:
        """True when the probability may be acted on: every input (every aggregated task's) in range."""
        return not self.out_of_range and self.tasks_out_of_range == 0


class TargetRef(Contract):
    kind: Literal["Deployment", "Node", "Pod", "Namespace"]
    name: Name
    namespace: str | None = None

    def key(self) -> str:
        ns = self.namespace or "_"
        return f"{self.kind}/{ns}/{self.name}"


AgentName = Literal["reliability", "efficiency", "admission"]
ProposalKind = Literal[
    "scale_out",
    "replicate",
    "consolidate",
    "memory_balloon",
    "scale_in",
    "deprioritize",
    "throttle",
    "taint",
    "cordon",
    "evict",
    "hold_admission",
]
JsonScalar = str | int | float | bool | None


class Evidence(Contract):
    topic: str
    key: str
    field: str
    value: JsonScalar
    ts_ms: TimestampMs


class Proposal(Contract):
    proposal_id: Name
    agent: AgentName
    kind: ProposalKind
    target: TargetRef
    payload: dict[str, JsonScalar] = Field(default_factory=dict)
    score: Probability
    evidence: list[Evidence] = Field(default_factory=list)
    ts_ms: TimestampMs
    input_ts_ms: TimestampMs | None = None


class Decision(Contract):
    decision_id: Name = Field(description="Deterministic from target and proposals: replays are idempotent")
    ts_ms: TimestampMs
    target: TargetRef
    action: ProposalKind | Literal["none"]
    chosen_proposal_id: str | None
    reason: Annotated[str, Field(min_length=1)]
    proposals: list[Proposal] = Field(description="Every proposal weighed, chosen or not")
    mode: Literal["apply", "dry-run", "shadow"]
    trace_id: str | None = None


class ActionResult(Contract):
    decision_id: Name
    ts_ms: TimestampMs
    target: TargetRef
    action: ProposalKind | Literal["none"]
    outcome: Literal["applied", "dry-run", "shadow", "refused", "failed", "duplicate"]
    message: str
    api_status: int | None = None
    api_response: dict[str, JsonScalar] | None = None
    trace_id: str | None = None


class UnsupportedAction(Contract):
    action: ProposalKind
    missing: Annotated[list[Annotated[str, Field(max_length=253)]], Field(min_length=1, max_length=16)] = Field(
        description="the `<groupVersion> <resource>` entries of API discovery the action's requests need and "
                    "the API server does not serve")


class ClusterCapabilities(Contract):
    """capabilities.v1: which actions the cluster's API can carry out, from API discovery.

    Written by the referee's actuator at start and on every refresh (``REFEREE_CAPABILITIES_REFRESH_S``);
    the agents propose nothing the latest record lists as unsupported (docs/decision_plane.md).
    """

    cluster: Name
    ts_ms: TimestampMs
    supported: Annotated[list[ProposalKind], Field(max_length=32)]
    unsupported: Annotated[list[UnsupportedAction], Field(max_length=32)] = Field(default_factory=list)
    reporter: Name = Field(description="the referee instance that read API discovery")


class DeadLetter(Contract):
    """An input that could not be handled, with everything needed to replay it."""

    source_topic: Name
    partition: NonNegInt
    offset: NonNegInt
    key_b64: str | None
    value_b64: str | None
    headers: list[tuple[str, str]] = Field(default_factory=list, description="(name, base64 value)")
    error: Annotated[str, Field(min_length=1)]
    error_kind: Literal["malformed", "schema", "processing"]
    service: Name
    ts_ms: TimestampMs


DeadLetterKind = Literal["malformed", "schema", "processing", "poison"]
"""``poison``: the record crashed the service process (twice) and was quarantined instead of
being handled a third time."""


class BoundedBytes(Contract):
    """Bytes copied into a dead letter: all of them, or a prefix with the size and hash of the whole."""

    b64: str = Field(description="base64 of the bytes kept: all of them unless `truncated`")
    size: NonNegInt = Field(description="size of the original bytes")
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 (hex) of the original bytes")]
    truncated: bool = Field(description="true when `b64` holds only a prefix of the original")


class DeadHeader(Contract):
    name: Annotated[str, Field(max_length=253, description="header name (cut to 253 characters)")]
    value: BoundedBytes | None


class DeadLetterV2(Contract):
    """An input that could not be handled: its bytes (bounded), the error, and where it came from.

    Replaces deadletter.v1, whose unbounded base64 copy of a large input could exceed the broker's
    request size and fail the dead-lettering itself. Each copy is bounded (``BoundedBytes``); a
    truncated one keeps the original's size and SHA-256 so it can be matched to the source record,
    which ``source_topic``/``partition``/``offset`` locate.
    """

    source_topic: Name
    partition: NonNegInt
    offset: NonNegInt
    key: BoundedBytes | None
    value: BoundedBytes | None
    headers: list[DeadHeader] = Field(default_factory=list)
    headers_dropped: NonNegInt = Field(default=0, description="headers left out beyond the kept count")
    error: Annotated[str, Field(min_length=1, max_length=4000)]
    error_kind: DeadLetterKind
    service: Name
    ts_ms: TimestampMs


ForecastResource = Literal["cpu", "memory"]
ForecastUnknownReason = Literal["insufficient_history", "inputs_missing", "model_failed"]
"""Why a node has no forecast: ``insufficient_history`` — fewer closed 5-minute buckets than the stage
needs (a new or restarted node); ``inputs_missing`` — the last bucket has no CPU or no memory sample;
``model_failed`` — the model returned no finite number for this node."""


class LoadQuantiles(Contract):
    """One resource at one horizon: utilisation fractions (0..1, like NodeState.cpu_util), p90 >= p50."""

    horizon_s: Annotated[int, Field(gt=0)]
    resource: ForecastResource
    p50: Probability
    p90: Probability

    @model_validator(mode="after")
    def _p90_not_below_p50(self) -> LoadQuantiles:
        if self.p90 < self.p50:
            raise ValueError("p90 must not be below p50")
        return self


class LoadForecast(Contract):
    """forecasts.v1: a node's CPU and memory utilisation 5/15/30 minutes after ``window_end_ms`` (p50, p90).

    ``unknown`` records carry no quantiles and say why (``reason``); nothing acts on them.
    """

    node: Name
    ts_ms: TimestampMs = Field(description="end of the feature window that closed the bucket")
    window_end_ms: TimestampMs = Field(description="end of the last closed 5-minute bucket the forecast is made at")
    status: Literal["ok", "unknown"]
    reason: ForecastUnknownReason | None = None
    history_buckets: NonNegInt = Field(description="closed buckets with a sample in the last 24 h + 5 min")
    quantiles: Annotated[list[LoadQuantiles], Field(max_length=16)] = Field(default_factory=list)
    model_version: Name
    input_ts_ms: TimestampMs

    @model_validator(mode="after")
    def _quantiles_exactly_when_ok(self) -> LoadForecast:
        if (self.status == "ok") != bool(self.quantiles):
            raise ValueError("quantiles are listed exactly when status is 'ok'")
        if (self.status == "unknown") != (self.reason is not None):
            raise ValueError("reason is given exactly when status is 'unknown'")
        return self

    def p90(self, resource: ForecastResource, horizon_s: int) -> float | None:
        """The p90 at that resource and horizon, None when the record has none."""
        for q in self.quantiles:
            if q.resource == resource and q.horizon_s == horizon_s:
                return q.p90
        return None


PodPressureUnknownReason = Literal["counters_missing", "idle", "out_of_range", "model_failed"]
"""Why a pod has no pressure estimate: ``counters_missing`` — its cgroup lacks an event the model reads (the
node agent's ``CGROUP_EVENTS``) or one was not counted; ``idle`` — no instructions or no CPU time in the
window; ``out_of_range`` — a feature lies outside what the model was trained on; ``model_failed`` — the model
returned no finite number."""


class PodPressure(Contract):
    """podpressure.v1: how hard one pod pressed on its node's shared resources over one window, estimated from
    its own cgroup counters (0..1 per resource, the interference model's scale).

    ``unknown`` records carry no pressures and say why (``reason``); nothing acts on them.
    """

    node: Name
    pod_uid: Annotated[str, Field(min_length=1, max_length=64)]
    cgroup: Annotated[str, Field(min_length=1, max_length=4096)]
    ts_ms: TimestampMs = Field(description="end of the window (the newest NodeState summed into it)")
    window_ms: Annotated[int, Field(gt=0, le=3_600_000)] = Field(description="time the pod's counts cover")
    status: Literal["ok", "unknown"]
    reason: PodPressureUnknownReason | None = None
    llc: Probability | None = None
    membw: Probability | None = None
    core: Probability | None = None
    frontend: Probability | None = None
    ipc: NonNegFloat | None = Field(default=None, description="instructions per cycle over the window")
    busy_cores: NonNegFloat | None = Field(default=None, description="CPU time over the window ÷ the window")
    model_version: Name
    input_ts_ms: TimestampMs

    @model_validator(mode="after")
    def _pressures_exactly_when_ok(self) -> PodPressure:
        given = [v is not None for v in (self.llc, self.membw, self.core, self.frontend)]
        if (self.status == "ok") != all(given) or (self.status == "unknown" and any(given)):
            raise ValueError("llc, membw, core and frontend are given exactly when status is 'ok'")
        if (self.status == "unknown") != (self.reason is not None):
            raise ValueError("reason is given exactly when status is 'unknown'")
        return self


class FeatureDrift(Contract):
    """One model input's drift over the drift stage's window."""

    feature: Name
    psi: NonNegFloat = Field(description="PSI of the window's valid values against the reference bins")
    missing_rate: Probability = Field(description="share of the window's rows where the input was missing")
    reference_missing_rate: Probability


class ConceptDrift(Contract):
    """One horizon of a model's online accuracy on matured labels vs its card's held-out figures (drift.v1)."""

    horizon_s: Annotated[int, Field(gt=0)]
    status: Literal["drift", "no_drift", "insufficient_data"]
    labels: NonNegInt = Field(description="matured, uncensored predictions in the window")
    positives: NonNegInt = Field(description="of which the task failed within the horizon")
    aucpr: Probability | None = Field(default=None, description="average precision on the window (None: one class)")
    brier: Probability | None = None
    reference_aucpr: Probability | None = Field(default=None, description="the card's held-out AUCPR")
    reference_brier: Probability | None = None
    reference_positive_rate: Probability | None = None


class DriftReport(Contract):
    """drift.v1: one model's live inputs and answers compared with the reference profile it shipped with.

    ``status`` is ``insufficient_data`` (no claim) until the window holds ``min_samples`` rows;
    then ``drift`` when the data score or the prediction PSI is over its threshold (``reasons``
    says which), else ``no_drift``. PSI: sum (live - ref) ln(live / ref) over the reference's
    quantile bins (docs/drift.md).
    """

    model: Name = Field(description="which model: regime, failure, ...")
    model_version: Name = Field(description="the version whose reference profile was compared")
    ts_ms: TimestampMs = Field(description="event time of the newest input in the window")
    window_s: NonNegFloat = Field(description="event-time span the window covers")
    samples: NonNegInt = Field(description="input rows in the window")
    prediction_samples: NonNegInt = Field(description="model answers in the window")
    status: Literal["drift", "no_drift", "insufficient_data"]
    reasons: Annotated[list[Annotated[str, Field(max_length=500)]], Field(max_length=8)] = Field(default_factory=list)
    data_score: NonNegFloat | None = Field(default=None, description="multivariate score: mean PSI over the inputs")
    data_threshold: NonNegFloat
    max_psi: NonNegFloat | None = None
    features_over: NonNegInt = Field(default=0, description="inputs whose PSI exceeds feature_threshold")
    feature_threshold: NonNegFloat
    features: Annotated[list[FeatureDrift], Field(max_length=64)] = Field(
        default_factory=list, description="the inputs with the highest PSI, highest first")
    prediction_psi: NonNegFloat | None = Field(default=None, description="PSI of the answers' distribution")
    prediction_threshold: NonNegFloat
    predictions: dict[Annotated[str, Field(max_length=64)], Probability] = Field(
        default_factory=dict, description="share of each answer in the window")
    missing_rate: Probability | None = Field(default=None, description="mean share of missing inputs in the window")
    reference_missing_rate: Probability | None = None
    concept_status: Literal["drift", "no_drift", "insufficient_data"] | None = Field(
        default=None, description="concept drift from delayed labels (failure model); None: not checked")
    concept: Annotated[list[ConceptDrift], Field(max_length=8)] = Field(
        default_factory=list, description="online accuracy per horizon on matured labels (failure model)")


RolloutStatus = Literal["shadow", "running", "paused", "rolled_back", "promoted"]


class RolloutEvent(Contract):
    """rollouts.v1: a model rollout's state, each time a model stage moved it or saw it move.

    ``origin`` ``judged``: the stage judged its shadow comparison and made the transition (a step,
    the promotion, a rollback; ``reason`` says why). ``observed``: the stage found a state it had not
    seen in ``ROLLOUT.json`` (``borgctl model …`` of an operator, or another replica's transition).
    The file stays the rollout's state; this topic is its record for the dashboard and other
    readers (docs/rollout.md).
    """

    model: Name = Field(description="which model: regime, risk")
    ts_ms: TimestampMs
    rollout_id: NonNegInt = Field(description="the rollout's start (ms), ROLLOUT.json started_ms")
    candidate: Name
    baseline: Name | None = None
    status: RolloutStatus
    previous_status: RolloutStatus | None = Field(
        default=None, description="before this transition; None: the stage's first sight of the rollout")
    step: Annotated[int, Field(ge=1, le=16)] = Field(description="1-based step (meaningless for shadow)")
    steps: Annotated[int, Field(ge=1, le=16)]
    fraction: Probability = Field(description="share of nodes the candidate answers for now")
    reason: Annotated[str, Field(max_length=1000)] = ""
    origin: Literal["judged", "observed"]
    reporter: Name = Field(description="the stage instance that wrote this")
    compared: NonNegInt = Field(default=0, description="windows/tasks both models scored since the rollout began")
    labelled: NonNegInt = Field(default=0, description="of which had a label (online metrics)")
    metrics: Annotated[dict[Annotated[str, Field(max_length=64)], float], Field(max_length=32)] = Field(
        default_factory=dict, description="the shadow comparison then: agreement, <metric>_current, "
                                          "<metric>_candidate (e.g. matched_accuracy, correct, coverage)")
