"""Settings of the anomaly service (env prefix ``ANOMALY_`` plus the shared stream settings)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.runtime.stream_settings import StreamSettings

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class AnomalySettings(StreamSettings):
    model_config = SettingsConfigDict(env_prefix="ANOMALY_", frozen=True, extra="ignore")

    model_dir: Path = Field(default=PROJECT_ROOT / "models" / "anomaly",
                            description="model root (with CURRENT) or one version directory")
    threshold: float | None = Field(default=None, gt=0.0, lt=1.0,
                                    description="override the model card's alert threshold")
