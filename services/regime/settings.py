"""Settings of the regime service (env prefix ``REGIME_`` plus the shared stream settings)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.runtime.batch_stream import MODEL_BATCH_MAX
from services.runtime.rollout import RolloutFields
from services.runtime.stream_settings import StreamSettings, stream_default

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class RegimeSettings(StreamSettings, RolloutFields):
    model_config = SettingsConfigDict(env_prefix="REGIME_", frozen=True, extra="ignore")

    # one model call per batch: a short linger gathers what the broker has
    batch_linger_s: float | None = stream_default("batch_linger_s", 0.02)
    batch_max: int | None = stream_default("batch_max", MODEL_BATCH_MAX)

    model_dir: Path = Field(default=PROJECT_ROOT / "models" / "regime",
                            description="model root (with CURRENT) or one version directory")
    hysteresis_windows: int = Field(default=2, ge=1, le=60,
                                    description="consecutive windows a new regime needs before it is reported")
    truth_file: Path | None = Field(default=None,
                                    description="simulator truth JSONL (borgctl replay --truth-out) for the online "
                                                "metrics of a rollout; unset: agreement only")
