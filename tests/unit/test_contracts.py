"""Contract round-trips, strict rejections and the committed-schema check."""

from __future__ import annotations

import math
from typing import Literal

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import (
    ActionResult,
    ContractError,
    Counter,
    Decision,
    FeatureVector,
    NodeState,
    Proposal,
    TaskEvent,
    decode,
    encode,
)
from contracts.models import BORG_EVENT_TYPES, Evidence, TargetRef
from contracts.schemagen import render, stale
from contracts.topics import TOPICS, topic_spec

TS = 1_764_000_000_000


def node_state(**overrides: object) -> NodeState:
    base: dict[str, object] = {
        "node": "node-1",
        "ts_ms": TS,
        "seq": 7,
        "interval_ms": 1000,
        "source": "synthetic",
        "pmu": "recorded",
        "supported_events": ["cycles", "instructions"],
        "counters": {
            "cycles": Counter(raw=500.0, value=1000.0, enabled_ns=1000, running_ns=500, status="multiplexed"),
            "instructions": Counter(status="not_supported"),
        },
        "cpu_util": 0.5,
        "mem_util": 0.25,
        "metrics": {"mkpi": 1.5},
    }
    base.update(overrides)
    return NodeState.model_validate(base)


def test_nodestate_round_trip_is_lossless() -> None:
    original = node_state()
    assert decode(NodeState, encode(original)) == original


def test_every_registry_topic_has_a_schema_and_model() -> None:
    names = [t.name for t in TOPICS]
    assert len(names) == len(set(names)) == 20  # 14 + forecasts, drift, capabilities, rollouts, podpressure, podregimes
    for spec in TOPICS:
        assert render(spec.name).startswith(b"{")
        assert topic_spec(spec.name) is spec
    assert topic_spec("regimes.v1").compacted
    assert not topic_spec("nodestate.v1").compacted


def test_committed_schemas_match_models() -> None:
    assert stale() == [], "models changed without their schema: run `python -m contracts.schemagen`"


def test_schema_drift_is_detected(tmp_path, monkeypatch) -> None:
    import contracts.schemagen as gen

    monkeypatch.setattr(gen, "SCHEMA_DIR", tmp_path)
    gen.main([])
    (tmp_path / "nodestate.v1.json").write_bytes(b'{"old": true}\n')
    assert gen.stale() == ["nodestate.v1"]
    assert gen.main(["--check"]) == 1


@pytest.mark.parametrize(
    ("mutate", "field", "kind"),
    [
        (lambda d: d.update(unknown=1), "unknown", "schema"),
        (lambda d: d.update(seq="7"), "seq", "schema"),
        (lambda d: d.update(ts_ms=1_764_000_000), "ts_ms", "schema"),  # seconds, not ms
        (lambda d: d.update(ts_ms=1_764_000_000_000_000), "ts_ms", "schema"),  # microseconds
        (lambda d: d.update(cpu_util=1.5), "cpu_util", "schema"),
        (lambda d: d.update(source="carrier-pigeon"), "source", "schema"),
        (lambda d: d.pop("node"), "node", "schema"),
    ],
)
def test_rejections_name_the_field(mutate, field: str, kind: str) -> None:
    obj = orjson.loads(encode(node_state()))
    mutate(obj)
    with pytest.raises(ContractError) as err:
        decode(NodeState, orjson.dumps(obj))
    assert err.value.kind == kind
    assert field in err.value.message


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_inf_are_rejected(literal: bytes) -> None:
    raw = encode(node_state()).replace(b'"cpu_util":0.5', b'"cpu_util":' + literal)
    with pytest.raises(ContractError) as err:
        decode(NodeState, raw)
    assert "cpu_util" in err.value.message


def test_nan_rejected_when_building_in_python() -> None:
    with pytest.raises(ValueError, match="finite"):
        node_state(mem_util=math.nan)


@pytest.mark.parametrize("payload", [b"", b"{", b"\xff\xfe", b"null x", b"[1,2"])
def test_malformed_json_is_classified(payload: bytes) -> None:
    with pytest.raises(ContractError) as err:
        decode(NodeState, payload)
    assert err.value.kind == "malformed"


def test_tombstone_is_malformed() -> None:
    with pytest.raises(ContractError, match="tombstone"):
        decode(NodeState, None)


def test_counter_never_invents_a_number() -> None:
    with pytest.raises(ValueError, match="must not carry a number"):
        Counter(value=1.0, status="not_counted")
    with pytest.raises(ValueError, match="requires a value"):
        Counter(status="counted")
    with pytest.raises(ValueError, match="running_ns"):
        Counter(raw=1.0, value=1.0, enabled_ns=1, running_ns=2)


def test_feature_vector_mask_must_match_values() -> None:
    with pytest.raises(ValueError, match="valid has"):
        FeatureVector(
            node="n",
            ts_ms=TS,
            window_s=10,
            schema_hash="abcdef0123",
            values=[1.0, 2.0],
            valid=[True],
            samples=3,
            input_ts_ms=TS,
        )


def test_decision_carries_every_proposal() -> None:
    pairs: list[tuple[Literal["reliability", "efficiency"], Literal["scale_out", "scale_in"]]] = [
        ("reliability", "scale_out"), ("efficiency", "scale_in")]
    target = TargetRef(kind="Deployment", name="web", namespace="prod")
    proposals = [
        Proposal(
            proposal_id=f"p{i}",
            agent=agent,
            kind=kind,
            target=target,
            score=0.5 + i / 10,
            ts_ms=TS,
            evidence=[Evidence(topic="risk.v1", key="web", field="p", value=0.9, ts_ms=TS)],
        )
        for i, (agent, kind) in enumerate(pairs)
    ]
    decision = Decision(
        decision_id="d1",
        ts_ms=TS,
        target=target,
        action="scale_out",
        chosen_proposal_id="p0",
        reason="SLA over efficiency",
        proposals=proposals,
        mode="dry-run",
    )
    back = decode(Decision, encode(decision))
    assert [p.agent for p in back.proposals] == ["reliability", "efficiency"]
    assert back.target.key() == "Deployment/prod/web"
    result = ActionResult(
        decision_id="d1", ts_ms=TS, target=target, action="scale_out", outcome="dry-run", message="ok", api_status=200
    )
    assert decode(ActionResult, encode(result)) == result


finite = st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None)
@given(
    node=st.text(min_size=1, max_size=40).filter(lambda s: s.strip() != ""),
    seq=st.integers(min_value=0, max_value=2**40),
    cpu=st.floats(min_value=0, max_value=1),
    raw=finite,
    event=st.sampled_from(BORG_EVENT_TYPES),
)
def test_property_round_trip(node: str, seq: int, cpu: float, raw: float, event: str) -> None:
    state = node_state(
        node=node, seq=seq, cpu_util=cpu, counters={"cycles": Counter(raw=raw, value=raw, enabled_ns=10, running_ns=10)}
    )
    assert decode(NodeState, encode(state)) == state
    task = TaskEvent(task_id=f"{seq}-0", job_id=str(seq), task_index=0, ts_ms=TS, event=event, source="synthetic")  # type: ignore[arg-type]
    assert decode(TaskEvent, encode(task)) == task


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200))
def test_property_arbitrary_bytes_never_crash(data: bytes) -> None:
    try:
        decode(NodeState, data)
    except ContractError as exc:
        assert exc.kind in ("malformed", "schema")
        assert exc.message.startswith("NodeState")
