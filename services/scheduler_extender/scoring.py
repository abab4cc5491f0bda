"""Pure scoring rules: one node's latest inputs → a verdict and a 0–10 score per workload class.

No I/O and no clock: the caller passes ``now_ms``. Rules (see docs/scheduler_extender.md):

- An input (regime, anomaly, node risk) is *fresh* when ``now_ms - ts_ms <= staleness_ms``; a stale or
  missing input is *unknown*: it never filters a node and scores the neutral ``unknown_penalty``.
- A fresh regime ``unknown`` (regimes.v2: the model abstained; status ``abstained``) and a fresh node risk
  that is not ``in_range`` (risk.v2; status ``out_of_range``) are no information either: they score exactly
  as a missing input (never penalised, never preferred, never filtered). They still replace an older label
  or risk, so nothing keeps acting on an answer the model no longer gives.
- Slowdown of class ``c`` on a node = ``interference[c]`` of the fresh regime label (already the worst case
  over co-runners). When the label has no entry for ``c`` the worst entry it has is used; an empty map means
  1.0 for regime ``none`` and unknown otherwise. Slowdowns are never summed or multiplied: several sources
  are combined with ``max``.
- Filter: a node fails for class ``c`` when (confidence >= ``min_confidence`` and slowdown >= ``max_slowdown``)
  or anomaly score >= ``anomaly_threshold`` or node failure probability >= ``risk_threshold``.
- Score: penalties in [0, 1] — slowdown ``(s - 1) / (max_slowdown - 1)``, risk ``p / risk_threshold``,
  anomaly ``a / anomaly_threshold``, each capped at 1 — are averaged with the weights;
  ``score = round_half_up(10 * (1 - penalty))``.
- Forecast term (forecasts.v1, issue 24): a node forecast to saturate within the pod's first
  ``forecast_horizon_s`` (15 min) scores lower. ``peak`` = the highest p90 (CPU or memory) at the record's
  horizons up to ``forecast_horizon_s``; ``p_forecast = clip((peak - forecast_busy) / (forecast_saturated -
  forecast_busy), 0, 1)`` and ``penalty = min(1, penalty + weight_forecast * p_forecast)`` — added after the
  weighted mean, so a node without a usable forecast (missing, older than ``forecast_staleness_ms``, or
  ``unknown``: status ``abstained``) and a node forecast below ``forecast_busy`` score exactly as without the
  forecaster. It never filters a node (a forecast is not a fact). Forecasts arrive once per node and 5 minutes,
  hence their own staleness bound.
- Trusted regimes (issue 21): a fresh regime whose confidence is below ``score_confidence`` scores its slowdown
  as unknown (``unknown_penalty``); the filter still uses ``min_confidence``. 0 (default) trusts every answer.
- Co-runner term (issue 21, :mod:`services.scheduler_extender.corunner`): per pod, not per node card —
  :func:`placement_score` mixes the card's penalty with the penalty of the classes already bound to the node,
  ``penalty = (1 - weight_corunner) * card_penalty + weight_corunner * p_corunner``. 0 (default) = the card's
  score unchanged. It never filters (a class table is not a measurement of this node).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, NamedTuple

from contracts.models import (
    UNKNOWN_REGIME,
    WORKLOAD_CLASSES,
    AnomalyScore,
    FailureRiskV2,
    LoadForecast,
    RegimeLabelV2,
)
from services.scheduler_extender.corunner import Resident, corunner_penalty, load_harm
from simulator.workloads import CLASS_PRESSURE_GUESS

MIN_SCORE = 0
MAX_SCORE = 10
NEVER_MS = 2**62  # "does not expire"
REASON_PREFIX = "borg-orchestrator: "
CLASS_INDEX: dict[str, int] = {c: i for i, c in enumerate(WORKLOAD_CLASSES)}
InputStatus = Literal["fresh", "stale", "missing", "abstained", "out_of_range"]
"""``abstained``: a fresh ``unknown`` regime; ``out_of_range``: a fresh risk from out-of-range inputs."""


@dataclass(frozen=True, slots=True)
class ScoringConfig:
    max_slowdown: float = 1.5
    min_confidence: float = 0.5
    anomaly_threshold: float = 0.9
    risk_threshold: float = 0.8
    risk_horizon_s: int | None = None
    staleness_ms: int = 120_000
    weight_slowdown: float = 0.6
    weight_risk: float = 0.25
    weight_anomaly: float = 0.15
    unknown_penalty: float = 0.5
    weight_forecast: float = 0.3
    forecast_horizon_s: int = 900
    forecast_busy: float = 0.8
    forecast_saturated: float = 0.95
    forecast_staleness_ms: int = 600_000
    weight_corunner: float = 0.0
    score_confidence: float = 0.0
    latency_sensitive_classes: tuple[str, ...] = ("frontend_bound", "llc_sensitive")
    corunner_slo_slowdown: float = 1.25
    """The load term counts a latency-sensitive pod pushed over this (the SLO, or a guard band below it)."""

    def __post_init__(self) -> None:
        if self.max_slowdown <= 1.0:
            raise ValueError("max_slowdown must be > 1")
        if not 0.0 <= self.forecast_busy < self.forecast_saturated <= 1.0:
            raise ValueError("need 0 <= forecast_busy < forecast_saturated <= 1")
        if self.weight_forecast < 0:
            raise ValueError("weight_forecast must be >= 0")
        if not 0.0 <= self.weight_corunner <= 1.0:
            raise ValueError("weight_corunner must be in [0, 1]")
        if not 0.0 <= self.score_confidence <= 1.0:
            raise ValueError("score_confidence must be in [0, 1]")
        if self.corunner_slo_slowdown <= 1.0:
            raise ValueError("corunner_slo_slowdown must be > 1")
        unknown = [c for c in self.latency_sensitive_classes if c not in CLASS_INDEX]
        if unknown:
            raise ValueError(f"latency_sensitive_classes: unknown class(es) {unknown}; known: {WORKLOAD_CLASSES}")
        if self.weight_slowdown + self.weight_risk + self.weight_anomaly <= 0:
            raise ValueError("at least one weight must be positive")


class RegimeIn(NamedTuple):
    """What scoring uses of a RegimeLabelV2."""

    ts_ms: int
    regime: str
    confidence: float
    interference: tuple[tuple[str, float], ...]
    abstain: tuple[str, ...] = ()  # why the model answered ``unknown``

    @classmethod
    def of(cls, label: RegimeLabelV2) -> RegimeIn:
        return cls(label.ts_ms, label.regime, label.confidence, tuple(label.interference.items()), tuple(label.abstain))


class AnomalyIn(NamedTuple):
    ts_ms: int
    score: float

    @classmethod
    def of(cls, anomaly: AnomalyScore) -> AnomalyIn:
        return cls(anomaly.ts_ms, anomaly.score)


class RiskIn(NamedTuple):
    """Node failure probability at the configured horizon (or the worst horizon)."""

    ts_ms: int
    probability: float
    horizon_s: int
    in_range: bool = True

    @classmethod
    def of(cls, risk: FailureRiskV2, horizon_s: int | None) -> RiskIn:
        return cls(risk.ts_ms, *risk_probability(risk, horizon_s), risk.in_range)


class ForecastIn(NamedTuple):
    """The highest p90 load (CPU or memory) forecast for the node up to the configured horizon."""

    ts_ms: int
    peak: float
    horizon_s: int  # the horizon of the peak
    usable: bool = True  # False: status ``unknown`` or no horizon up to the configured one

    @classmethod
    def of(cls, forecast: LoadForecast, horizon_s: int) -> ForecastIn:
        within = [q for q in forecast.quantiles if q.horizon_s <= horizon_s]
        if forecast.status != "ok" or not within:
            return cls(forecast.ts_ms, 0.0, 0, False)
        top = max(within, key=lambda q: (q.p90, -q.horizon_s))
        return cls(forecast.ts_ms, top.p90, top.horizon_s)


class NodeInputs(NamedTuple):
    """The latest input of each kind for one node (None: never seen)."""

    regime: RegimeIn | None = None
    anomaly: AnomalyIn | None = None
    risk: RiskIn | None = None
    forecast: ForecastIn | None = None

    @classmethod
    def of(
        cls,
        regime: RegimeLabelV2 | None = None,
        anomaly: AnomalyScore | None = None,
        risk: FailureRiskV2 | None = None,
        *,
        horizon_s: int | None = None,
        forecast: LoadForecast | None = None,
        forecast_horizon_s: int = 900,
    ) -> NodeInputs:
        return cls(
            RegimeIn.of(regime) if regime is not None else None,
            AnomalyIn.of(anomaly) if anomaly is not None else None,
            RiskIn.of(risk, horizon_s) if risk is not None else None,
            ForecastIn.of(forecast, forecast_horizon_s) if forecast is not None else None,
        )


class NodeCard(NamedTuple):
    """A node's inputs as used, and the verdict for every workload class (per-class tuples, index CLASS_INDEX)."""

    regime: str | None
    confidence: float | None
    regime_status: InputStatus
    regime_age_ms: int | None
    anomaly: float | None
    anomaly_status: InputStatus
    anomaly_age_ms: int | None
    risk: float | None
    risk_horizon_s: int | None
    risk_status: InputStatus
    risk_age_ms: int | None
    known: bool  # at least one fresh input that is used (an abstained regime / out-of-range risk is not)
    scores: tuple[int, ...]  # 0..10
    reasons: tuple[str | None, ...]  # FailedNodes message (stable text the scheduler can aggregate); None = passes
    details: tuple[str | None, ...]  # the same with the numbers that crossed the thresholds
    slowdowns: tuple[float | None, ...]  # None = unknown
    penalties: tuple[float, ...]  # weighted, 0 (best) .. 1 (worst)
    summaries: tuple[str, ...]  # one line per class for spans
    expires_ms: int  # when a fresh input turns stale and the card must be recomputed
    abstain: tuple[str, ...] = ()  # the regime's abstain reasons (regime ``unknown``)
    forecast: float | None = None  # peak p90 load up to the forecast horizon
    forecast_horizon_s: int | None = None
    forecast_status: InputStatus = "missing"  # ``abstained``: an ``unknown`` forecast
    forecast_age_ms: int | None = None
    forecast_penalty: float = 0.0  # weighted, added to every class's penalty
    # the co-runner term folded in (:func:`with_corunner`): p_corunner per class and the bound pods' classes;
    # empty = not applied (weight 0, or the pod index does not know the node)
    corunner: tuple[float, ...] = ()
    residents: tuple[int, ...] = ()

    def explain(self, class_index: int) -> dict[str, object]:
        out: dict[str, object] = {
            "score": self.scores[class_index],
            "filtered": self.details[class_index],
            "penalty": round(self.penalties[class_index], 4),
            "slowdown": self.slowdowns[class_index],
            "regime": {
                "value": self.regime,
                "confidence": self.confidence,
                "status": self.regime_status,
                "age_ms": self.regime_age_ms,
                "abstain": list(self.abstain),
            },
            "anomaly": {"score": self.anomaly, "status": self.anomaly_status, "age_ms": self.anomaly_age_ms},
            "risk": {
                "probability": self.risk,
                "horizon_s": self.risk_horizon_s,
                "status": self.risk_status,
                "age_ms": self.risk_age_ms,
            },
            "forecast": {
                "peak_p90": self.forecast,
                "horizon_s": self.forecast_horizon_s,
                "status": self.forecast_status,
                "age_ms": self.forecast_age_ms,
                "penalty": round(self.forecast_penalty, 4),
            },
        }
        if self.corunner:
            out["corunner"] = {
                "penalty": round(self.corunner[class_index], 4),
                "resident_classes": [WORKLOAD_CLASSES[r] for r in self.residents],
            }
        return out


