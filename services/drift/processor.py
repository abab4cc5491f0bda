"""The drift processor: features.v1 + regimes.v2 (+ risk.v2, taskevents.v1) → DriftReport on drift.v1, per model.

Inputs of the regime model (the ``used`` columns of each FeatureVector) and its raw answers
(``raw_regime`` on regimes.v2, before hysteresis, ``unknown`` included) enter sliding windows
of event time (``window.py``), binned with the reference profile of the version in use. Every
``DRIFT_REPORT_EVERY_S`` of event time one report per model is published (key = model) and the
Prometheus gauges are set. Answers of another model version than the profile's are skipped (a
rollover would mix two models' answers). These windows are in memory only: after a restart they
refill from new traffic, reporting ``insufficient_data`` until they hold ``DRIFT_MIN_SAMPLES``.

The failure model's task features are not published, so for it only its answers are compared:
each risk.v2 task record's probability per horizon against the profile's ``outputs`` (prediction
drift; the worst horizon's PSI is ``prediction_psi``). Its concept drift comes from delayed labels:
taskevents.v1 outcomes label earlier risk.v2 predictions once each horizon has passed, and the
online AUCPR / Brier per horizon are compared with the card's (``concept.py``); that state spans
hours and lives in a changelog (``concept_state.py``), restored after a restart.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import orjson
from prometheus_client import Counter, Gauge

from contracts import ContractError, RegimeLabelV2
from contracts.fast.featurevector import decode_feature_row
from contracts.models import ConceptDrift, DriftReport, FailureRiskV2, FeatureDrift, TaskEvent
from contracts.topics import DRIFT_TOPIC, REGIMES_TOPIC, RISK_TOPIC, Topic
from featurelib.drift_profile import PROFILE_FILE, ReferenceProfile, read_profile
from featurelib.node.schema import FEATURE_INDEX, node_feature_schema_hash, vector_problem
from services.drift.concept import EVENT_CODES, ConceptReference, ConceptVerdict, concept_reference
from services.drift.concept_state import ConceptState
from services.drift.settings import DriftSettings
from services.drift.window import DriftMonitor, Verdict
from services.runtime.batch_stream import Batch, BatchStream, events_of
from services.runtime.model_watch import ModelRefusedError, ModelWatcher, read_card
from services.runtime.stream_io import Sink, decode_event
from services.runtime.stream_settings import changelog_name

log = logging.getLogger(__name__)
_Stamped = TypeVar("_Stamped", TaskEvent, RegimeLabelV2, FailureRiskV2)
SERVICE = "drift"
FEATURE_TOPIC = Topic.FEATURES
TASK_TOPIC = Topic.TASKEVENTS
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
CONCEPT_STATUS = Gauge("borg_drift_concept_status", "Concept drift: 1 drift, 0 no drift, -1 insufficient data",
                       ["model"])
ONLINE_AUCPR = Gauge("borg_drift_online_aucpr", "AUCPR on matured labels in the window", ["model", "horizon_s"])
ONLINE_BRIER = Gauge("borg_drift_online_brier", "Brier score on matured labels in the window", ["model", "horizon_s"])
MATURED = Gauge("borg_drift_matured_labels", "Matured (labelled) predictions in the window", ["model", "horizon_s"])
PENDING = Gauge("borg_drift_pending_predictions", "Predictions waiting for their horizon to pass", ["model"])


@dataclass(frozen=True)
class Reference:
    version: str
    columns: np.ndarray
    """Columns of the full feature row, in the profile's feature order."""
    profile: ReferenceProfile | None
    missing_why: str = ""
    concept: ConceptReference | None = None
    """The card's held-out accuracy per horizon (failure model): the concept-drift reference."""


