"""The efficiency agent's forecast rule: consolidate a node only when its p90 load forecast stays low for 30 min."""

from __future__ import annotations

import pytest

from contracts.base import Contract
from contracts.models import LoadForecast, LoadQuantiles
from contracts.topics import FORECASTS_TOPIC
from services.agents import efficiency_policy
from services.agents.settings import EfficiencySettings
from services.agents.view import ClusterView
from tests.unit.test_agents_policies import NOW, TOPIC, queue, regime, usage

IDLE_NODE = (regime("n9"), usage("n9", 0.04, 0.1), queue(None, ready_nodes=4))


def forecast(node: str = "n9", cpu: tuple[float, ...] = (0.05, 0.05, 0.05), mem: float = 0.1,
             ts: int = NOW, horizons: tuple[int, ...] = (300, 900, 1800)) -> LoadForecast:
    """p90s per horizon as given (p50 a bit lower)."""
    qs = [LoadQuantiles(horizon_s=h, resource="cpu", p50=c * 0.8, p90=c) for h, c in zip(horizons, cpu, strict=True)]
    qs += [LoadQuantiles(horizon_s=h, resource="memory", p50=mem * 0.8, p90=mem) for h in horizons]
    return LoadForecast(node=node, ts_ms=ts, window_end_ms=ts - ts % 300_000, status="ok", history_buckets=200,
                        quantiles=qs, model_version="f1", input_ts_ms=ts - 3)


def unknown_forecast(node: str = "n9") -> LoadForecast:
    return LoadForecast(node=node, ts_ms=NOW, window_end_ms=NOW - NOW % 300_000, status="unknown",
                        reason="insufficient_history", history_buckets=3, model_version="f1", input_ts_ms=NOW - 3)


def kinds(*inputs: Contract, **settings: float) -> list[str]:
    view = ClusterView()
    for value in inputs:
        topic = FORECASTS_TOPIC if isinstance(value, LoadForecast) else TOPIC[type(value)]
        view.update(topic, str(getattr(value, "node", None) or "k"), value)
    got = efficiency_policy.evaluate(view, EfficiencySettings(**settings), view.everything(), NOW)  # type: ignore[arg-type]
    return [c.proposal.kind for c in got]


@pytest.mark.parametrize(("case", "extra", "want"), [
    ("low forecast at every horizon", [forecast()], ["consolidate"]),
    ("cpu p90 rises at 30 min", [forecast(cpu=(0.05, 0.1, 0.45))], []),
    ("cpu p90 rises at 5 min only", [forecast(cpu=(0.35, 0.1, 0.1))], []),
    ("memory p90 high", [forecast(mem=0.6)], []),
    ("no forecast: as before the forecaster", [], ["consolidate"]),
    ("unknown forecast: as without one", [unknown_forecast()], ["consolidate"]),
    ("stale high forecast: as without one", [forecast(cpu=(0.9, 0.9, 0.9), ts=NOW - 3_600_000)], ["consolidate"]),
    ("forecast not reaching 30 min: as without one", [forecast(cpu=(0.9, 0.9), horizons=(300, 900))],
     ["consolidate"]),
    ("a high forecast never makes a busy node consolidate", [forecast()], []),
])
def test_consolidation_follows_the_forecast(case: str, extra: list[Contract], want: list[str]) -> None:
    inputs: tuple[Contract, ...] = IDLE_NODE
    if case.startswith("a high forecast"):
        inputs = (regime("n9"), usage("n9", 0.5, 0.1), queue(None, ready_nodes=4))
    assert kinds(*inputs, *extra) == want, case


def test_thresholds_are_settings_and_the_forecast_is_cited() -> None:
    high = forecast(cpu=(0.05, 0.1, 0.45))
    assert kinds(*IDLE_NODE, high, forecast_cpu_p90=0.5) == ["consolidate"]
    assert kinds(*IDLE_NODE, high, forecast_horizon_s=900) == ["consolidate"]  # 30 min no longer looked at
    view = ClusterView()
    for value in (*IDLE_NODE, forecast(cpu=(0.05, 0.12, 0.08))):
        topic = FORECASTS_TOPIC if isinstance(value, LoadForecast) else TOPIC[type(value)]
        view.update(topic, "n9", value)
    (got,) = efficiency_policy.evaluate(view, EfficiencySettings(), view.everything(), NOW)
    cited = {(e.topic, e.field): e.value for e in got.proposal.evidence}
    assert cited[FORECASTS_TOPIC, "cpu_p90_max_1800s"] == pytest.approx(0.12)
    assert cited[FORECASTS_TOPIC, "memory_p90_max_1800s"] == pytest.approx(0.1)


def test_a_new_forecast_rescopes_the_node() -> None:
    view = ClusterView()
    scope = view.update(FORECASTS_TOPIC, "n9", forecast())
    first = view.forecasts["n9"].value
    view.update(FORECASTS_TOPIC, "n9", unknown_forecast())
    statuses = [first.status, view.forecasts["n9"].value.status]
    assert scope.nodes == {"n9"} and statuses == ["ok", "unknown"]  # the newer answer replaces the older one
