"""Settings of the risk service (env prefix ``RISK_`` plus the shared stream settings)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from featurelib.borg_units import LargestNode
from services.runtime.batch_stream import MODEL_BATCH_MAX
from services.runtime.rollout import RolloutFields
from services.runtime.stream_settings import StreamSettings, stream_default

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class RiskSettings(StreamSettings, RolloutFields):
    model_config = SettingsConfigDict(env_prefix="RISK_", frozen=True, extra="ignore")

    # features and regime (the latency-critical path) get the CPU first; one model call per batch
    nice: int | None = stream_default("nice", 10)
    batch_linger_s: float | None = stream_default("batch_linger_s", 0.02)
    batch_max: int | None = stream_default("batch_max", MODEL_BATCH_MAX)

    model_dir: Path = Field(default=PROJECT_ROOT / "models" / "failure",
                            description="failure model root (with CURRENT) or one version directory")
    rescore_s: float = Field(default=30.0, ge=0.0, le=3600.0,
                             description="re-score every running task this often in one batch (0: only on events)")
    rescore_min_change: float = Field(default=0.005, ge=0.0, le=1.0,
                                      description="publish a re-scored task only when a probability moved this much")
    xgb_min_batch: int = Field(default=256, ge=1,
                               description="batches at least this large use native XGBoost when the model ships "
                                           "boosters (measured faster from ~100 rows; onnxruntime below)")
    node_features_max_age_s: float = Field(default=300.0, gt=0,
                                           description="older node features are not joined (treated as missing)")
    rebuild_history: bool = Field(default=True,
                                  description="rebuild task history from taskevents.v1 up to the committed offsets "
                                              "before consuming (the history is in memory, not in a changelog)")
    largest_node_cpu: float | None = Field(
        default=None, gt=0,
        description="allocatable cores of the cluster's largest node: Kubernetes CPU requests are divided by it to "
                    "reach the Borg scale (featurelib.borg_units); unset: they are unknown to the model and flagged")
    largest_node_memory_gib: float | None = Field(
        default=None, gt=0, description="allocatable memory (GiB) of the cluster's largest node, as largest_node_cpu")

    def largest_node(self) -> LargestNode:
        return LargestNode(cpu_cores=self.largest_node_cpu, memory_gib=self.largest_node_memory_gib)
