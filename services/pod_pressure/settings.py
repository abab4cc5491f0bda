"""Settings of the pod-pressure service (env prefix ``POD_PRESSURE_`` plus the shared stream settings)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.runtime.batch_stream import MODEL_BATCH_MAX
from services.runtime.stream_settings import StreamSettings, stream_default

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class PodPressureSettings(StreamSettings):
    model_config = SettingsConfigDict(env_prefix="POD_PRESSURE_", frozen=True, extra="ignore")

    # Features and regime (the latency-critical path) get the CPU first; a pod's estimate is read by agents
    # acting over tens of seconds, so a quarter second of batching costs nothing downstream.
    nice: int | None = stream_default("nice", 10)
    batch_linger_s: float | None = stream_default("batch_linger_s", 0.25)
    batch_max: int | None = stream_default("batch_max", MODEL_BATCH_MAX)

    model_dir: Path = Field(default=PROJECT_ROOT / "models" / "pod_pressure",
                            description="pod-pressure model root (with CURRENT) or one version directory")
    max_pods_per_node: int = Field(default=256, ge=1, le=10_000,
                                   description="pods estimated per node and window; more are dropped (counted)")
    max_nodes: int = Field(default=10_000, ge=1, le=1_000_000,
                           description="nodes with an open window held at once; the longest idle is forgotten")
    monitored_saturated_at: float = Field(
        default=0.9, gt=0.0, le=10.0,
        description="a node's resctrl readings of one resource summing to this share of it count as saturated: "
        "its pods' pressures are then the larger of reading and model estimate (services/pod_pressure/monitored.py)",
    )
