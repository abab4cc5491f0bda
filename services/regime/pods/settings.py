"""Settings of the pod-regime service (env prefix ``POD_REGIME_`` plus the shared stream settings)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.runtime.batch_stream import MODEL_BATCH_MAX
from services.runtime.stream_settings import StreamSettings, stream_default

PROJECT_ROOT = Path(__file__).resolve().parents[3]


class PodRegimeSettings(StreamSettings):
    model_config = SettingsConfigDict(env_prefix="POD_REGIME_", frozen=True, extra="ignore")

    # a shadow label nothing acts on yet: the latency-critical stages get the CPU first
    nice: int | None = stream_default("nice", 10)
    batch_linger_s: float | None = stream_default("batch_linger_s", 0.25)
    batch_max: int | None = stream_default("batch_max", MODEL_BATCH_MAX)

    model_dir: Path = Field(default=PROJECT_ROOT / "models" / "regime_pods",
                            description="pod-relative regime model root (with CURRENT) or one version directory")
    kubeconfig: str | None = Field(default=None, description="Kubeconfig for the pod list (each pod's job); default "
                                   "$KUBECONFIG, ~/.kube/config, else the pod's ServiceAccount")
    pods_refresh_s: float = Field(default=10.0, gt=0.0, le=3600.0, description="Pods re-listed this often")
    job_label: str | None = Field(default=None, description="Pod label naming its job (default: its controller)")
    job_grace_s: float = Field(default=120.0, ge=0.0, le=86_400.0,
                               description="A pod no longer listed keeps its job this long (its last window closes "
                                           "after it left)")
    max_pods_per_node: int = Field(default=256, ge=1, le=10_000,
                                   description="pods read per node and window; more are ignored (counted)")
    max_nodes: int = Field(default=10_000, ge=1, le=1_000_000,
                           description="nodes with an open window held at once; the longest idle is forgotten")