def risk_probability(risk: FailureRiskV2, horizon_s: int | None) -> tuple[float, int]:
    """Failure probability at the configured horizon, or the worst over all horizons (and that horizon)."""
    if horizon_s is not None:
        for h in risk.horizons:
            if h.horizon_s == horizon_s:
                return h.probability, h.horizon_s
    worst = max(risk.horizons, key=lambda h: (h.probability, -h.horizon_s))
    return worst.probability, worst.horizon_s


def class_slowdown(regime: RegimeIn, workload_class: str) -> float | None:
    """Predicted slowdown of a class on the labelled node: conservative (max), never summed."""
    worst: float | None = None
    for name, value in regime.interference:
        if name == workload_class:
            return value
        worst = value if worst is None else max(worst, value)
    if worst is not None:
        return worst
    return 1.0 if regime.regime == "none" else None


def _status(ts_ms: int | None, now_ms: int, staleness_ms: int) -> tuple[InputStatus, int | None]:
    if ts_ms is None:
        return "missing", None
    age = now_ms - ts_ms
    return ("fresh" if age <= staleness_ms else "stale"), age


def round_half_up(x: float) -> int:
    return int(x + 0.5)


def evaluate(inputs: NodeInputs, cfg: ScoringConfig, now_ms: int) -> NodeCard:
    """Verdict and score of one node for every workload class."""
    regime, anomaly, risk, forecast = inputs
    r_status, r_age = _status(regime.ts_ms if regime else None, now_ms, cfg.staleness_ms)
    a_status, a_age = _status(anomaly.ts_ms if anomaly else None, now_ms, cfg.staleness_ms)
    k_status, k_age = _status(risk.ts_ms if risk else None, now_ms, cfg.staleness_ms)
    f_status, f_age = _status(forecast.ts_ms if forecast else None, now_ms, cfg.forecast_staleness_ms)

    expires = NEVER_MS
    for item, status in ((regime, r_status), (anomaly, a_status), (risk, k_status)):
        if item is not None and status == "fresh":
            expires = min(expires, item.ts_ms + cfg.staleness_ms + 1)
    if forecast is not None and f_status == "fresh":
        expires = min(expires, forecast.ts_ms + cfg.forecast_staleness_ms + 1)
    if f_status == "fresh" and forecast is not None and not forecast.usable:
        f_status = "abstained"
    p_forecast = 0.0
    if f_status == "fresh" and forecast is not None:
        p_forecast = cfg.weight_forecast * min(1.0, max(0.0, (forecast.peak - cfg.forecast_busy)
                                                        / (cfg.forecast_saturated - cfg.forecast_busy)))
    # no information, as a missing input (statuses set after expiry: the status still turns stale on time)
    if r_status == "fresh" and regime is not None and regime.regime == UNKNOWN_REGIME:
        r_status = "abstained"
    if k_status == "fresh" and risk is not None and not risk.in_range:
        k_status = "out_of_range"
    fresh_regime = regime if r_status == "fresh" else None

    shared_reasons: list[str] = []  # short, stable
    shared_details: list[str] = []  # with numbers
    if a_status == "fresh" and anomaly is not None:
        p_anomaly = min(1.0, anomaly.score / cfg.anomaly_threshold)
        if anomaly.score >= cfg.anomaly_threshold:
            shared_reasons.append(f"anomaly score at or over {cfg.anomaly_threshold:.2f}")
            shared_details.append(f"anomaly score {anomaly.score:.2f} >= {cfg.anomaly_threshold:.2f}")
    else:
        p_anomaly = cfg.unknown_penalty
    if k_status == "fresh" and risk is not None:
        p_risk = min(1.0, risk.probability / cfg.risk_threshold)
        if risk.probability >= cfg.risk_threshold:
            shared_reasons.append(f"node failure risk at or over {cfg.risk_threshold:.2f}")
            shared_details.append(
                f"node failure risk {risk.probability:.2f} >= {cfg.risk_threshold:.2f} (horizon {risk.horizon_s}s)"
            )
    else:
        p_risk = cfg.unknown_penalty

    total_weight = cfg.weight_slowdown + cfg.weight_risk + cfg.weight_anomaly
    span = cfg.max_slowdown - 1.0
    confident = fresh_regime is not None and fresh_regime.confidence >= cfg.min_confidence
    trusted = fresh_regime is not None and fresh_regime.confidence >= cfg.score_confidence
    if fresh_regime is not None:
        regime_txt = f"regime={fresh_regime.regime}@{fresh_regime.confidence:.2f}"
    elif r_status == "abstained" and regime is not None:
        regime_txt = f"regime=unknown({','.join(regime.abstain)})"
    else:
        regime_txt = f"regime={_fmt(None, r_status, r_age)}"
    tail = (
        f"risk={_fmt(risk.probability if risk else None, k_status, k_age)} "
        f"anomaly={_fmt(anomaly.score if anomaly else None, a_status, a_age)}"
    )
    if forecast is not None:
        tail += f" forecast_p90={_fmt(forecast.peak if forecast.usable else None, f_status, f_age)}"
    scores: list[int] = []
    reasons_out: list[str | None] = []
    details_out: list[str | None] = []
    slowdowns: list[float | None] = []
    penalties: list[float] = []
    summaries: list[str] = []
    for workload_class in WORKLOAD_CLASSES:
        slowdown = class_slowdown(fresh_regime, workload_class) if fresh_regime is not None else None
        p_slow = (cfg.unknown_penalty if slowdown is None or not trusted
                  else min(1.0, max(0.0, (slowdown - 1.0) / span)))
        weighted = cfg.weight_slowdown * p_slow + cfg.weight_risk * p_risk + cfg.weight_anomaly * p_anomaly
        penalty = min(1.0, weighted / total_weight + p_forecast)
        reasons, details = list(shared_reasons), list(shared_details)
        if confident and slowdown is not None and slowdown >= cfg.max_slowdown and fresh_regime is not None:
            reasons.insert(0, f"predicted {workload_class} slowdown at or over {cfg.max_slowdown:.2f}")
            details.insert(
                0,
                f"{workload_class} slowdown {slowdown:.2f} >= {cfg.max_slowdown:.2f} "
                f"(regime {fresh_regime.regime}, confidence {fresh_regime.confidence:.2f})",
            )
        score = min(MAX_SCORE, max(MIN_SCORE, round_half_up(MAX_SCORE * (1.0 - penalty))))
        scores.append(score)
        reasons_out.append(f"{REASON_PREFIX}{'; '.join(reasons)}" if reasons else None)
        details_out.append("; ".join(details) or None)
        slowdowns.append(slowdown)
        penalties.append(penalty)
        slow_txt = "?" if slowdown is None else f"{slowdown:.2f}"
        summaries.append(f"score={score} {regime_txt} slowdown={slow_txt} {tail}")

    return NodeCard(
        regime=regime.regime if regime else None,
        confidence=regime.confidence if regime else None,
        regime_status=r_status,
        regime_age_ms=r_age,
        anomaly=anomaly.score if anomaly else None,
        anomaly_status=a_status,
        anomaly_age_ms=a_age,
        risk=risk.probability if risk else None,
        risk_horizon_s=risk.horizon_s if risk else None,
        risk_status=k_status,
        risk_age_ms=k_age,
        known="fresh" in (r_status, a_status, k_status, f_status),
        scores=tuple(scores),
        reasons=tuple(reasons_out),
        details=tuple(details_out),
        slowdowns=tuple(slowdowns),
        penalties=tuple(penalties),
        summaries=tuple(summaries),
        expires_ms=expires,
        abstain=regime.abstain if regime is not None else (),
        forecast=forecast.peak if forecast is not None and forecast.usable else None,
        forecast_horizon_s=forecast.horizon_s if forecast is not None and forecast.usable else None,
        forecast_status=f_status,
        forecast_age_ms=f_age,
        forecast_penalty=p_forecast,
    )