def _profile_of(version_dir: Path, model: str) -> ReferenceProfile | str:
    """The version's reference profile, or why there is none (a warning, not a refusal: the stage reports
    ``insufficient_data`` with the command that adds one); an unreadable profile refuses the version."""
    if not (version_dir / PROFILE_FILE).exists():
        why = (f"{version_dir.name} has no {PROFILE_FILE} (add one: python -m training.drift_reference {model} "
               f"--version {version_dir.name})")
        log.warning("drift: %s", why)
        return why
    try:
        return read_profile(version_dir)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelRefusedError(f"{version_dir / PROFILE_FILE}: unreadable reference profile ({exc})") from None


def load_regime_reference(version_dir: Path) -> Reference:
    """The regime version's card and reference profile; a version without a profile is watched for none."""
    card = read_card(version_dir, kind="regime", schema_hash=node_feature_schema_hash())
    version = str(card["version"])
    profile = _profile_of(version_dir, REGIME)
    if isinstance(profile, str):
        return Reference(version, np.zeros(0, dtype=np.int64), None, profile)
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
    concept = concept_reference(card, version)
    if isinstance(concept, str):
        log.warning("drift: %s", concept)
    profile = _profile_of(version_dir, FAILURE)
    return Reference(version, np.zeros(0, dtype=np.int64), None if isinstance(profile, str) else profile,
                     profile if isinstance(profile, str) else "", None if isinstance(concept, str) else concept)


def report_of(model: str, version: str, ts_ms: int, verdict: Verdict, settings: DriftSettings,
              concept: ConceptVerdict | None = None) -> DriftReport:
    th = settings.thresholds()
    status, reasons = verdict.status, list(verdict.reasons)
    if concept is not None:
        # one status per model: drift when any check fired, a claim when any check could make one
        if concept.status == "drift":
            status = "drift"
        elif concept.status == "no_drift" and status == "insufficient_data":
            status = "no_drift"
        reasons = [*concept.reasons[:4], *reasons][:8] if concept.status == "drift" else [*reasons, *concept.reasons]
    return DriftReport(
        model=model, model_version=version, ts_ms=ts_ms, window_s=verdict.window_s, samples=verdict.samples,
        prediction_samples=verdict.prediction_samples, status=status,
        reasons=[r[:500] for r in reasons[:8]], data_score=verdict.data_score, data_threshold=th.data_score,
        max_psi=verdict.max_psi, features_over=verdict.features_over, feature_threshold=th.feature_psi,
        features=[FeatureDrift(feature=f.feature, psi=f.psi, missing_rate=f.missing_rate,
                               reference_missing_rate=f.reference_missing_rate) for f in verdict.features],
        prediction_psi=verdict.prediction_psi, prediction_threshold=th.prediction_psi,
        predictions=verdict.predictions, missing_rate=verdict.missing_rate,
        reference_missing_rate=verdict.reference_missing_rate,
        concept_status=None if concept is None else concept.status,
        concept=[] if concept is None else [
            ConceptDrift(horizon_s=h.horizon_s, status=h.status, labels=h.labels, positives=h.positives,
                         aucpr=_unit(h.aucpr), brier=_unit(h.brier), reference_aucpr=_unit(h.reference.aucpr),
                         reference_brier=_unit(h.reference.brier),
                         reference_positive_rate=_unit(h.reference.positive_rate))
            for h in concept.horizons[:8]],
    )


