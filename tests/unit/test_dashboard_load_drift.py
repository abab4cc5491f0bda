"""The dashboard's forecast-vs-actual and drift panels, without a broker: bucketing, scoring, diffs, drift views."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import Field

from contracts.base import Contract
from contracts.models import DriftReport, FeatureDrift, FeatureVector, LoadForecast, LoadQuantiles
from contracts.topics import DRIFT_TOPIC, FORECASTS_TOPIC
from featurelib.node.schema import FEATURE_INDEX, N_FEATURES, node_feature_schema_hash
from services.dashboard.drift import DriftBoard
from services.dashboard.load import BUCKET_MS, HORIZONS_S, LoadBoard
from services.dashboard.state import DashboardState, StateConfig

T0 = 1_800_000_000_000
B0 = 5_666_666 * BUCKET_MS  # a bucket boundary (epoch-aligned 5 minutes)


def forecast(node: str, window_end: int, cpu: dict[int, tuple[float, float]],
             mem: float = 0.5) -> LoadForecast:
    qs = [LoadQuantiles(horizon_s=h, resource="cpu", p50=p50, p90=p90) for h, (p50, p90) in cpu.items()]
    qs += [LoadQuantiles(horizon_s=h, resource="memory", p50=mem, p90=min(1.0, mem + 0.1)) for h in cpu]
    return LoadForecast(node=node, ts_ms=window_end + 10_000, window_end_ms=window_end, status="ok",
                        history_buckets=100, quantiles=qs, model_version="fc-test", input_ts_ms=window_end)


def unknown(node: str, window_end: int, reason: str = "insufficient_history") -> LoadForecast:
    return LoadForecast(node=node, ts_ms=window_end + 10_000, window_end_ms=window_end, status="unknown",
                        reason=reason, history_buckets=3, model_version="fc-test", input_ts_ms=window_end)  # type: ignore[arg-type]


def fill(board: LoadBoard, node: str, end_ms: int, cpu: float, mem: float, version: int) -> int:
    """Three samples inside the bucket ending at `end_ms` (all with the same value)."""
    for k in range(3):
        t_s = (end_ms - BUCKET_MS) / 1000 + 10 + k * 60
        version += 1
        assert board.observe(node, t_s, cpu, mem, int(t_s * 1000) + 5000, version)
    return version


def test_forecast_is_scored_against_the_bucket_it_predicted_once_that_bucket_closes() -> None:
    board = LoadBoard(keep_ms=3600_000)
    v = fill(board, "n1", B0, 0.30, 0.50, 0)
    # made at the end of bucket B0: 5 min ahead = the bucket ending B0 + 5 min, and so on
    board.add_forecast(forecast("n1", B0, {300: (0.40, 0.45), 900: (0.20, 0.60), 1800: (0.5, 0.9)}), v + 1)
    v = fill(board, "n1", B0 + BUCKET_MS, 0.50, 0.50, v + 1)
    row = board.get("n1")
    assert row is not None
    assert row.errors == {}  # the target bucket is still open: nothing scored
    v = fill(board, "n1", B0 + 2 * BUCKET_MS, 0.10, 0.50, v)  # closes B0 + 5 min (actual 0.50)
    cpu5 = board.view(row)["error"]["cpu"]["300"]
    assert cpu5 == {"wape": pytest.approx(0.1 / 0.5, abs=1e-4), "p90_coverage": 0.0, "n": 1}  # 0.50 > p90 0.45
    assert "900" not in board.view(row)["error"]["cpu"]
    v = fill(board, "n1", B0 + 3 * BUCKET_MS, 0.10, 0.50, v)
    v = fill(board, "n1", B0 + 4 * BUCKET_MS, 0.10, 0.50, v)  # closes B0 + 15 min (actual 0.10)
    cpu15 = board.view(row)["error"]["cpu"]["900"]
    assert cpu15 == {"wape": pytest.approx(0.1 / 0.1, abs=1e-4), "p90_coverage": 1.0, "n": 1}
    mem5 = board.view(row)["error"]["memory"]["300"]
    assert mem5["wape"] == pytest.approx(0.0, abs=1e-9) and mem5["p90_coverage"] == 1.0
    fleet = board.summary()["error"]
    assert fleet["cpu"]["300"] == cpu5 and fleet["cpu"]["900"] == cpu15


def test_chart_puts_actual_and_each_horizon_on_the_target_bucket_and_reaches_the_latest_forecast() -> None:
    board = LoadBoard()
    v = fill(board, "n1", B0, 0.30, 0.40, 0)
    board.add_forecast(forecast("n1", B0, {300: (0.31, 0.4), 900: (0.32, 0.4), 1800: (0.33, 0.4)}), v + 1)
    row = board.get("n1")
    assert row is not None
    chart = board.view(row)["chart"]
    assert chart["s"] == B0 and chart["d"] == BUCKET_MS and chart["open_end"] == B0
    # B0, then 6 buckets up to the 30-minute target
    assert chart["actual"]["cpu"] == [0.3, None, None, None, None, None, None]
    assert chart["actual"]["memory"][0] == 0.4
    assert chart["forecast"]["300"]["cpu"] == [None, 0.31, None, None, None, None, None]
    assert chart["forecast"]["900"]["cpu"][3] == 0.32
    assert chart["forecast"]["1800"]["cpu"][6] == 0.33
    assert chart["forecast"]["300"]["memory"][1] == 0.5
    f = board.view(row)["forecast"]
    assert f["status"] == "ok" and f["reason"] is None
    assert f["quantiles"]["cpu"] == [[300, 0.31, 0.4], [900, 0.32, 0.4], [1800, 0.33, 0.4]]
    live = board.view(row)["live"]
    assert live["cpu"] == 0.3 and live["bucket_cpu"] == pytest.approx(0.3) and live["bucket_end"] == B0


def test_kept_window_is_bounded_and_the_fleet_error_follows_it() -> None:
    board = LoadBoard(keep_ms=30 * 60_000)
    v = 0
    for k in range(30):
        end = B0 + k * BUCKET_MS
        v = fill(board, "n1", end, 0.2 + 0.01 * (k % 3), 0.5, v)
        v += 1
        board.add_forecast(forecast("n1", end, {h: (0.2, 0.25) for h in HORIZONS_S}), v)
    row = board.get("n1")
    assert row is not None
    assert len(row.buckets) <= 6  # 30 minutes of 5-minute buckets
    # past targets within the window, plus the latest forecast's targets ahead of it
    assert all(len(t) <= 6 + h // 300 for h, t in row.targets.items())
    fleet = board.summary()["error"]["cpu"]
    assert 0 < fleet["300"]["n"] <= 6
    # the fleet sums are the node's own (one node): nothing leaked from buckets that left the window
    assert fleet == board.view(row)["error"]["cpu"]


def test_late_samples_are_dropped_and_a_day_old_clock_starts_the_node_afresh() -> None:
    board = LoadBoard()
    v = fill(board, "n1", B0 + BUCKET_MS, 0.3, 0.3, 0)
    assert not board.observe("n1", (B0 - BUCKET_MS) / 1000 + 5, 0.9, 0.9, B0, v + 1)
    assert board.late == 1
    assert board.observe("n1", (B0 - 2 * 86_400_000) / 1000, 0.7, 0.7, B0, v + 2)  # a new replay, days back
    row = board.get("n1")
    assert row is not None and row.open_end is not None and row.open_end < B0 - 86_400_000


def test_nan_inputs_are_not_averaged_and_vectors_of_another_schema_are_not_used() -> None:
    board = LoadBoard()
    values = [0.0] * N_FEATURES
    valid = [True] * N_FEATURES
    values[FEATURE_INDEX["cpu_util_mean_10s"]] = 0.25
    values[FEATURE_INDEX["mem_util_mean_10s"]] = 0.6
    valid[FEATURE_INDEX["mem_util_mean_10s"]] = False
    assert board.observe_vector("n1", B0 + 20_000, 10, values, valid, node_feature_schema_hash(), 1)
    assert not board.observe_vector("n1", B0 + 30_000, 10, values, valid, "0" * 64, 2)
    assert board.mismatched == 1
    row = board.get("n1")
    assert row is not None
    live = board.view(row)["live"]
    assert live["cpu"] == 0.25 and live["memory"] is None and live["bucket_memory"] is None
    assert live["bucket_end"] == B0 + BUCKET_MS  # window midpoint B0 + 15 s


def test_unknown_forecast_shows_its_reason_and_adds_no_target() -> None:
    board = LoadBoard()
    board.add_forecast(forecast("n1", B0 - BUCKET_MS, {300: (0.3, 0.4)}), 1)
    board.add_forecast(unknown("n1", B0, "inputs_missing"), 2)
    board.add_forecast(unknown("n2", B0), 3)
    row = board.get("n1")
    assert row is not None
    f = board.view(row)["forecast"]
    assert f["status"] == "unknown" and f["reason"] == "inputs_missing" and f["quantiles"] == {"cpu": [], "memory": []}
    assert list(row.targets[300]) == [B0]  # the earlier ok forecast still has its target
    s = board.summary()
    assert s["unknown"] == 2 and s["reasons"] == {"inputs_missing": 1, "insufficient_history": 1}
    assert board.unknown_count() == 2
    # an older record read later does not replace the newest
    board.add_forecast(forecast("n1", B0 - 2 * BUCKET_MS, {300: (0.3, 0.4)}), 4)
    assert board.view(row)["forecast"]["status"] == "unknown"


def vector(node: str, ts: int, cpu: float, mem: float) -> FeatureVector:
    values = [0.0] * N_FEATURES
    values[FEATURE_INDEX["cpu_util_mean_10s"]] = cpu
    values[FEATURE_INDEX["mem_util_mean_10s"]] = mem
    return FeatureVector(node=node, ts_ms=ts, window_s=10, schema_hash=node_feature_schema_hash(), values=values,
                         valid=[True] * N_FEATURES, samples=10, input_ts_ms=ts)


def observe(state: DashboardState, vec: FeatureVector) -> None:
    state.observe_vector(vec.node, vec.ts_ms, vec.window_s, vec.values, vec.valid, vec.schema_hash)


def test_state_diffs_send_the_chart_only_when_a_bucket_closes_or_a_forecast_arrives() -> None:
    state = DashboardState(StateConfig())
    observe(state, vector("n1", B0 - 60_000, 0.2, 0.4))
    state.apply(FORECASTS_TOPIC, forecast("n1", B0 - BUCKET_MS, {h: (0.2, 0.3) for h in HORIZONS_S}))
    snap = state.snapshot(B0)
    assert [r["node"] for r in snap["load"]] == ["n1"] and "chart" in snap["load"][0]
    assert snap["counts"]["load_nodes"] == 1 and snap["load_summary"]["forecasts"] == 1
    v = state.version
    observe(state, vector("n1", B0 - 30_000, 0.3, 0.4))  # same bucket: the live value only
    diff = state.snapshot(B0, since=v)
    assert diff["load"][0]["live"]["cpu"] == 0.3 and "chart" not in diff["load"][0]
    assert "load_summary" not in diff
    v = state.version
    observe(state, vector("n1", B0 + 20_000, 0.3, 0.4))  # next bucket: B0's bucket closed, scored
    diff = state.snapshot(B0 + 20_000, since=v)
    assert "chart" in diff["load"][0] and diff["load"][0]["error"]["cpu"]["300"]["n"] == 1
    assert diff["load_summary"]["error"]["cpu"]["300"]["wape"] == pytest.approx(0.05 / 0.25, abs=1e-4)
    v = state.version
    state.forget(FORECASTS_TOPIC, "n1")
    diff = state.snapshot(B0 + 20_000, since=v)
    assert diff["load"][0]["forecast"] is None and diff["load_summary"]["forecasts"] == 0
    assert state.snapshot(B0, since=state.version)["load"] == []
    # a node with only a forecast, then its tombstone: removed
    state.apply(FORECASTS_TOPIC, unknown("n2", B0))
    v = state.version
    state.forget(FORECASTS_TOPIC, "n2")
    assert state.snapshot(B0, since=v)["removed_load"] == ["n2"]


def drift_report(model: str, ts: int, status: str = "no_drift", score: float | None = 0.05,
                 **extra: Any) -> DriftReport:
    return DriftReport(model=model, model_version="v1", ts_ms=T0 + ts, window_s=300, samples=1200,
                       prediction_samples=1200,
                       status=status, reasons=["data score 0.05 <= 0.12"], data_score=score,  # type: ignore[arg-type]
                       data_threshold=0.12, max_psi=0.3, features_over=1, feature_threshold=0.25,
                       features=[FeatureDrift(feature="ipc_mean_10s", psi=0.3, missing_rate=0.0,
                                              reference_missing_rate=0.0)],
                       prediction_psi=0.02, prediction_threshold=0.2, predictions={"none": 0.7, "llc": 0.3},
                       missing_rate=0.01, reference_missing_rate=0.0, **extra)


class LaterHorizon(Contract):
    horizon_s: int
    aucpr: float
    brier: float


class DriftReportExtended(DriftReport):
    """drift.v1 as a later version may extend it: the board must pass fields it does not know through."""

    later_per_horizon: list[LaterHorizon] = Field(default_factory=list)


def test_drift_board_keeps_the_newest_report_per_model_and_a_bounded_time_ordered_history() -> None:
    board = DriftBoard(history_points=3)
    board.add(drift_report("regime", 10_000, "insufficient_data", None), 1)
    board.add(drift_report("regime", 40_000, "drift", 0.3), 2)
    board.add(drift_report("regime", 20_000), 3)  # read out of order: history point only
    board.add(drift_report("regime", 70_000), 4)
    board.add(drift_report("failure", 50_000, "insufficient_data", None), 5)
    view = {m["model"]: m for m in board.view()}
    assert [m["model"] for m in board.view()] == ["failure", "regime"]
    regime = view["regime"]
    assert regime["report"]["ts_ms"] == T0 + 70_000 and regime["report"]["status"] == "no_drift"
    assert [h["ts"] - T0 for h in regime["history"]] == [20_000, 40_000, 70_000]
    assert [h["level"] for h in regime["history"]] == [0, 1, 0]
    assert view["failure"]["report"]["data_score"] is None
    assert board.drifting() == 0 and board.version == 5
    board.add(drift_report("failure", 80_000, "drift"), 6)
    assert board.drifting() == 1


def test_drift_view_passes_fields_it_does_not_know_through_and_state_sends_it_only_when_changed() -> None:
    state = DashboardState(StateConfig())
    extended = DriftReportExtended(
        **drift_report("failure", 10_000).model_dump(),
        later_per_horizon=[LaterHorizon(horizon_s=300, aucpr=0.41, brier=0.08)])
    state.apply(DRIFT_TOPIC, extended)
    snap = state.snapshot(20_000)
    report = snap["drift"][0]["report"]
    assert report["later_per_horizon"] == [{"horizon_s": 300, "aucpr": 0.41, "brier": 0.08}]
    assert report["features"][0]["feature"] == "ipc_mean_10s" and report["predictions"] == {"none": 0.7, "llc": 0.3}
    assert snap["counts"]["drift_models"] == 1
    v = state.version
    state.apply(FORECASTS_TOPIC, unknown("n1", B0))
    assert "drift" not in state.snapshot(20_000, since=v)
    state.apply(DRIFT_TOPIC, drift_report("regime", 30_000, "drift", 0.4))
    diff = state.snapshot(30_000, since=v)
    assert [m["model"] for m in diff["drift"]] == ["failure", "regime"] and diff["counts"]["drifting_models"] == 1
    assert not math.isnan(diff["drift"][1]["history"][0]["data_score"])