def _fmt(value: float | None, status: InputStatus, age_ms: int | None) -> str:
    if status == "fresh" and value is not None:
        return f"{value:.2f}"
    if status == "stale":
        return f"stale({(age_ms or 0) / 1000:.0f}s)"
    if status == "out_of_range" and value is not None:
        return f"out_of_range({value:.2f},ignored)"
    return "unknown"


def unknown_card(cfg: ScoringConfig) -> NodeCard:
    """The card of a node with no inputs at all: neutral for every class, never filtered."""
    return evaluate(NodeInputs(), cfg, 0)


def _mixed(card_penalty: float, p_co: float, cfg: ScoringConfig) -> tuple[float, int]:
    penalty = (1.0 - cfg.weight_corunner) * card_penalty + cfg.weight_corunner * p_co
    return penalty, min(MAX_SCORE, max(MIN_SCORE, round_half_up(MAX_SCORE * (1.0 - penalty))))


def placement_score(card: NodeCard, class_index: int, residents: Sequence[int], cfg: ScoringConfig) -> int:
    """The node's 0–10 score for one pod: the card's penalty for the pod's class mixed with the co-runner term
    of the classes bound there (module docstring); equals ``card.scores[class_index]`` when the weight is 0."""
    if cfg.weight_corunner <= 0.0:
        return card.scores[class_index]
    sensitive = frozenset(CLASS_INDEX[c] for c in cfg.latency_sensitive_classes)
    p_co = corunner_penalty(class_index, residents, sensitive, cfg.max_slowdown)
    return _mixed(card.penalties[class_index], p_co, cfg)[1]


