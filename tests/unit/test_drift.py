"""Drift detection: reference profiles, PSI, sliding windows and the verdict (pure logic)."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from contracts import decode, encode
from contracts.models import DriftReport
from featurelib.drift_profile import (
    PROFILE_FILE,
    ReferenceProfile,
    build_profile,
    psi,
    quantile_edges,
    read_profile,
    write_profile,
)
from services.drift.processor import load_regime_reference, report_of
from services.drift.settings import DriftSettings
from services.drift.window import MISSING, DriftMonitor, SlidingCounts, Thresholds, bin_rows

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["a", "b", "c"]


def reference(rows: int = 20_000, seed: int = 0) -> ReferenceProfile:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, len(NAMES)))
    x[rng.random(rows) < 0.1, 2] = np.nan  # c is missing on 10 % of rows
    predicted = rng.choice(["x", "y"], size=rows, p=[0.7, 0.3])
    return build_profile(model="m", model_version="v1", source="test", x=x, names=NAMES, classes=["x", "y"],
                         predicted=predicted)


def test_psi_of_known_distributions() -> None:
    assert psi([0.5, 0.5], [50, 50]) == pytest.approx(0.0)
    # (0.75 - 0.5) ln 1.5 + (0.25 - 0.5) ln 0.5
    assert psi([0.5, 0.5], [75, 25]) == pytest.approx(0.25 * math.log(1.5) + 0.25 * math.log(2.0))
    assert psi([0.25] * 4, [10, 10, 10, 10]) == pytest.approx(0.0)
    assert psi([0.5, 0.5], [3, 0]) > 1.0  # an empty bin is floored, not infinite
    assert math.isnan(psi([0.5, 0.5], [0, 0]))  # no data: no claim


def test_quantile_edges_make_equal_bins_and_merge_ties() -> None:
    values = np.arange(1000, dtype=np.float64)
    edges = quantile_edges(values, 10)
    assert len(edges) == 9
    counts = np.bincount(np.searchsorted(edges, values, side="right"), minlength=10)
    assert counts.min() >= 99 and counts.max() <= 101
    assert quantile_edges(np.array([1.0] * 500 + [2.0] * 500), 10) == (2.0,)  # two values, two bins
    assert quantile_edges(np.array([np.nan, np.nan]), 10) == ()


def test_profile_round_trips_and_records_missing_and_classes(tmp_path: Path) -> None:
    profile = reference()
    assert profile.features[2].missing_rate == pytest.approx(0.1, abs=0.01)
    assert profile.features[0].missing_rate == 0.0
    assert sum(profile.features[0].proportions) == pytest.approx(1.0)
    assert profile.classes["x"] == pytest.approx(0.7, abs=0.02)
    write_profile(tmp_path, profile)
    assert read_profile(tmp_path) == profile
    with pytest.raises(ValueError, match="outside the classes"):
        build_profile(model="m", model_version="v", source="t", x=np.zeros((2, 1)), names=["a"], classes=["x"],
                      predicted=["x", "z"])


def test_sliding_counts_forget_rows_older_than_the_window() -> None:
    counts = SlidingCounts([3], window_ms=10_000)
    counts.add(0, np.array([0]))
    counts.add(5_000, np.array([MISSING]))
    assert len(counts) == 2 and counts.missing(0) == 1
    counts.add(12_000, np.array([2]))  # the row at 0 leaves
    assert len(counts) == 2 and counts.valid_counts(0).tolist() == [0, 0, 1] and counts.missing(0) == 1
    counts.add(30_000, np.array([1]))
    assert len(counts) == 1 and counts.valid_counts(0).tolist() == [0, 1, 0] and counts.missing(0) == 0


def test_bin_rows_uses_the_reference_edges() -> None:
    profile = reference()
    idx = bin_rows(np.array([[-100.0, 100.0, np.nan]]), profile.features)
    assert idx.tolist() == [[0, profile.features[1].bins - 1, MISSING]]


def monitor(**kw: float) -> DriftMonitor:
    return DriftMonitor(reference(), window_ms=300_000, thresholds=Thresholds(min_samples=200, **kw))  # type: ignore[arg-type]


def feed(m: DriftMonitor, x: np.ndarray, answers: list[str], t0: int = 1_000_000) -> None:
    stamps = t0 + np.arange(len(x)) * 300  # 1,000 rows fill the 5-minute window
    m.add_inputs(stamps, x)
    for ts, a in zip(stamps.tolist(), answers, strict=True):
        m.add_answer(ts, a)


def test_same_distribution_is_no_drift_and_a_shift_crosses_the_threshold() -> None:
    rng = np.random.default_rng(1)
    same = monitor()
    x = rng.normal(size=(1000, 3))
    feed(same, x, list(rng.choice(["x", "y"], size=1000, p=[0.7, 0.3])))
    verdict = same.evaluate()
    assert verdict.status == "no_drift", verdict.reasons
    assert verdict.data_score is not None and verdict.data_score < 0.05
    assert verdict.prediction_psi is not None and verdict.prediction_psi < 0.05

    shifted = monitor()
    feed(shifted, rng.normal(loc=1.0, size=(1000, 3)), list(rng.choice(["x", "y"], size=1000, p=[0.7, 0.3])))
    verdict = shifted.evaluate()
    assert verdict.status == "drift"
    assert verdict.data_score is not None and verdict.data_score > 0.2
    assert verdict.features_over == 3 and any(r.startswith("data:") for r in verdict.reasons)
    assert not any(r.startswith("prediction:") for r in verdict.reasons)


def test_prediction_drift_alone_is_reported() -> None:
    rng = np.random.default_rng(2)
    m = monitor()
    feed(m, rng.normal(size=(1000, 3)), ["y"] * 800 + ["x"] * 200)
    verdict = m.evaluate()
    assert verdict.status == "drift" and verdict.predictions["y"] == pytest.approx(0.8)
    assert verdict.prediction_psi is not None and verdict.prediction_psi > 0.2
    assert [r for r in verdict.reasons if r.startswith("prediction:")]


def test_missing_inputs_over_the_reference_rate_are_drift() -> None:
    rng = np.random.default_rng(3)
    m = monitor()
    x = rng.normal(size=(1000, 3))
    x[:, 0] = np.nan
    x[:, 1] = np.nan
    feed(m, x, ["x"] * 700 + ["y"] * 300)
    verdict = m.evaluate()
    assert verdict.status == "drift" and verdict.missing_rate is not None and verdict.missing_rate > 0.6
    assert any(r.startswith("missing inputs") for r in verdict.reasons)


def test_no_data_no_claim() -> None:
    m = monitor()
    assert m.evaluate().status == "insufficient_data"
    rng = np.random.default_rng(4)
    feed(m, rng.normal(loc=5.0, size=(50, 3)), ["y"] * 50)  # far off, but too few rows to say so
    verdict = m.evaluate()
    assert verdict.status == "insufficient_data" and verdict.data_score is None


def test_a_part_filled_window_makes_no_claim() -> None:
    rng = np.random.default_rng(7)
    m = monitor()
    x = rng.normal(loc=3.0, size=(1000, 3))
    m.add_inputs(1_000_000 + np.arange(1000) * 100, x)  # 100 s of a 300 s window: enough rows, too short a span
    verdict = m.evaluate()
    assert verdict.status == "insufficient_data" and "spans" in verdict.reasons[0]


def test_old_rows_leave_the_window_and_the_verdict_recovers() -> None:
    rng = np.random.default_rng(5)
    m = monitor()
    feed(m, rng.normal(loc=2.0, size=(1000, 3)), ["x"] * 700 + ["y"] * 300, t0=1_000_000)
    assert m.evaluate().status == "drift"
    # 10 minutes later only in-distribution rows are in the 5-minute window
    feed(m, rng.normal(size=(1000, 3)), ["x"] * 700 + ["y"] * 300, t0=1_000_000 + 600_000)
    assert m.evaluate().status == "no_drift"


def test_report_is_a_valid_drift_v1_record() -> None:
    rng = np.random.default_rng(6)
    m = monitor()
    feed(m, rng.normal(loc=1.0, size=(1000, 3)), ["x"] * 1000)
    report = report_of("regime", "v1", 1_700_000_000_000, m.evaluate(), DriftSettings())
    again = decode(DriftReport, encode(report))
    assert again == report and again.status == "drift" and again.features[0].psi >= again.features[-1].psi


def test_shipped_regime_model_has_a_loadable_reference_profile() -> None:
    root = ROOT / "models" / "regime"
    version = (root / "CURRENT").read_text().strip()
    ref = load_regime_reference(root / version)
    assert ref.profile is not None and ref.profile.model_version == version == ref.version
    card = json.loads((root / version / "model_card.json").read_text())
    assert ref.profile.feature_names() == card["features"]["used"]
    assert sum(ref.profile.classes.values()) == pytest.approx(1.0)


def test_version_without_a_profile_is_watched_for_none(tmp_path: Path) -> None:
    root = ROOT / "models" / "regime"
    src = root / (root / "CURRENT").read_text().strip()
    dst = tmp_path / src.name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(PROFILE_FILE, "*.onnx"))
    ref = load_regime_reference(dst)
    assert ref.profile is None and "training.drift_reference" in ref.missing_why


def test_reference_cli_regenerates_a_profile_for_an_existing_version(tmp_path: Path) -> None:
    from training.drift_reference import main

    root = ROOT / "models" / "regime"
    src = root / (root / "CURRENT").read_text().strip()
    dst = tmp_path / src.name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(PROFILE_FILE))
    assert main(["regime", "--model-dir", str(dst), "--quick"]) == 0
    profile = read_profile(dst)
    assert profile.rows > 100 and "smaller run" in profile.source
    assert sum(profile.classes.values()) == pytest.approx(1.0) and set(profile.classes) >= {"none", "unknown"}


def test_failure_trainer_writes_a_profile_that_the_cli_recomputes(tmp_path: Path) -> None:
    from training.cli import train_failure
    from training.drift_reference import main
    from training.synthetic_trace import SyntheticConfig, generate, write_google2011

    write_google2011(generate(SyntheticConfig(seed=11, duration_s=10 * 3600, n_jobs=500)), tmp_path / "g", n_parts=2)
    tasks, jobs = tmp_path / "g" / "task_events", tmp_path / "g" / "job_events"
    assert train_failure(["--task-events", str(tasks), "--job-events", str(jobs), "--out", str(tmp_path / "m"),
                          "--seed", "1", "--quiet"]) == 0
    version_dir = tmp_path / "m" / (tmp_path / "m" / "CURRENT").read_text().strip()
    trained = read_profile(version_dir)
    assert trained.model == "failure" and trained.rows > 0 and len(trained.features) == 46
    assert [o.name for o in trained.outputs] == ["probability_300s", "probability_900s", "probability_3600s"]
    (version_dir / PROFILE_FILE).unlink()
    assert main(["failure", "--model-dir", str(version_dir), "--task-events", str(tasks),
                 "--job-events", str(jobs)]) == 0
    assert read_profile(version_dir) == dataclasses.replace(trained, source=read_profile(version_dir).source)


def test_numeric_answers_shifted_upwards_are_prediction_drift() -> None:
    rng = np.random.default_rng(8)
    outputs = {"probability_300s": rng.beta(1, 20, 5000), "probability_900s": rng.beta(1, 10, 5000)}
    profile = build_profile(model="failure", model_version="v1", source="test", x=np.zeros((5000, 0)), names=[],
                            outputs=outputs)
    calm, shifted = (DriftMonitor(profile, 300_000, Thresholds(min_samples=200)) for _ in range(2))
    for i in range(1000):
        ts = 1_000_000 + i * 300
        calm.add_outputs(ts, np.array([rng.beta(1, 20), rng.beta(1, 10)]))
        shifted.add_outputs(ts, np.array([rng.beta(1, 20), rng.beta(3, 10)]))  # the 900 s risk rose
    verdict = calm.evaluate()
    assert verdict.status == "no_drift" and verdict.samples == 0 and verdict.data_score is None, verdict.reasons
    assert verdict.prediction_psi is not None and verdict.prediction_psi < 0.05
    verdict = shifted.evaluate()
    assert verdict.status == "drift" and "probability_900s" in verdict.reasons[0], verdict.reasons


class _Sink:
    """Records what the processor sends and dead-letters (no broker)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []
        self.dead: list[str] = []

    async def send(self, topic: str, key: str, value: Any, ctx: Any) -> None:
        self.sent.append((topic, key, value))

    async def dead_letter(self, event: Any, error: str, kind: str) -> None:
        self.dead.append(error)


