"""Settings of the forecast service (env prefix ``FORECAST_`` plus the shared stream settings)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from featurelib.load_features import HISTORY, HOUR
from services.runtime.stream_settings import StreamSettings

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class ForecastSettings(StreamSettings):
    model_config = SettingsConfigDict(env_prefix="FORECAST_", frozen=True, extra="ignore")

    model_dir: Path = Field(default=PROJECT_ROOT / "models" / "forecast",
                            description="load-forecast model root (with CURRENT) or one version directory")
    min_history_buckets: int = Field(
        default=HOUR, ge=1, le=HISTORY,
        description="closed 5-minute buckets with a sample a node needs before it gets a forecast (default 1 h: "
                    "the model's lags and hourly statistics); fewer: an 'unknown' record (insufficient_history)")