def score_with_penalty(card: NodeCard, class_index: int, p_co: float, cfg: ScoringConfig) -> int:
    """The node's 0–10 score with a co-runner penalty ``p_co`` (0–1) computed elsewhere (the load term on
    per-pod estimates, ``corunner.load_harm``) mixed in at ``weight_corunner``, as ``placement_score`` does."""
    if cfg.weight_corunner <= 0.0:
        return card.scores[class_index]
    return _mixed(card.penalties[class_index], min(1.0, max(0.0, p_co)), cfg)[1]


@lru_cache(maxsize=4096)
def _corunner_penalties(
    residents: tuple[int, ...], sensitive: frozenset[int], max_slowdown: float
) -> tuple[float, ...]:
    # memoised by the bound classes as a multiset: ~60 µs for the four classes at 20 pods (linear in the pods),
    # and nodes share few distinct multisets, so a pod event mostly costs the card's re-evaluation, not this
    return tuple(corunner_penalty(ci, residents, sensitive, max_slowdown) for ci in range(len(WORKLOAD_CLASSES)))


def with_corunner(card: NodeCard, residents: Sequence[int] | None, cfg: ScoringConfig) -> NodeCard:
    """The card with the co-runner term folded into every class's penalty and score (what the live extender
    answers; ``scores[c] == placement_score(card, c, residents, cfg)``). ``residents`` None (the pod index does
    not know the node) or weight 0: the card unchanged. Verdicts are untouched: the term never filters."""
    if residents is None or cfg.weight_corunner <= 0.0:
        return card
    sensitive = frozenset(CLASS_INDEX[c] for c in cfg.latency_sensitive_classes)
    p_co = _corunner_penalties(tuple(sorted(residents)), sensitive, cfg.max_slowdown)
    return _fold(card, p_co, tuple(sorted(residents)), "corunner", cfg)


