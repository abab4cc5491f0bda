"""Settings of the drift service (env prefix ``DRIFT_`` plus the shared stream settings)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.drift.concept import ConceptConfig
from services.drift.window import Thresholds
from services.runtime.batch_stream import MODEL_BATCH_MAX
from services.runtime.stream_settings import StreamSettings, stream_default

PROJECT_ROOT = Path(__file__).resolve().parents[2]
_DEFAULT = Thresholds()


class DriftSettings(StreamSettings):
    model_config = SettingsConfigDict(env_prefix="DRIFT_", frozen=True, extra="ignore")

    # drift reports are minutes-scale: every other stage gets the CPU first, and batches may wait
    nice: int | None = stream_default("nice", 15)
    batch_linger_s: float | None = stream_default("batch_linger_s", 0.5)
    batch_max: int | None = stream_default("batch_max", MODEL_BATCH_MAX)

    regime_model_dir: Path = Field(default=PROJECT_ROOT / "models" / "regime",
                                   description="regime model root (with CURRENT): its version's reference_profile.json")
    failure_model_dir: Path | None = Field(default=PROJECT_ROOT / "models" / "failure",
                                           description="failure model root: its profile's outputs vs risk.v2 task "
                                                       "records (unset or missing: regime only)")
    window_s: float = Field(default=300.0, gt=0, le=86_400, description="sliding window, seconds of event time")
    report_every_s: float = Field(default=30.0, gt=0, le=3600,
                                  description="publish one drift.v1 report per model this often (event time)")
    min_samples: int = Field(default=_DEFAULT.min_samples, ge=1, description="rows a claim needs")
    feature_threshold: float = Field(default=_DEFAULT.feature_psi, gt=0, description="PSI of one drifted input")
    data_threshold: float = Field(default=_DEFAULT.data_score, gt=0, description="mean PSI over inputs: data drift")
    prediction_threshold: float = Field(default=_DEFAULT.prediction_psi, gt=0,
                                        description="PSI of the answers' distribution: prediction drift")
    missing_increase: float = Field(default=_DEFAULT.missing_increase, gt=0, le=1,
                                    description="missing-input share above the reference's that is drift")

    concept_window_s: float = Field(default=21_600.0, gt=0, le=7 * 86_400,
                                    description="failure model: sliding window of matured predictions (prediction "
                                                "event time)")
    concept_grace_s: float = Field(default=60.0, ge=0, le=3600,
                                   description="task events later than this after a horizon ends are not waited for")
    concept_sample_s: float = Field(default=60.0, ge=0, le=86_400,
                                    description="at most one prediction per task this often enters the check")
    concept_min_labels: int = Field(default=500, ge=1, description="matured labels a horizon's claim needs")
    concept_min_positives: int = Field(default=10, ge=1,
                                       description="failures (and non-failures) a horizon's claim needs")
    concept_aucpr_drop: float = Field(default=0.25, gt=0, le=2,
                                      description="AUCPR skill below the card's by more than this: concept drift")
    concept_brier_drop: float = Field(default=0.25, gt=0,
                                      description="Brier skill below the card's by more than this: concept drift")
    concept_max_tasks: int = Field(default=200_000, ge=1, description="tasks tracked at most (memory bound)")
    concept_max_labels: int = Field(default=300_000, ge=1,
                                    description="matured labels kept at most, all horizons (memory bound)")

    def concept(self) -> ConceptConfig:
        return ConceptConfig(window_ms=round(self.concept_window_s * 1000), grace_ms=round(self.concept_grace_s * 1000),
                             sample_gap_ms=round(self.concept_sample_s * 1000), min_labels=self.concept_min_labels,
                             min_positives=self.concept_min_positives, aucpr_drop=self.concept_aucpr_drop,
                             brier_drop=self.concept_brier_drop, max_tasks=self.concept_max_tasks,
                             max_labels=self.concept_max_labels)

    def thresholds(self) -> Thresholds:
        return Thresholds(feature_psi=self.feature_threshold, data_score=self.data_threshold,
                          prediction_psi=self.prediction_threshold, missing_increase=self.missing_increase,
                          min_samples=self.min_samples)