def _unit(v: float | None) -> float | None:
    return None if v is None else min(max(float(v), 0.0), 1.0)


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
        topics = [FEATURE_TOPIC, REGIMES_TOPIC] + ([RISK_TOPIC, TASK_TOPIC] if failure is not None else [])
        # the concept check's pending predictions and matured labels span hours: kept in a changelog
        self.concept = ConceptState(bootstrap=settings.kafka_bootstrap, sink=sink,
                                    topic=changelog_name(SERVICE, "concept", settings.topic_prefix),
                                    replication=settings.replication_factor, config=settings.concept())
        self.stream = BatchStream(service=SERVICE, settings=settings, sink=sink, topics=topics,
                                  handle=self._handle,
                                  state=[self.concept] if failure is not None else [])
        self.feature_topic = settings.topic(FEATURE_TOPIC)
        self.risk_topic = settings.topic(RISK_TOPIC)
        self.task_topic = settings.topic(TASK_TOPIC)
        self.newest_ms = 0
        self.reports = 0

    async def _handle(self, batch: Batch) -> None:
        for w in self.watched:
            w.sync()
        self._follow_concept()
        for tp, records in batch.items():
            events = events_of(records)
            if tp.topic == self.feature_topic:
                await self.handle_features(events)
            elif tp.topic == self.risk_topic:
                await self.handle_risk(events)
            elif tp.topic == self.task_topic:
                await self.handle_tasks(events)
            else:
                await self.handle_regimes(events)
        tracker = self.concept.tracker
        if tracker is not None:
            tracker.mature()
            self.concept.persist()
        for w in self.watched:
            await self.maybe_report(w)

    def _follow_concept(self) -> None:
        reference = self.failure.reference if self.failure is not None else None
        self.concept.follow(reference.concept if reference is not None else None)

    async def handle_tasks(self, events: list[Any]) -> None:
        """Task lifecycle events: the outcomes that label the failure model's earlier predictions."""
        tracker = self.concept.tracker
        for task in await self._accepted(events, TaskEvent):
            if tracker is not None:
                tracker.add_event(task.task_id, task.ts_ms, EVENT_CODES.get(task.event, -1))

    async def _accepted(self, events: list[Any], model: type[_Stamped]) -> list[_Stamped]:
        """The events ``model`` accepts (each refusal dead-lettered: tombstones too, as every consumer does);
        their event time moves the stage's clock."""
        out: list[_Stamped] = []
        for event in events:
            try:
                value = decode_event(model, event)
            except ContractError as exc:
                await self.sink.dead_letter(event, exc.message, exc.kind)
                continue
            assert isinstance(value, model)
            self.newest_ms = max(self.newest_ms, value.ts_ms)
            out.append(value)
        return out

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
        for label in await self._accepted(events, RegimeLabelV2):
            if self.regime.counts(label.model_version) and self.regime.monitor is not None:
                self.regime.monitor.add_answer(label.ts_ms, label.raw_regime)

    async def handle_risk(self, events: list[Any]) -> None:
        """Task records only: a node record aggregates tasks already counted, and its scale differs."""
        watched = self.failure
        for risk in await self._accepted(events, FailureRiskV2):
            if watched is None or risk.target_kind != "task":
                continue
            tracker = self.concept.tracker
            if tracker is not None and risk.model_version == tracker.reference.version:
                by_s = {h.horizon_s: h.probability for h in risk.horizons}
                if all(h.horizon_s in by_s for h in tracker.reference.horizons):
                    tracker.add_prediction(risk.target, risk.ts_ms,
                                           [by_s[h.horizon_s] for h in tracker.reference.horizons])
            if not watched.counts(risk.model_version) or watched.monitor is None:
                continue
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
        tracker = self.concept.tracker if watched is self.failure else None
        concept = tracker.evaluate() if tracker is not None else None
        report = report_of(watched.name, reference.version, self.newest_ms, verdict, self.settings, concept)
        await self.sink.send(OUT_TOPIC, watched.name, report, None)
        self.reports += 1
        self._export(watched, verdict, report.status)
        if concept is not None:
            self._export_concept(watched.name, concept)

    @staticmethod
    def _export_concept(model: str, concept: ConceptVerdict) -> None:
        CONCEPT_STATUS.labels(model).set(STATUS_VALUE[concept.status])
        PENDING.labels(model).set(concept.pending)
        for h in concept.horizons:
            horizon = str(h.horizon_s)
            MATURED.labels(model, horizon).set(h.labels)
            if h.aucpr is not None:
                ONLINE_AUCPR.labels(model, horizon).set(h.aucpr)
            if h.brier is not None:
                ONLINE_BRIER.labels(model, horizon).set(h.brier)

    def _export(self, watched: Watched, verdict: Verdict, status: str) -> None:
        model = watched.name
        STATUS.labels(model).set(STATUS_VALUE[status])
        SAMPLES.labels(model).set(verdict.samples)
        REPORTS.labels(model, status).inc()
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
