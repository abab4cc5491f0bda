"""A generated corpus of malformed and odd records for one input topic (issue 19 item 7).

``corpus(topic, limit)`` returns the same cases every time (no clock, no randomness beyond a
seeded ``random.Random``): truncated JSON, wrong types, NaN/Infinity literals, binary garbage,
arrays/strings/numbers at the JSON root, integer overflow, values at and just under the broker's
``message.max.bytes``, unknown fields, a UTF-8 BOM, invalid UTF-8, deep nesting, duplicate keys,
empty and null values, a missing key and garbage headers. Each case is built from a valid
message of the topic's contract, so a case differs from an accepted record in one respect.

Whether a service must dead-letter a case is not guessed: ``Case.refusal`` is what
``contracts.decode`` says about the value (``None`` when it accepts it, else the error kind), so
the expectation is exactly "dead-lettered iff the contract refuses it". Cases that only odd
headers or keys distinguish carry a valid value: they must be handled like any other record.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, get_args

import orjson

from contracts import ContractError, decode
from contracts.base import Contract
from contracts.models import (
    AnomalyScore,
    ClusterCapabilities,
    ClusterState,
    Counter,
    DeploymentState,
    Evidence,
    FailureRiskV2,
    FeatureVector,
    HorizonRisk,
    LoadForecast,
    LoadQuantiles,
    NodeState,
    PodPressure,
    Proposal,
    ProposalKind,
    RegimeLabelV2,
    TargetRef,
    TaskEvent,
)
from contracts.topics import CAPABILITIES_TOPIC, FORECASTS_TOPIC, REGIMES_TOPIC, RISK_TOPIC, Topic, topic_spec
from featurelib.node.schema import N_FEATURES, node_feature_schema_hash

__all__ = [
    "BATCH_OVERHEAD",
    "CORPUS_TS_MS",
    "Case",
    "Shape",
    "consumer_breaking_cases",
    "corpus",
    "refusal",
    "template",
]

CORPUS_TS_MS: Final = 1_767_225_600_000
"""2026-01-01T00:00:00Z: every template's timestamps (old enough that agents ignore accepted cases)."""
BATCH_OVERHEAD: Final = 200
"""Bytes below ``message.max.bytes`` for the largest value: the record batch header (61 bytes), the
record's own framing and the case's key still fit in what the broker accepts."""
NEAR_LIMIT: Final = 900_000
"""The ~900 KB malformed NodeState of issue 19 (it used to stop features for good)."""
DEEP: Final = 100_000
"""Nested arrays in the deep-nesting case (pydantic-core and orjson both stop long before)."""
MANY_HEADERS: Final = 200
"""Headers on the many-headers cases (a dead letter keeps 32 and counts the rest)."""


@dataclass(frozen=True)
class Shape:
    """Where in a topic's valid message each kind of damage goes."""

    model: type[Contract]
    string_field: str
    """A top-level string field (wrong type, invalid UTF-8, duplicate key)."""
    int_field: str
    """A top-level integer field without an upper bound (overflow: valid or not, decode says)."""
    float_path: tuple[str | int, ...]
    """Path to a float (NaN/Infinity, wrong type)."""
    build: Callable[[], Contract]


def _node_state() -> NodeState:
    counters = {
        "cycles": Counter(raw=2.0e9, value=2.0e9, enabled_ns=1_000_000_000, running_ns=1_000_000_000),
        "instructions": Counter(raw=3.1e9, value=3.1e9, enabled_ns=1_000_000_000, running_ns=1_000_000_000),
        "LLC-load-misses": Counter(status="not_supported"),
    }
    return NodeState(node="corpus-node", ts_ms=CORPUS_TS_MS, seq=7, interval_ms=1000, source="synthetic",
                     pmu="hardware", supported_events=["cycles", "instructions"], counters=counters,
                     cpu_util=0.42, mem_util=0.31)


def _feature_vector() -> FeatureVector:
    # the live schema hash and width: an accepted case is a vector regime/anomaly/risk can use
    return FeatureVector(node="corpus-node", ts_ms=CORPUS_TS_MS, window_s=10,
                         schema_hash=node_feature_schema_hash(), values=[0.25] * N_FEATURES,
                         valid=[True] * N_FEATURES, samples=10, input_ts_ms=CORPUS_TS_MS - 5)


def _task_event() -> TaskEvent:
    return TaskEvent(task_id="corpus-task", job_id="corpus-job", task_index=3, ts_ms=CORPUS_TS_MS,
                     event="SCHEDULE", source="synthetic", machine="corpus-node", cpu_request=0.25,
                     memory_request=0.125, priority=2)