def _fold(card: NodeCard, p_co: tuple[float, ...], classes: tuple[int, ...], name: str,
          cfg: ScoringConfig) -> NodeCard:
    """``card`` with a per-class co-runner penalty mixed into every class's penalty and score."""
    mixed = [_mixed(card.penalties[ci], p, cfg) for ci, p in enumerate(p_co)]
    return card._replace(
        penalties=tuple(m[0] for m in mixed),
        scores=tuple(m[1] for m in mixed),
        summaries=tuple(f"score={m[1]} {name}={p:.2f} {line.partition(' ')[2]}"
                        for m, p, line in zip(mixed, p_co, card.summaries, strict=True)),
        corunner=p_co,
        residents=classes,
    )


def load_penalties(residents: Sequence[Resident], cfg: ScoringConfig) -> tuple[float, ...]:
    """The load term's penalty per class (0–1): ``load_harm`` of a pod of that class at its class's guess
    (``CLASS_PRESSURE_GUESS``: the pod being placed has not run yet) among ``residents``, over
    ``max_slowdown - 1`` — what the offline orchestrator's load term scores (``simulator/arena/orchestrator.py``)."""
    sensitive = frozenset(CLASS_INDEX[c] for c in cfg.latency_sensitive_classes)
    return tuple(min(1.0, max(0.0, load_harm(ci, CLASS_PRESSURE_GUESS[ci], ci in sensitive, residents,
                                             cfg.corunner_slo_slowdown) / (cfg.max_slowdown - 1.0)))
                 for ci in range(len(WORKLOAD_CLASSES)))


def with_load(card: NodeCard, residents: Sequence[Resident] | None, cfg: ScoringConfig) -> NodeCard:
    """``with_corunner`` on per-pod estimates (the load term): each class's penalty mixes the card's with
    ``load_penalties``; ``scores[c] == score_with_penalty(card, c, load_penalties(residents, cfg)[c], cfg)``.
    ``residents`` None or weight 0: the card unchanged. Verdicts are untouched: the term never filters."""
    if residents is None or cfg.weight_corunner <= 0.0:
        return card
    return _fold(card, load_penalties(residents, cfg), tuple(sorted(r[0] for r in residents)), "load", cfg)