async def test_processor_reports_failure_prediction_drift_from_risk_task_records(tmp_path: Path) -> None:
    from contracts.models import FailureRiskV2, HorizonRisk
    from services.drift.processor import DriftProcessor, load_failure_reference
    from services.runtime.model_watch import ModelWatcher
    from tests.unit.standins import Ev, Msg

    rng = np.random.default_rng(9)
    version = tmp_path / "failure" / "f1"
    version.mkdir(parents=True)
    (tmp_path / "failure" / "CURRENT").write_text("f1\n")
    (version / "model_card.json").write_text(json.dumps({"version": "f1"}))
    write_profile(version, build_profile(model="failure", model_version="f1", source="test", x=np.zeros((4000, 0)),
                                         names=[], outputs={"probability_300s": rng.beta(1, 20, 4000)}))
    settings = DriftSettings(min_samples=200, report_every_s=30)
    regime = ModelWatcher("r", ROOT / "models" / "regime", load_regime_reference)
    failure = ModelWatcher("f", tmp_path / "failure", load_failure_reference)
    sink = _Sink()
    processor = DriftProcessor(settings, sink, regime, failure)  # type: ignore[arg-type]
    processor.failure.sync()  # type: ignore[union-attr]

    def event(i: int, p: float, kind: str = "task") -> Ev:
        risk = FailureRiskV2(target_kind=kind, target=f"t{i}", ts_ms=1_700_000_000_000 + i * 300,  # type: ignore[arg-type]
                             horizons=[HorizonRisk(horizon_s=300, probability=p)], model_version="f1",
                             input_ts_ms=1_700_000_000_000)
        return Ev(Msg("risk.v2", 0, i, None, encode(risk), [], 0.0))

    # risk far above the reference's for 1,000 task records; node records and a bad record do not count
    await processor.handle_risk([event(i, float(rng.beta(5, 10))) for i in range(1000)]
                                + [event(2000, 0.9, "node"), Ev(Msg("risk.v2", 0, 9, None, b"{", [], 0.0))])
    await processor.maybe_report(processor.failure)  # type: ignore[arg-type]
    assert len(sink.dead) == 1
    (topic, key, report), = sink.sent
    assert (topic, key, report.model, report.model_version) == ("drift.v1", "failure", "failure", "f1")
    assert report.status == "drift" and report.prediction_samples == 1000 and report.samples == 0
    assert report.prediction_psi is not None and report.prediction_psi > 1.0