def _cluster_state() -> ClusterState:
    deployment = DeploymentState(namespace="corpus", name="web", desired_replicas=2, ready_replicas=2,
                                 available_replicas=2)
    return ClusterState(cluster="corpus", namespace="corpus", ts_ms=CORPUS_TS_MS, pending_pods=0, running_pods=2,
                        oldest_pending_s=0.0, queue_health="healthy", nodes_total=3, nodes_ready=3,
                        deployments=[deployment])


def _regime_label() -> RegimeLabelV2:
    return RegimeLabelV2(node="corpus-node", ts_ms=CORPUS_TS_MS, regime="none", confidence=0.8, raw_regime="none",
                         changed=False, interference={"cpu_bound": 1.0}, model_version="corpus",
                         input_ts_ms=CORPUS_TS_MS - 5)


def _anomaly_score() -> AnomalyScore:
    return AnomalyScore(node="corpus-node", ts_ms=CORPUS_TS_MS, score=0.1, is_anomaly=False, threshold=0.9,
                        model_version="corpus", input_ts_ms=CORPUS_TS_MS - 5)


def _failure_risk() -> FailureRiskV2:
    return FailureRiskV2(target_kind="node", target="corpus-node", node="corpus-node", ts_ms=CORPUS_TS_MS,
                         horizons=[HorizonRisk(horizon_s=600, probability=0.05)], tasks=1, model_version="corpus",
                         input_ts_ms=CORPUS_TS_MS - 5)


def _load_forecast() -> LoadForecast:
    return LoadForecast(node="corpus-node", ts_ms=CORPUS_TS_MS, window_end_ms=CORPUS_TS_MS - CORPUS_TS_MS % 300_000,
                        status="ok", history_buckets=20, model_version="corpus", input_ts_ms=CORPUS_TS_MS - 5,
                        quantiles=[LoadQuantiles(horizon_s=300, resource="cpu", p50=0.2, p90=0.3)])


def _pod_pressure() -> PodPressure:
    return PodPressure(node="corpus-node", pod_uid="0f6c1a2b-1234-4abc-9def-0123456789ab",
                       cgroup="kubepods/pod0f6c1a2b-1234-4abc-9def-0123456789ab", ts_ms=CORPUS_TS_MS, window_ms=10_000,
                       status="ok", llc=0.3, membw=0.2, core=0.4, frontend=0.1, ipc=1.2, busy_cores=1.5,
                       model_version="corpus", input_ts_ms=CORPUS_TS_MS - 5)


def _proposal() -> Proposal:
    evidence = Evidence(topic=RISK_TOPIC, key="node:corpus-node", field="probability", value=0.05,
                        ts_ms=CORPUS_TS_MS)
    return Proposal(proposal_id="corpus-proposal", agent="reliability", kind="scale_out",
                    target=TargetRef(kind="Deployment", name="web", namespace="corpus"), payload={"replicas": 3},
                    score=0.2, evidence=[evidence], ts_ms=CORPUS_TS_MS)


def _capabilities() -> ClusterCapabilities:
    # every action supported: the agents read this topic, and a corpus case with a valid value must not
    # change what they may propose to the good records after the corpus
    return ClusterCapabilities(cluster="corpus-cluster", ts_ms=CORPUS_TS_MS, supported=list(get_args(ProposalKind)),
                               reporter="corpus-referee")


SHAPES: Final[dict[str, Shape]] = {
    "nodestate.v1": Shape(NodeState, "node", "seq", ("cpu_util",), _node_state),
    "features.v1": Shape(FeatureVector, "node", "samples", ("values", 0), _feature_vector),
    "taskevents.v1": Shape(TaskEvent, "task_id", "task_index", ("cpu_request",), _task_event),
    "clusterstate.v1": Shape(ClusterState, "cluster", "pending_pods", ("oldest_pending_s",), _cluster_state),
    REGIMES_TOPIC: Shape(RegimeLabelV2, "node", "ts_ms", ("confidence",), _regime_label),
    "anomalies.v1": Shape(AnomalyScore, "node", "ts_ms", ("score",), _anomaly_score),
    RISK_TOPIC: Shape(FailureRiskV2, "target", "tasks", ("horizons", 0, "probability"), _failure_risk),
    FORECASTS_TOPIC: Shape(LoadForecast, "node", "history_buckets", ("quantiles", 0, "p50"), _load_forecast),
    Topic.PODPRESSURE: Shape(PodPressure, "node", "ts_ms", ("llc",), _pod_pressure),
    "proposals.v1": Shape(Proposal, "proposal_id", "ts_ms", ("score",), _proposal),
    CAPABILITIES_TOPIC: Shape(ClusterCapabilities, "cluster", "ts_ms", ("ts_ms",), _capabilities),
}


