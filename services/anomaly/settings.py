"""Settings of the anomaly service (env prefix ``ANOMALY_`` plus the shared stream settings)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.runtime.batch_stream import MODEL_BATCH_MAX
from services.runtime.stream_settings import StreamSettings, stream_default

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class AnomalySettings(StreamSettings):
    model_config = SettingsConfigDict(env_prefix="ANOMALY_", frozen=True, extra="ignore")

    # Features and regime (the latency-critical path) get the CPU first.
    nice: int | None = stream_default("nice", 10)
    # The model no longer needs a long linger (the compact forest: ~20 µs for one row, ~2 µs per row in 20),
    # but per-batch costs do: at 10,000 NodeState/s anomaly used 9-10 % of a core with 0.25 s and 16 % with
    # 0.02 s, CPU the latency-critical features and regime share. Anomaly scores feed agents that act on
    # seconds, so 0.25 s stays the default.
    batch_linger_s: float | None = stream_default("batch_linger_s", 0.25)
    batch_max: int | None = stream_default("batch_max", MODEL_BATCH_MAX)

    model_dir: Path = Field(default=PROJECT_ROOT / "models" / "anomaly",
                            description="model root (with CURRENT) or one version directory")
    threshold: float | None = Field(default=None, gt=0.0, lt=1.0,
                                    description="override the model card's alert threshold")
