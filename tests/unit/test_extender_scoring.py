"""Table tests of the extender's pure scoring rules and its per-node state store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.models import (
    WORKLOAD_CLASSES,
    AbstainReason,
    AnomalyScore,
    FailureRiskV2,
    HorizonRisk,
    RegimeLabelV2,
    RegimeName,
)
from contracts.topics import REGIMES_TOPIC, RISK_TOPIC
from services.scheduler_extender.scoring import (
    CLASS_INDEX,
    NodeCard,
    NodeInputs,
    RegimeIn,
    ScoringConfig,
    class_slowdown,
    evaluate,
    risk_probability,
)
from services.scheduler_extender.state import NodeStateStore
from tests.samples import unknown_label

NOW = 1_800_000_000_000
CFG = ScoringConfig()  # max_slowdown 1.5, min_confidence 0.5, anomaly 0.9, risk 0.8, staleness 120 s, 0.6/0.25/0.15
CALM = {c: 1.0 for c in WORKLOAD_CLASSES}
MEMBW = {"memory_bound": 2.4, "llc_sensitive": 1.3, "cpu_bound": 1.05, "frontend_bound": 1.0}


def regime(
    interference: dict[str, float] | None = None,
    *,
    name: RegimeName = "membw",
    confidence: float = 0.9,
    age_s: float = 0.0,
    node: str = "n1",
) -> RegimeLabelV2:
    ts = int(NOW - age_s * 1000)
    return RegimeLabelV2(
        node=node,
        ts_ms=ts,
        regime=name,
        confidence=confidence,
        raw_regime=name,
        changed=False,
        interference=MEMBW if interference is None else interference,
        model_version="m1",
        input_ts_ms=ts,
    )


def unknown(
    reasons: tuple[AbstainReason, ...] = ("counters_missing",), *, age_s: float = 0.0, node: str = "n1"
) -> RegimeLabelV2:
    """The regime stage abstained (regimes.v2)."""
    return unknown_label(node, int(NOW - age_s * 1000), reasons,
                         ood_score=1.7 if "out_of_distribution" in reasons else None)


def anomaly(score: float, *, age_s: float = 0.0, node: str = "n1") -> AnomalyScore:
    ts = int(NOW - age_s * 1000)
    return AnomalyScore(
        node=node, ts_ms=ts, score=score, is_anomaly=score >= 0.9, threshold=0.9, model_version="m1", input_ts_ms=ts
    )


def risk(
    p: float | dict[int, float],
    *,
    age_s: float = 0.0,
    node: str = "n1",
    kind: Literal["task", "node"] = "node",
    in_range: bool = True,
) -> FailureRiskV2:
    ts = int(NOW - age_s * 1000)
    horizons = p if isinstance(p, dict) else {600: p}
    return FailureRiskV2(
        target_kind=kind,
        target=node,
        ts_ms=ts,
        tasks=3,
        tasks_out_of_range=0 if in_range else 1,
        model_version="m1",
        input_ts_ms=ts,
        horizons=[HorizonRisk(horizon_s=h, probability=v) for h, v in horizons.items()],
    )


@dataclass(frozen=True)
class Case:
    name: str
    inputs: NodeInputs
    workload_class: str
    score: int
    filtered: str | None  # substring of the reason, or None = passes
    cfg: ScoringConfig = field(default_factory=ScoringConfig)


CASES = [
    Case("nothing known: neutral, never filtered", NodeInputs(), "memory_bound", 5, None),
    Case(
        "calm node, healthy",
        NodeInputs.of(regime(CALM, name="none"), anomaly(0.0), risk(0.0)),
        "memory_bound",
        10,
        None,
    ),
    # slowdown penalty 1 (capped) * 0.6 -> 4
    Case(
        "membw contention is severe for memory_bound",
        NodeInputs.of(regime(), anomaly(0.0), risk(0.0)),
        "memory_bound",
        4,
        "memory_bound slowdown",
    ),
    # (1.05-1)/0.5 = 0.1 * 0.6 = 0.06 -> 9.4 -> 9
    Case("same node is fine for cpu_bound", NodeInputs.of(regime(), anomaly(0.0), risk(0.0)), "cpu_bound", 9, None),
    # (1.3-1)/0.5 = 0.6 * 0.6 = 0.36 -> 6.4 -> 6
    Case(
        "moderate slowdown scores but passes",
        NodeInputs.of(regime(), anomaly(0.0), risk(0.0)),
        "llc_sensitive",
        6,
        None,
    ),
    Case(
        "exactly at the slowdown threshold is severe",
        NodeInputs.of(regime({"memory_bound": 1.5}), anomaly(0.0), risk(0.0)),
        "memory_bound",
        4,
        "slowdown 1.50 >= 1.50",
    ),
    Case(
        "low confidence never filters, still scores the slowdown",
        NodeInputs.of(regime(confidence=0.3), anomaly(0.0), risk(0.0)),
        "memory_bound",
        4,
        None,
    ),
    # stale regime: slowdown unknown -> 0.5 * 0.6 = 0.3 -> 7
    Case(
        "stale regime is unknown: neutral slowdown, no filter",
        NodeInputs.of(regime(age_s=121), anomaly(0.0), risk(0.0)),
        "memory_bound",
        7,
        None,
    ),
    Case(
        "regime exactly at the staleness bound is still fresh",
        NodeInputs.of(regime(age_s=120), anomaly(0.0), risk(0.0)),
        "memory_bound",
        4,
        "slowdown",
    ),
    Case(
        "everything stale is the same as nothing known",
        NodeInputs.of(regime(age_s=500), anomaly(0.99, age_s=500), risk(0.99, age_s=500)),
        "memory_bound",
        5,
        None,
    ),
    Case(
        "a timestamp from the future (clock skew) counts as fresh",
        NodeInputs.of(regime(age_s=-30), anomaly(0.0), risk(0.0)),
        "memory_bound",
        4,
        "slowdown",
    ),
    # risk 0.85 -> penalty 1 * 0.25 -> 7.5 -> 8
    Case(
        "node risk over the threshold filters every class",
        NodeInputs.of(regime(CALM, name="none"), anomaly(0.0), risk(0.85)),
        "cpu_bound",
        8,
        "failure risk 0.85 >= 0.80",
    ),
    # anomaly 0.95 -> 1 * 0.15 -> 8.5 -> 9 (round half up)
    Case(
        "anomaly over the threshold filters",
        NodeInputs.of(regime(CALM, name="none"), anomaly(0.95), risk(0.0)),
        "frontend_bound",
        9,
        "anomaly score 0.95 >= 0.90",
    ),
    # anomaly 0.45 -> 0.5 * 0.15 = 0.075; risk 0.4 -> 0.5 * 0.25 = 0.125; total 0.2 -> 8
    Case(
        "risk and anomaly below thresholds only lower the score",
        NodeInputs.of(regime(CALM, name="none"), anomaly(0.45), risk(0.4)),
        "cpu_bound",
        8,
        None,
    ),
    Case(
        "stale risk does not filter",
        NodeInputs.of(regime(CALM, name="none"), anomaly(0.0), risk(0.99, age_s=300)),
        "cpu_bound",
        9,
        None,
    ),
    Case(
        "several reasons are all given",
        NodeInputs.of(regime(), anomaly(0.95), risk(0.9)),
        "memory_bound",
        0,
        "slowdown 2.40 >= 1.50",
    ),
    # class missing from the label: worst entry (2.4) is used, never a sum of entries
    Case(
        "class missing from interference: worst case of the others",
        NodeInputs.of(regime({"memory_bound": 2.4, "cpu_bound": 1.2}), anomaly(0.0), risk(0.0)),
        "frontend_bound",
        4,
        "frontend_bound slowdown 2.40",
    ),
    Case(
        "empty interference under regime none means no slowdown",
        NodeInputs.of(regime({}, name="none"), anomaly(0.0), risk(0.0)),
        "memory_bound",
        10,
        None,
    ),
    Case(
        "empty interference under a contended regime is unknown",
        NodeInputs.of(regime({}, name="membw"), anomaly(0.0), risk(0.0)),
        "memory_bound",
        7,
        None,
    ),
    # unknown regime = no regime at all: 0.5 * 0.6 = 0.3 -> 7, as the stale case above
    Case(
        "unknown regime is neutral: the score of no regime, never filtered",
        NodeInputs.of(unknown(), anomaly(0.0), risk(0.0)),
        "memory_bound",
        7,
        None,
    ),
    Case(
        "unknown regime (out of distribution) is neutral for every class",
        NodeInputs.of(unknown(("out_of_distribution", "low_confidence")), anomaly(0.0), risk(0.0)),
        "frontend_bound",
        7,
        None,
    ),
    # out-of-range risk = no risk: 0.5 * 0.25 = 0.125 -> 8.75 -> 9, never filtered
    Case(
        "out-of-range node risk is ignored: no filter, neutral risk penalty",
        NodeInputs.of(regime(CALM, name="none"), anomaly(0.0), risk(0.95, in_range=False)),
        "cpu_bound",
        9,
        None,
    ),
    Case(
        "out-of-range low risk is not a bonus either",
        NodeInputs.of(regime(CALM, name="none"), anomaly(0.0), risk(0.0, in_range=False)),
        "cpu_bound",
        9,
        None,
    ),
    Case(
        "slowdown-only weights: score is the slowdown alone",
        NodeInputs.of(regime(), anomaly(0.99), risk(0.99)),
        "llc_sensitive",
        4,
        "anomaly",
        ScoringConfig(weight_slowdown=1.0, weight_risk=0.0, weight_anomaly=0.0),
    ),
    Case(
        "a stricter slowdown bound filters more",
        NodeInputs.of(regime(), anomaly(0.0), risk(0.0)),
        "llc_sensitive",
        4,
        "llc_sensitive slowdown 1.30 >= 1.20",
        ScoringConfig(max_slowdown=1.2),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_scoring_table(case: Case) -> None:
    card = evaluate(case.inputs, case.cfg, NOW)
    ci = CLASS_INDEX[case.workload_class]
    reason, detail = card.reasons[ci], card.details[ci]
    assert card.scores[ci] == case.score, card.summaries[ci]
    if case.filtered is None:
        assert reason is None
        assert detail is None
    else:
        assert detail is not None
        assert case.filtered in detail
        assert reason is not None
        assert reason.startswith("borg-orchestrator: ")
        assert not any(ch.isdigit() for ch in reason.split("over")[0]), "reason text must aggregate"


def test_filter_messages_are_stable_across_nodes() -> None:
    """kube-scheduler groups FailedNodes by message: the same cause must give the same text."""
    a = evaluate(NodeInputs.of(regime({"memory_bound": 2.1})), CFG, NOW).reasons[CLASS_INDEX["memory_bound"]]
    b = evaluate(NodeInputs.of(regime({"memory_bound": 3.7})), CFG, NOW).reasons[CLASS_INDEX["memory_bound"]]
    assert a == b == "borg-orchestrator: predicted memory_bound slowdown at or over 1.50"


def test_card_expires_when_first_fresh_input_turns_stale() -> None:
    card = evaluate(NodeInputs.of(regime(age_s=100), anomaly(0.0, age_s=10)), CFG, NOW)
    assert card.expires_ms == NOW - 100_000 + CFG.staleness_ms + 1
    later = evaluate(NodeInputs.of(regime(age_s=100), anomaly(0.0, age_s=10)), CFG, card.expires_ms)
    assert later.regime_status == "stale"
    assert later.anomaly_status == "fresh"


@pytest.mark.parametrize(
    ("horizons", "configured", "expected"),
    [
        ({600: 0.2, 3600: 0.5}, None, (0.5, 3600)),
        ({600: 0.2, 3600: 0.5}, 600, (0.2, 600)),
        ({600: 0.2, 3600: 0.5}, 60, (0.5, 3600)),
        ({600: 0.7, 3600: 0.7}, None, (0.7, 600)),
    ],
)
def test_risk_horizon(horizons: dict[int, float], configured: int | None, expected: tuple[float, int]) -> None:
    assert risk_probability(risk(horizons), configured) == expected


def test_class_slowdown_is_never_summed() -> None:
    label = RegimeIn.of(regime({"memory_bound": 1.4, "llc_sensitive": 1.3}))
    assert class_slowdown(label, "memory_bound") == 1.4
    assert class_slowdown(label, "cpu_bound") == 1.4  # worst of what is known, not 1.4 + 1.3


SLOWDOWN = st.floats(min_value=1.0, max_value=100.0)
PROB = st.floats(min_value=0.0, max_value=1.0)


@given(s1=SLOWDOWN, s2=SLOWDOWN, a=PROB, p=PROB, conf=PROB)
def test_score_bounded_and_monotonic_in_slowdown(s1: float, s2: float, a: float, p: float, conf: float) -> None:
    low, high = sorted((s1, s2))
    card_low = evaluate(NodeInputs.of(regime({"memory_bound": low}, confidence=conf), anomaly(a), risk(p)), CFG, NOW)
    card_high = evaluate(NodeInputs.of(regime({"memory_bound": high}, confidence=conf), anomaly(a), risk(p)), CFG, NOW)
    ci = CLASS_INDEX["memory_bound"]
    assert 0 <= card_high.scores[ci] <= card_low.scores[ci] <= 10
    if card_low.reasons[ci] is not None and conf >= CFG.min_confidence:
        assert card_high.reasons[ci] is not None  # worse never passes where better failed


@given(
    a=st.none() | PROB,
    p=st.none() | PROB,
    reasons=st.sets(st.sampled_from(["counters_missing", "out_of_distribution", "low_confidence"]), min_size=1),
)
def test_unknown_regime_scores_exactly_as_no_regime(a: float | None, p: float | None, reasons: set[str]) -> None:
    """Never penalised, never preferred: every class gets the score and verdict of a node with no regime."""
    others = (anomaly(a) if a is not None else None, risk(p) if p is not None else None)
    with_unknown = evaluate(NodeInputs.of(unknown(tuple(sorted(reasons))), *others), CFG, NOW)  # type: ignore[arg-type]
    without = evaluate(NodeInputs.of(None, *others), CFG, NOW)
    assert with_unknown.scores == without.scores
    assert with_unknown.reasons == without.reasons
    assert with_unknown.penalties == without.penalties
    assert with_unknown.regime_status == "abstained"
    assert with_unknown.known == without.known


@given(p=PROB, a=st.none() | PROB)
def test_out_of_range_risk_scores_exactly_as_no_risk(p: float, a: float | None) -> None:
    others = (regime(CALM, name="none"), anomaly(a) if a is not None else None)
    ignored = evaluate(NodeInputs.of(*others, risk(p, in_range=False)), CFG, NOW)
    without = evaluate(NodeInputs.of(*others, None), CFG, NOW)
    assert (ignored.scores, ignored.reasons, ignored.penalties) == (without.scores, without.reasons, without.penalties)
    assert ignored.risk_status == "out_of_range"
    assert ignored.risk == p  # still shown (the debug endpoint and spans say it was ignored)


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="max_slowdown"):
        ScoringConfig(max_slowdown=1.0)
    with pytest.raises(ValueError, match="weight"):
        ScoringConfig(weight_slowdown=0, weight_risk=0, weight_anomaly=0)


# ---------------------------------------------------------------- state store


def test_store_keeps_latest_by_timestamp_and_ignores_task_risk() -> None:
    store = NodeStateStore(CFG)
    assert store.apply(regime(MEMBW, age_s=10), NOW) == "n1"
    assert store.apply(regime(CALM, name="none", age_s=20), NOW) is None  # older: kept the newer
    assert store.apply(risk(0.9, kind="task", node="task-1"), NOW) is None
    assert store.stats.older == 1
    assert store.stats.ignored == 1
    card = store.card("n1", NOW)
    assert card.regime == "membw"
    assert store.card("never-seen", NOW) == store.unknown
    assert store.nodes() == ["n1"]


def test_store_newer_unknown_replaces_a_contended_label() -> None:
    """A node whose model now abstains is no longer filtered for its old label; the card says why."""
    store = NodeStateStore(CFG)
    ci = CLASS_INDEX["memory_bound"]
    store.apply(regime(MEMBW, age_s=10), NOW)
    assert store.verdicts(["n1"], ci, NOW)[1] == ["borg-orchestrator: predicted memory_bound slowdown at or over 1.50"]
    assert store.apply(unknown(("counters_missing",), age_s=5), NOW) == "n1"
    card = store.card("n1", NOW)
    assert store.verdicts(["n1"], ci, NOW)[1] == [None]
    assert card.scores == store.unknown.scores
    assert (card.regime, card.regime_status, card.abstain, card.known) == (
        "unknown",
        "abstained",
        ("counters_missing",),
        False,
    )
    assert card.explain(ci)["regime"] == {
        "value": "unknown",
        "confidence": 0.0,
        "status": "abstained",
        "age_ms": 5000,
        "abstain": ["counters_missing"],
    }
    assert "regime=unknown(counters_missing)" in card.summaries[ci]
    # the abstained label turns stale like any other input
    assert store.card("n1", NOW + CFG.staleness_ms).regime_status == "stale"


def test_store_out_of_range_risk_replaces_an_in_range_one() -> None:
    store = NodeStateStore(CFG)
    store.apply(risk(0.95, age_s=10), NOW)
    assert store.verdicts(["n1"], 0, NOW)[1][0] is not None
    store.apply(risk(0.95, age_s=5, in_range=False), NOW)
    card = store.card("n1", NOW)
    assert store.verdicts(["n1"], 0, NOW)[1] == [None]
    assert (card.risk_status, card.known) == ("out_of_range", False)
    assert "risk=out_of_range(0.95,ignored)" in card.summaries[0]


def test_store_tombstones_drop_one_input() -> None:
    store = NodeStateStore(CFG)
    store.apply(regime(), NOW)
    store.apply(risk(0.95), NOW)
    assert store.forget(RISK_TOPIC, "n1", NOW)
    assert store.card("n1", NOW).risk_status == "missing"
    assert store.forget(REGIMES_TOPIC, "n1", NOW)
    assert len(store) == 0
    assert store.card("n1", NOW) == store.unknown
    assert not store.forget("anomalies.v1", "n1", NOW)


def test_store_recomputes_cards_that_went_stale() -> None:
    store = NodeStateStore(CFG)
    store.apply(regime(), NOW)
    ci = CLASS_INDEX["memory_bound"]
    _, reasons = store.verdicts(["n1"], ci, NOW)
    assert reasons[0] is not None
    later = NOW + CFG.staleness_ms + 1
    cards, reasons = store.verdicts(["n1", "n2"], ci, later)
    assert reasons == [None, None]
    assert NodeCard._make(cards[0]).regime_status == "stale"
    assert NodeCard._make(cards[1]) == store.unknown
    assert store.refresh_expired(later + 1) == 0  # already recomputed by the lookup


def test_store_state_is_invisible_to_the_cyclic_gc() -> None:
    """Per-node state is plain tuples, so a full collection does not walk 5,000 nodes of it."""
    import gc

    store = NodeStateStore(CFG)
    for i in range(50):
        store.apply(regime(node=f"n{i}"), NOW)
        store.apply(anomaly(0.1, node=f"n{i}"), NOW)
        store.apply(risk({600: 0.1, 3600: 0.2}, node=f"n{i}"), NOW)
    store.verdicts(["n0", "unknown-node"], 0, NOW)
    for _ in range(5):  # the collector untracks nested tuples one level per pass
        gc.collect()
    held = [*store._inputs.values(), *store._slots.values(), *store._unknown_slots.values()]
    assert held
    assert not [h for h in held if gc.is_tracked(h)]


def test_store_priorities_are_valid_host_priority_json() -> None:
    import orjson

    store = NodeStateStore(CFG)
    store.apply(regime(node="a"), NOW)
    store.apply(regime(CALM, name="none", node="b"), NOW)
    cards, body = store.priorities(["b", "a", 'zzz "quoted"'], CLASS_INDEX["memory_bound"], NOW)
    # risk and anomaly unknown: 0.25 * 0.5 + 0.15 * 0.5 = 0.2 of penalty each; a adds the full 0.6 slowdown
    assert orjson.loads(body) == [
        {"Host": "b", "Score": 8},
        {"Host": "a", "Score": 2},
        {"Host": 'zzz "quoted"', "Score": 5},
    ]
    assert len(cards) == 3