@dataclass(frozen=True)
class Case:
    """One record to produce: ``value`` None is a tombstone, ``key`` None a record without a key."""

    name: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    refusal: str | None = field(default=None)
    """``contracts.decode``'s error kind for the value (``malformed``/``schema``), None when it accepts it."""

    @property
    def refused(self) -> bool:
        return self.refusal is not None

    @property
    def kcat_ok(self) -> bool:
        """Whether kcat can send it: its ``-H name=value`` comes from argv (no NUL byte) and needs a name
        without ``=`` that is not empty."""
        return all(n and b"\x00" not in v and "=" not in n and "\x00" not in n for n, v in self.headers)


def refusal(topic: str, value: bytes | None) -> str | None:
    """``contracts.decode``'s verdict on a value of ``topic``: None (accepted) or the error kind."""
    try:
        decode(topic_spec(topic).model, value)
    except ContractError as exc:
        return exc.kind
    return None


def template(topic: str) -> dict[str, Any]:
    """The topic's valid message every case starts from (as JSON-ready data)."""
    return SHAPES[topic].build().model_dump(mode="json")


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def _with(obj: dict[str, Any], path: tuple[str | int, ...], raw: str) -> bytes:
    """The JSON of ``obj`` with the value at ``path`` replaced by the literal text ``raw``."""
    marker = "\u0000corpus-marker\u0000"
    copy = orjson.loads(orjson.dumps(obj))
    node: Any = copy
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = marker
    return _dumps(copy).replace(_dumps(marker), raw.encode())


def _padded(prefix: bytes, size: int, fill: bytes = b"a", suffix: bytes = b"") -> bytes:
    body = size - len(prefix) - len(suffix)
    return prefix + fill * body + suffix


def _garbage_headers() -> tuple[tuple[str, bytes], ...]:
    rng = random.Random(19)
    headers: list[tuple[str, bytes]] = [("traceparent", b"00-not-a-trace-id-zz-01"),
                                        ("odd name:\t/\u00e9\u2603!", b"v"),
                                        ("binary", bytes([0xff, 0xfe, 0x80, 0x01, 0x7f]))]
    headers += [(f"h{i:03d}", bytes(rng.randrange(1, 256) for _ in range(8))) for i in range(MANY_HEADERS - 3)]
    return tuple(headers)


KEYLESS: Final = b"<no key>"
"""Marks the cases produced without a key."""
RawCase = tuple[str, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]


