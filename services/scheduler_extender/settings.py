"""Settings of the scheduler extender (env prefix ``EXTENDER_``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from contracts.models import WorkloadClass
from services.runtime.settings import RuntimeSettings

DEFAULT_CLASS_KEY = "borg-orchestrator.io/workload-class"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


class ExtenderSettings(RuntimeSettings):
    """Listen address, filter thresholds, score weights, staleness bound and workload-class lookup."""

    model_config = SettingsConfigDict(env_prefix="EXTENDER_", frozen=True, extra="ignore")

    host: str = Field(default="127.0.0.1", description="Listen address of the extender HTTP server")
    port: int = Field(default=8090, ge=0, le=65535, description="Listen port (0 = any free port)")
    path_prefix: str = Field(
        default="", pattern=r"^(/[A-Za-z0-9._~-]+)*$", description="Mount point, e.g. /scheduler (urlPrefix path)"
    )

    # Filter thresholds (a node over any of them is dropped for the pod, unless that would drop every node).
    max_slowdown: float = Field(
        default=1.5,
        gt=1.0,
        le=100.0,
        description="Predicted slowdown for the pod's class that makes a node severe (filtered; scores 0 on slowdown)",
    )
    min_confidence: float = Field(
        default=0.5, ge=0.0, le=1.0, description="Regime confidence needed before a slowdown can filter a node"
    )
    anomaly_threshold: float = Field(default=0.9, gt=0.0, le=1.0, description="Anomaly score that filters a node")
    risk_threshold: float = Field(default=0.8, gt=0.0, le=1.0, description="Node failure probability that filters")
    risk_horizon_s: int | None = Field(default=None, gt=0, description="Risk horizon read; None = worst horizon")

    # Scoring.
    staleness_s: float = Field(
        default=120.0, gt=0.0, description="Inputs older than this (by their ts_ms) are unknown: neutral, never filter"
    )
    weight_slowdown: float = Field(default=0.6, ge=0.0, description="Weight of the class slowdown penalty")
    weight_risk: float = Field(default=0.25, ge=0.0, description="Weight of the node-risk penalty")
    weight_anomaly: float = Field(default=0.15, ge=0.0, description="Weight of the anomaly penalty")
    unknown_penalty: float = Field(
        default=0.5, ge=0.0, le=1.0, description="Penalty of an unknown/stale input (0.5 = neutral mid-scale)"
    )
    # Load forecast term (forecasts.v1; docs/forecast.md): added to the penalty, never filters.
    weight_forecast: float = Field(default=0.3, ge=0.0, le=1.0, description="Penalty of a node forecast to saturate")
    forecast_horizon_s: int = Field(default=900, gt=0, description="Look this far ahead (the pod's first minutes)")
    forecast_busy: float = Field(default=0.8, ge=0.0, lt=1.0, description="Peak p90 load where the penalty starts")
    forecast_saturated: float = Field(default=0.95, gt=0.0, le=1.0, description="Peak p90 load of the full penalty")
    forecast_staleness_s: float = Field(
        default=600.0, gt=0.0, description="Older forecasts are ignored (one arrives per node and 5 minutes)"
    )

    # Co-runner term and trusted regimes (issue 21; docs/scheduler_extender.md "Score", docs/arena.md).
    weight_corunner: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Share of the score from the classes of the pods bound to the node (0 = off; > 0 watches "
        "pods and nodes: needs list/watch on both)",
    )
    score_confidence: float = Field(
        default=0.0, ge=0.0, le=1.0, description="Regime confidence below which its slowdown scores as unknown"
    )
    load_term: bool = Field(
        default=False,
        description="The co-runner term on per-pod pressure estimates (podpressure.v1) instead of the class "
        "table (needs EXTENDER_WEIGHT_CORUNNER > 0)",
    )
    load_recheck_s: float = Field(
        default=5.0, gt=0.0, le=300.0, description="Every node's per-pod estimates re-read this often (load term)"
    )
    pressure_max_age_s: float = Field(
        default=60.0, gt=0.0, le=3600.0, description="Per-pod estimates older than this fall back to the class guess"
    )
    latency_sensitive_classes: tuple[WorkloadClass, ...] = Field(
        default=("frontend_bound", "llc_sensitive"),
        description="Classes whose slowdown the co-runner term counts (the ones with an SLO)",
    )
    corunner_slo_slowdown: float = Field(
        default=1.25,
        gt=1.0,
        description="The load term counts a latency-sensitive pod pushed over this slowdown (the SLO, or a "
        "guard band below it; docs/arena.md)",
    )

    # Workload class of the pod.
    class_key: str = Field(default=DEFAULT_CLASS_KEY, description="Pod label (then annotation) naming the class")
    default_class: WorkloadClass = Field(default="cpu_bound", description="Class of pods without a valid label")

    # Placement policy (issue 22). ``learned`` = shadow: the heuristic still answers every call; the learned
    # Q-table scores the same candidates afterwards and disagreements are counted and sampled (docs/placement.md).
    policy: Literal["heuristic", "learned"] = Field(
        default="heuristic", description="heuristic, or learned (shadow: scored and compared, never binding)"
    )
    placement_model_dir: Path = Field(
        default=PROJECT_ROOT / "models" / "placement",
        description="Learned placement model root (CURRENT names the version) or one version directory",
    )
    model_poll_s: float = Field(
        default=5.0,
        gt=0.0,
        le=3600,
        validation_alias="MODEL_POLL_S",
        description="How often CURRENT is re-read (hot reload), as for the other models",
    )
    kubeconfig: str | None = Field(
        default=None,
        description="Kubeconfig for the pods/nodes watch (learned policy or co-runner term); "
        "unset = KUBECONFIG or in-cluster",
    )
    shadow_log_per_min: int = Field(default=10, ge=0, description="Disagreement log lines per minute at most")
    shadow_keep: int = Field(default=100, ge=1, le=10_000, description="Shadow decisions kept for /debug/shadow")

    # Explainability.
    span_detail_max_nodes: int = Field(
        default=1000, ge=0, description="Per-node inputs/scores recorded on a request's span up to this many nodes"
    )

    @model_validator(mode="after")
    def _some_weight(self) -> ExtenderSettings:
        if self.weight_slowdown + self.weight_risk + self.weight_anomaly <= 0:
            raise ValueError("at least one of EXTENDER_WEIGHT_SLOWDOWN/_RISK/_ANOMALY must be positive")
        if self.load_term and self.weight_corunner <= 0:
            raise ValueError("EXTENDER_LOAD_TERM needs EXTENDER_WEIGHT_CORUNNER > 0 (the weight the term scores at)")
        return self
