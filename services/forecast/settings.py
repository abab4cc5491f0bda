"""Settings of the forecast service (env prefix ``FORECAST_`` plus the shared stream settings)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from featurelib.load_features import HISTORY, HOUR
from services.runtime.batch_stream import MODEL_BATCH_MAX
from services.runtime.stream_settings import StreamSettings, stream_default

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class ForecastSettings(StreamSettings):
    model_config = SettingsConfigDict(env_prefix="FORECAST_", frozen=True, extra="ignore")

    # Features and regime (the latency-critical path) get the CPU first.
    nice: int | None = stream_default("nice", 10)
    # Forecasts are made once per node and 5 minutes, so a quarter second of batching costs nothing
    # downstream and saves per-batch work, as for anomaly.
    batch_linger_s: float | None = stream_default("batch_linger_s", 0.25)
    batch_max: int | None = stream_default("batch_max", MODEL_BATCH_MAX)

    model_dir: Path = Field(default=PROJECT_ROOT / "models" / "forecast",
                            description="load-forecast model root (with CURRENT) or one version directory")
    min_history_buckets: int = Field(
        default=HOUR, ge=1, le=HISTORY,
        description="closed 5-minute buckets with a sample a node needs before it gets a forecast (default 1 h: "
                    "the model's lags and hourly statistics); fewer: an 'unknown' record (insufficient_history)")