def _raw_cases(topic: str, limit: int) -> list[RawCase]:
    shape = SHAPES[topic]
    base = template(topic)
    valid = _dumps(base)
    s_field, i_field, f_path = shape.string_field, shape.int_field, shape.float_path
    rng = random.Random(7)
    rest = {k: v for k, v in base.items() if k != s_field}
    first_dup = _dumps({s_field: "corpus-first"})[:-1] + b"," + _dumps({s_field: base[s_field], **rest})[1:]
    invalid_first = _dumps({s_field: 12345})[:-1] + b"," + _dumps({s_field: base[s_field], **rest})[1:]
    unknown = _dumps({**base, "surprise_field": {"nested": [1, 2, 3]}})
    open_string = _dumps({s_field: base[s_field]})[:-1] + b',"pad":"'
    cases: list[RawCase] = [
        ("truncated_json", None, valid[: len(valid) // 2], ()),
        ("truncated_one_byte", None, b"{", ()),
        ("wrong_type_string_for_int", None, _with(base, (i_field,), '"12345"'), ()),
        ("wrong_type_bool_for_float", None, _with(base, f_path, "true"), ()),
        ("wrong_type_object_for_string", None, _with(base, (s_field,), '{"a":1}'), ()),
        ("missing_required_field", None, _dumps({k: v for k, v in base.items() if k != s_field}), ()),
        ("nan_literal", None, _with(base, f_path, "NaN"), ()),
        ("infinity_literal", None, _with(base, f_path, "Infinity"), ()),
        ("negative_infinity_literal", None, _with(base, f_path, "-Infinity"), ()),
        ("binary_garbage", None, rng.randbytes(512), ()),
        ("binary_nul_bytes", None, b"\x00" * 64 + b"{}" + b"\x00" * 64, ()),
        ("root_array", None, b"[1,2,3]", ()),
        ("root_array_of_valid", None, b"[" + valid + b"]", ()),
        ("root_string", None, b'"' + topic.encode() + b'"', ()),
        ("root_number", None, b"42", ()),
        ("root_null", None, b"null", ()),
        ("root_true", None, b"true", ()),
        ("int_2_pow_70", None, _with(base, (i_field,), str(2**70)), ()),
        ("int_400_digits", None, _with(base, (i_field,), "9" * 400), ()),
        ("int_2_pow_70_timestamp", None, _with(base, ("ts_ms",), str(2**70)), ()),
        ("float_1e400", None, _with(base, f_path, "1e400"), ()),
        ("just_under_broker_limit", None, _padded(open_string, limit - BATCH_OVERHEAD, suffix=b'"}'), ()),
        ("near_limit_truncated_900k", None, _padded(open_string, NEAR_LIMIT), ()),
        ("near_limit_valid_whitespace_900k", None, _padded(valid[:-1], NEAR_LIMIT, b" ", b"}"), ()),
        ("unknown_field", None, unknown, ()),
        ("utf8_bom", None, b"\xef\xbb\xbf" + valid, ()),
        ("invalid_utf8_in_string", None, _with(base, (s_field,), '"corpus-INVALID"').replace(
            b"corpus-INVALID", b"corpus-\xff\xfe\xc3"), ()),
        ("lone_surrogate_escape", None, _with(base, (s_field,), '"corpus-\\ud800"'), ()),
        ("deep_nesting", None, b"[" * DEEP + b"]" * DEEP, ()),
        ("deep_nesting_in_field", None, _with(base, (s_field,), "[" * DEEP + "]" * DEEP), ()),
        ("duplicate_keys", None, first_dup, ()),
        ("duplicate_keys_invalid_first", None, invalid_first, ()),
        ("empty_value", None, b"", ()),
        ("null_value_tombstone", None, None, ()),
        ("missing_key_valid_value", KEYLESS, valid, ()),
        ("missing_key_garbage_value", KEYLESS, b"\x00garbage without a key\xff", ()),
        ("header_binary_values", None, valid, (("binary", b"\xff\xfe\x80\x01\x7f"), ("latin", b"caf\xe9"))),
        ("header_odd_name", None, valid, (("odd name:\t/\u00e9\u2603!", b"v"), ("x-\U0001f4a5", b"emoji"))),
        ("header_empty_name", None, valid, (("", b"empty name"),)),
        ("header_many", None, valid, tuple((f"h{i:03d}", b"x" * 16) for i in range(MANY_HEADERS))),
        ("header_traceparent_garbage", None, valid, (("traceparent", b"00-zzzz-not-a-trace-01"),
                                                     ("tracestate", b"\xff=\xfe"))),
        ("header_traceparent_binary", None, valid, (("traceparent", b"\xff\xfe\xfd\x80"),)),
        ("header_value_with_nul", None, valid, (("nul", b"\x00\x01\xff\x00"), ("traceparent", b"\x00"))),
        ("garbage_headers_garbage_value", None, rng.randbytes(300), _garbage_headers()),
    ]
    return cases


def corpus(topic: str, limit: int) -> list[Case]:
    """Every case for ``topic`` (a registry name, e.g. ``nodestate.v1``) under a broker whose
    ``message.max.bytes`` is ``limit``. Keys are ``corpus-<name>`` except for the missing-key cases, which a
    compacted topic does not get (the broker refuses a record without a key there: "failed to validate")."""
    out = []
    compacted = topic_spec(topic).compacted
    for name, key_override, value, headers in _raw_cases(topic, limit):
        if key_override is KEYLESS and compacted:
            continue
        key = None if key_override is KEYLESS else f"corpus-{name}".encode()
        out.append(Case(name=name, key=key, value=value, headers=headers, refusal=refusal(topic, value)))
    return out


def consumer_breaking_cases(topic: str) -> list[Case]:
    """Records the Kafka client itself cannot read, kept apart from ``corpus``.

    aiokafka decodes header names as UTF-8 while it unpacks a fetched batch, so a header name
    that is not UTF-8 raises ``UnicodeDecodeError`` from ``getmany`` before any record reaches the
    service (tests/integration/test_malformed_corpus.py shows what a service does then).
    """
    valid = _dumps(template(topic))
    return [Case(name="header_name_invalid_utf8", key=b"corpus-header_name_invalid_utf8", value=valid,
                 headers=(("bad\udcffname", b"v"),), refusal=None)]
