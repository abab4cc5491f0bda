"""The extender's forecast term: nodes forecast to saturate within the pod's first 15 minutes score lower."""

from __future__ import annotations

import pytest

from contracts.models import WORKLOAD_CLASSES, AnomalyScore, LoadForecast, LoadQuantiles
from contracts.topics import FORECASTS_TOPIC
from services.scheduler_extender.scoring import NodeCard, NodeInputs, ScoringConfig, evaluate
from services.scheduler_extender.state import NodeStateStore
from tests.unit.test_extender_scoring import CALM, regime

NOW = 1_800_000_000_000
SCORES = NodeCard._fields.index("scores")
CFG = ScoringConfig()  # weight_forecast 0.3, horizon 900 s, busy 0.8, saturated 0.95, staleness 600 s


def forecast(p90s: dict[int, float], *, node: str = "n1", age_s: float = 0.0, memory: float = 0.2) -> LoadForecast:
    """CPU p90 per horizon as given, memory p90 ``memory`` at every horizon."""
    ts = int(NOW - age_s * 1000)
    qs = [LoadQuantiles(horizon_s=h, resource="cpu", p50=p / 2, p90=p) for h, p in sorted(p90s.items())]
    qs += [LoadQuantiles(horizon_s=h, resource="memory", p50=memory / 2, p90=memory) for h in sorted(p90s)]
    return LoadForecast(node=node, ts_ms=ts, window_end_ms=ts - ts % 300_000, status="ok", history_buckets=100,
                        quantiles=qs, model_version="f1", input_ts_ms=ts)


def unknown(node: str = "n1") -> LoadForecast:
    return LoadForecast(node=node, ts_ms=NOW, window_end_ms=NOW - NOW % 300_000, status="unknown",
                        reason="insufficient_history", history_buckets=2, model_version="f1", input_ts_ms=NOW)


def calm_anomaly(node: str = "n1") -> AnomalyScore:
    return AnomalyScore(node=node, ts_ms=NOW, score=0.0, is_anomaly=False, threshold=0.9, model_version="m",
                        input_ts_ms=NOW)


def scores(f: LoadForecast | None, cfg: ScoringConfig = CFG) -> tuple[int, ...]:
    inputs = NodeInputs.of(regime(CALM, name="none"), calm_anomaly(), forecast=f,
                           forecast_horizon_s=cfg.forecast_horizon_s)
    return evaluate(inputs, cfg, NOW).scores


BASE = scores(None)


@pytest.mark.parametrize(("case", "f", "want"), [
    ("no forecast: as before", None, BASE),
    ("low forecast: no change", forecast({300: 0.3, 900: 0.5, 1800: 0.6}), BASE),
    ("saturating at 15 min: the full weight", forecast({300: 0.5, 900: 0.97, 1800: 0.99}),
     tuple(b - 3 for b in BASE)),
    ("memory saturating at 5 min", forecast({300: 0.1, 900: 0.1}, memory=0.96), tuple(b - 3 for b in BASE)),
    ("two thirds of the way: 0.2", forecast({300: 0.9, 900: 0.5}), tuple(b - 2 for b in BASE)),
    ("saturating only at 30 min: after the pod's first 15 minutes", forecast({300: 0.3, 900: 0.5, 1800: 0.99}),
     BASE),
    ("stale saturating forecast: ignored", forecast({300: 0.99, 900: 0.99}, age_s=700), BASE),
    ("unknown forecast: ignored", unknown(), BASE),
])
def test_forecast_term(case: str, f: LoadForecast | None, want: tuple[int, ...]) -> None:
    assert (9,) * len(WORKLOAD_CLASSES) == BASE  # anomaly 0, regime none, risk unknown (0.25 × 0.5)
    assert scores(f) == want, case


def test_the_forecast_never_filters_and_is_explained() -> None:
    inputs = NodeInputs.of(regime(CALM, name="none"), forecast=forecast({300: 1.0, 900: 1.0}))
    card = evaluate(inputs, CFG, NOW)
    assert card.reasons == (None,) * len(WORKLOAD_CLASSES)
    assert card.explain(0)["forecast"] == {"peak_p90": 1.0, "horizon_s": 300, "status": "fresh", "age_ms": 0,
                                            "penalty": 0.3}
    assert card.expires_ms == NOW + 120_000 + 1  # the regime turns stale first
    assert "forecast_p90=1.00" in card.summaries[0]
    alone = evaluate(NodeInputs.of(forecast=forecast({300: 1.0})), CFG, NOW)
    assert alone.known and alone.expires_ms == NOW + 600_000 + 1
    assert evaluate(NodeInputs.of(forecast=unknown()), CFG, NOW).forecast_status == "abstained"


def test_weight_and_thresholds_are_configurable() -> None:
    f = forecast({300: 0.9, 900: 0.9})
    assert scores(f, ScoringConfig(weight_forecast=0.0)) == BASE
    assert scores(f, ScoringConfig(forecast_busy=0.5, forecast_saturated=0.9)) == tuple(b - 3 for b in BASE)
    with pytest.raises(ValueError, match="forecast_busy"):
        ScoringConfig(forecast_busy=0.9, forecast_saturated=0.8)


def test_store_applies_forecasts_ranks_and_forgets() -> None:
    store = NodeStateStore(CFG)
    for node in ("a", "b"):
        store.apply(regime(CALM, name="none", node=node), NOW)
    assert store.apply(forecast({300: 0.99, 900: 0.99}, node="b"), NOW, b"00-trace") == "b"
    assert store.traces("b") == (None, None, None)  # forecasts are not linked (only regime/anomaly/risk)
    a, b = store.lookup(["a", "b"], NOW)
    assert b[SCORES][0] < a[SCORES][0]
    assert store.apply(forecast({300: 0.1, 900: 0.1}, node="b", age_s=60), NOW) is None  # older: kept the newer
    assert store.forget(FORECASTS_TOPIC, "b", NOW)
    a, b = store.lookup(["a", "b"], NOW)
    assert b[SCORES] == a[SCORES]
