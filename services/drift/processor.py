"""The drift processor: features.v1 + regimes.v2 (+ risk.v2) → DriftReport on drift.v1, per model.

Inputs of the regime model (the ``used`` columns of each FeatureVector) and its raw answers
(``raw_regime`` on regimes.v2, before hysteresis, ``unknown`` included) enter sliding windows
of event time (``window.py``), binned with the reference profile of the version in use. Every
``DRIFT_REPORT_EVERY_S`` of event time one report per model is published (key = model) and the
Prometheus gauges are set. Answers of another model version than the profile's are skipped (a
rollover would mix two models' answers). State is in memory only: after a restart the window
refills from new traffic, reporting ``insufficient_data`` until it holds ``DRIFT_MIN_SAMPLES``.

The failure model's task features are not published, so for it only its answers are compared:
each risk.v2 task record's probability per horizon against the profile's ``outputs`` (prediction
drift; the worst horizon's PSI is ``prediction_psi``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from prometheus_client import Counter, Gauge

from contracts import ContractError, RegimeLabelV2
from contracts.fast_featurevector import decode_feature_row
from contracts.models import DriftReport, FailureRiskV2, FeatureDrift
from contracts.topics import DRIFT_TOPIC, REGIMES_TOPIC, RISK_TOPIC
from featurelib.drift_profile import PROFILE_FILE, ReferenceProfile, read_profile
from featurelib.node_features import FEATURE_INDEX, node_feature_schema_hash, vector_problem
from services.drift.settings import DriftSettings
from services.drift.window import DriftMonitor, Verdict
from services.runtime.batch_stream import MODEL_BATCH_MAX, Batch, BatchStream, events_of
from services.runtime.model_watch import ModelRefusedError, ModelWatcher, read_card
from services.runtime.stream_io import Sink, decode_event

log = logging.getLogger(__name__)
NICE = 15
"""Default ``STREAM_NICE``: drift reports are minutes-scale; every other stage gets the CPU first."""
LINGER_S = 0.5
SERVICE = "drift"
FEATURE_TOPIC = "features.v1"
OUT_TOPIC = DRIFT_TOPIC
REGIME = "regime"
FAILURE = "failure"
STATUS_VALUE = {"insufficient_data": -1.0, "no_drift": 0.0, "drift": 1.0}

PSI = Gauge("borg_drift_psi", "PSI of one model input over the drift window (highest ones)", ["model", "feature"])
SCORE = Gauge("borg_drift_score", "Mean PSI over a model's inputs (multivariate data-drift score)", ["model"])
PREDICTION_PSI = Gauge("borg_drift_prediction_psi", "PSI of a model's answer distribution", ["model"])
MISSING = Gauge("borg_drift_missing_rate", "Mean share of missing inputs in the drift window", ["model"])
STATUS = Gauge("borg_drift_status", "1 drift, 0 no drift, -1 insufficient data", ["model"])
SAMPLES = Gauge("borg_drift_window_samples", "Input rows in a model's drift window", ["model"])
REPORTS = Counter("borg_drift_reports_total", "drift.v1 reports by model and status", ["model", "status"])


@dataclass(frozen=True)
class Reference:
    version: str
    columns: np.ndarray
    """Columns of the full feature row, in the profile's feature order."""
    profile: ReferenceProfile | None
    missing_why: str = ""


def load_regime_reference(version_dir: Path) -> Reference:
    """The regime version's card and reference profile; a version without a profile is watched for none."""
    card = read_card(version_dir, kind="regime", schema_hash=node_feature_schema_hash())
    version = str(card["version"])
    if not (version_dir / PROFILE_FILE).exists():
        why = (f"{version_dir.name} has no {PROFILE_FILE} (add one: python -m training.drift_reference regime "
               f"--version {version_dir.name})")
        log.warning("drift: %s", why)
        return Reference(version, np.zeros(0, dtype=np.int64), None, why)
    try:
        profile = read_profile(version_dir)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelRefusedError(f"{version_dir / PROFILE_FILE}: unreadable reference profile ({exc})") from None
    unknown = [n for n in profile.feature_names() if n not in FEATURE_INDEX]
    if unknown:
        raise ModelRefusedError(f"{version_dir}: reference profile names unknown features {unknown[:5]}")
    return Reference(version, np.array([FEATURE_INDEX[n] for n in profile.feature_names()], dtype=np.int64),
                     profile)


def load_failure_reference(version_dir: Path) -> Reference:
    """The failure version's profile: only its outputs are watched (task features are not published)."""
    try:
        card = orjson.loads((version_dir / "model_card.json").read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ModelRefusedError(f"{version_dir}: unreadable model card ({exc})") from None
    version = str(card.get("version") or version_dir.name)
    if not (version_dir / PROFILE_FILE).exists():
        why = (f"{version_dir.name} has no {PROFILE_FILE} (add one: python -m training.drift_reference failure "
               f"--version {version_dir.name})")
        log.warning("drift: %s", why)
        return Reference(version, np.zeros(0, dtype=np.int64), None, why)
    try:
        profile = read_profile(version_dir)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelRefusedError(f"{version_dir / PROFILE_FILE}: unreadable reference profile ({exc})") from None
    return Reference(version, np.zeros(0, dtype=np.int64), profile)


def report_of(model: str, version: str, ts_ms: int, verdict: Verdict, settings: DriftSettings) -> DriftReport:
    th = settings.thresholds()
    return DriftReport(
        model=model, model_version=version, ts_ms=ts_ms, window_s=verdict.window_s, samples=verdict.samples,
        prediction_samples=verdict.prediction_samples, status=verdict.status,
        reasons=[r[:500] for r in verdict.reasons[:8]], data_score=verdict.data_score, data_threshold=th.data_score,
        max_psi=verdict.max_psi, features_over=verdict.features_over, feature_threshold=th.feature_psi,
        features=[FeatureDrift(feature=f.feature, psi=f.psi, missing_rate=f.missing_rate,
                               reference_missing_rate=f.reference_missing_rate) for f in verdict.features],
        prediction_psi=verdict.prediction_psi, prediction_threshold=th.prediction_psi,
        predictions=verdict.predictions, missing_rate=verdict.missing_rate,
        reference_missing_rate=verdict.reference_missing_rate,
    )


class Watched:
    """One model's reference (followed through its ModelWatcher), windows and report clock."""

    def __init__(self, name: str, watcher: ModelWatcher[Reference], settings: DriftSettings) -> None:
        self.name = name
        self.watcher = watcher
        self.settings = settings
        self.reference: Reference | None = None
        self.monitor: DriftMonitor | None = None
        self.next_report_ms = 0
        self.psi_features: set[str] = set()

    def sync(self) -> None:
        current = self.watcher.current
        if current is self.reference:
            return
        self.reference = current
        self.monitor = (DriftMonitor(current.profile, round(self.settings.window_s * 1000), self.settings.thresholds())
                        if current.profile is not None else None)
        self.next_report_ms = 0  # a new reference: say so at once

    def counts(self, version: str) -> bool:
        """True when answers of ``version`` go into the windows (the profile's own version only)."""
        return self.monitor is not None and self.reference is not None and version == self.reference.version


class DriftProcessor:
    def __init__(self, settings: DriftSettings, sink: Sink, references: ModelWatcher[Reference],
                 failure: ModelWatcher[Reference] | None = None) -> None:
        self.settings = settings
        self.sink = sink
        self.schema_hash = node_feature_schema_hash()
        self.regime = Watched(REGIME, references, settings)
        self.failure = Watched(FAILURE, failure, settings) if failure is not None else None
        self.watched = [w for w in (self.regime, self.failure) if w is not None]
        topics = [FEATURE_TOPIC, REGIMES_TOPIC] + ([RISK_TOPIC] if failure is not None else [])
        self.stream = BatchStream(service=SERVICE, settings=settings, sink=sink, topics=topics,
                                  handle=self._handle, linger_s=LINGER_S, nice=NICE, batch_max=MODEL_BATCH_MAX)
        self.feature_topic = settings.topic(FEATURE_TOPIC)
        self.risk_topic = settings.topic(RISK_TOPIC)
        self.newest_ms = 0
        self.reports = 0

    async def _handle(self, batch: Batch) -> None:
        for w in self.watched:
            w.sync()
        for tp, records in batch.items():
            events = events_of(records)
            if tp.topic == self.feature_topic:
                await self.handle_features(events)
            elif tp.topic == self.risk_topic:
                await self.handle_risk(events)
            else:
                await self.handle_regimes(events)
        for w in self.watched:
            await self.maybe_report(w)

    async def handle_features(self, events: list[Any]) -> None:
        stamps: list[int] = []
        rows: list[np.ndarray] = []
        reference, monitor = self.regime.reference, self.regime.monitor
        for event in events:
            try:
                vector = decode_feature_row(event.message.value)
            except ContractError as exc:
                await self.sink.dead_letter(event, exc.message, exc.kind)
                continue
            problem = vector_problem(vector, self.schema_hash, SERVICE)
            if problem is not None:
                await self.sink.dead_letter(event, problem, "schema")
                continue
            self.newest_ms = max(self.newest_ms, vector.ts_ms)
            if monitor is None or reference is None:
                continue
            # float32 as the models (and the reference rows) see them; NaN where not valid
            values = np.frombuffer(vector.packed, dtype=np.float64).astype(np.float32)
            valid = np.frombuffer(vector.mask, dtype=bool)
            rows.append(np.where(valid, values, np.float32(np.nan))[reference.columns])
            stamps.append(vector.ts_ms)
        if rows and monitor is not None:
            monitor.add_inputs(np.asarray(stamps, dtype=np.int64), np.stack(rows))

    async def handle_regimes(self, events: list[Any]) -> None:
        for event in events:
            if event.message.value is None:
                continue  # a compaction tombstone
            try:
                label = decode_event(RegimeLabelV2, event)
            except ContractError as exc:
                await self.sink.dead_letter(event, exc.message, exc.kind)
                continue
            assert isinstance(label, RegimeLabelV2)
            self.newest_ms = max(self.newest_ms, label.ts_ms)
            if self.regime.counts(label.model_version) and self.regime.monitor is not None:
                self.regime.monitor.add_answer(label.ts_ms, label.raw_regime)

    async def handle_risk(self, events: list[Any]) -> None:
        """Task records only: a node record aggregates tasks already counted, and its scale differs."""
        watched = self.failure
        for event in events:
            if event.message.value is None:
                continue
            try:
                risk = decode_event(FailureRiskV2, event)
            except ContractError as exc:
                await self.sink.dead_letter(event, exc.message, exc.kind)
                continue
            assert isinstance(risk, FailureRiskV2)
            self.newest_ms = max(self.newest_ms, risk.ts_ms)
            if watched is None or risk.target_kind != "task" or not watched.counts(risk.model_version):
                continue
            assert watched.monitor is not None
            by_horizon = {f"probability_{h.horizon_s}s": h.probability for h in risk.horizons}
            watched.monitor.add_outputs(risk.ts_ms, np.array(
                [by_horizon.get(p.name, np.nan) for p in watched.monitor.profile.outputs], dtype=np.float64))

    async def maybe_report(self, watched: Watched) -> None:
        reference = watched.reference
        if reference is None or self.newest_ms == 0 or self.newest_ms < watched.next_report_ms:
            return
        watched.next_report_ms = self.newest_ms + round(self.settings.report_every_s * 1000)
        if watched.monitor is None:
            verdict = Verdict("insufficient_data", 0, 0, 0.0, [reference.missing_why])
        else:
            verdict = watched.monitor.evaluate()
        report = report_of(watched.name, reference.version, self.newest_ms, verdict, self.settings)
        await self.sink.send(OUT_TOPIC, watched.name, report, None)
        self.reports += 1
        self._export(watched, verdict)

    def _export(self, watched: Watched, verdict: Verdict) -> None:
        model = watched.name
        STATUS.labels(model).set(STATUS_VALUE[verdict.status])
        SAMPLES.labels(model).set(verdict.samples)
        REPORTS.labels(model, verdict.status).inc()
        if verdict.data_score is not None:
            SCORE.labels(model).set(verdict.data_score)
        if verdict.prediction_psi is not None:
            PREDICTION_PSI.labels(model).set(verdict.prediction_psi)
        if verdict.missing_rate is not None:
            MISSING.labels(model).set(verdict.missing_rate)
        # only the top inputs are exported: a series per input of every model would be mostly noise
        shown = {f.feature for f in verdict.features}
        for gone in watched.psi_features - shown:
            PSI.remove(model, gone)
        for f in verdict.features:
            PSI.labels(model, f.feature).set(f.psi)
        watched.psi_features = shown
