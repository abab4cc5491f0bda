"""Settings of the three agents: one frozen object per agent service, thresholds included."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.runtime.settings import RuntimeSettings


class AgentSettings(RuntimeSettings):
    """What every agent shares: consumer group, re-proposal period, input freshness."""

    model_config = SettingsConfigDict(env_prefix="AGENT_", frozen=True, extra="ignore")

    group_id: str | None = Field(default=None, description="Consumer group; default agent-<name>")
    repropose_s: float = Field(default=30.0, ge=0.0, description="An unchanged proposal is re-sent at most this often")
    durable_memory: bool = Field(
        default=True, description="Keep what was proposed, and when, in a compacted topic: a restart does not re-send"
    )
    max_input_age_s: float = Field(
        default=600.0, ge=0.0, description="Inputs older than this (by their ts) are ignored; 0 disables"
    )
    max_tasks: int = Field(default=200_000, gt=0, description="Live tasks remembered (oldest dropped)")


class ReliabilitySettings(AgentSettings):
    """A: replicate / scale out when failure risk or SLA pressure is high."""

    model_config = SettingsConfigDict(env_prefix="AGENT_RELIABILITY_", frozen=True, extra="ignore")

    risk_threshold: float = Field(default=0.6, ge=0.0, le=1.0, description="Task/node failure probability")
    risk_horizon_s: int | None = Field(default=None, description="Horizon to read; None = max over horizons")
    sla_ready_ratio: float = Field(default=0.8, gt=0.0, le=1.0, description="ready/desired below this = SLA pressure")
    max_step: int = Field(default=2, ge=1, description="Replicas added by one proposal at most")
    # corrective moves on per-pod pressure (podpressure.v1 + the Kubernetes API): off unless asked for
    interference: bool = Field(default=False, description="Propose evicting a pod whose co-runners push a "
                               "latency-sensitive pod past move_slo_slowdown (needs the Kubernetes API)")
    kubeconfig: str | None = Field(default=None, description="Kubeconfig for the pod/node lists (interference); "
                                   "default $KUBECONFIG, ~/.kube/config, else the pod's ServiceAccount")
    pods_refresh_s: float = Field(default=5.0, gt=0.0, le=3600.0, description="Pods and nodes re-listed this often")
    pressure_max_age_s: float = Field(default=30.0, gt=0.0, description="A pod's estimate older than this is missing")
    class_label: str = Field(default="borg-orchestrator.io/workload-class", min_length=1,
                             description="Pod label naming its workload class (the interference model's classes)")
    latency_label: str = Field(default="borg-orchestrator.io/latency-sensitive", min_length=1,
                               description="Pod label that is \"true\" on latency-sensitive pods")
    job_label: str | None = Field(default=None, description="Pod label naming its job (default: its controller)")
    move_slo_slowdown: float = Field(default=1.25, gt=1.0, description="Predicted slowdown a latency-sensitive pod "
                                     "may not exceed")
    move_min_age_s: float = Field(default=10.0, ge=0.0, description="Only pods running at least this long move")
    move_max_per_round: int = Field(default=1, ge=1, description="Evict proposals per evaluation at most")
    move_score: float = Field(default=0.8, ge=0.0, le=1.0, description="Score of an interference evict proposal")
    move_every_s: float = Field(default=2.0, ge=0.0, description="The cluster is re-planned at most this often")


class EfficiencySettings(AgentSettings):
    """B: consolidate / memory balloon / scale in when demand is low and regimes are calm."""

    model_config = SettingsConfigDict(env_prefix="AGENT_EFFICIENCY_", frozen=True, extra="ignore")

    low_cpu_util: float = Field(default=0.3, ge=0.0, le=1.0, description="Node CPU utilisation counted as idle")
    low_mem_util: float = Field(default=0.4, ge=0.0, le=1.0, description="Node memory utilisation counted as idle")
    consolidate_cpu_util: float = Field(default=0.1, ge=0.0, le=1.0, description="Node this idle is drained")
    consolidate_max_tasks: int = Field(default=3, ge=0, description="Only nodes running at most this many tasks")
    min_ready_nodes: int = Field(default=2, ge=1, description="Never consolidate below this many ready nodes")
    calm_interference: float = Field(default=1.15, ge=1.0, description="Worst predicted slowdown still 'calm'")
    calm_risk: float = Field(default=0.3, ge=0.0, le=1.0, description="Node risk still 'calm'")
    min_replicas: int = Field(default=1, ge=0, description="Never propose scaling in below this")
    balloon_factor: float = Field(default=0.8, gt=0.0, lt=1.0, description="New memory request = old * factor")
    balloon_min_mib: int = Field(default=64, ge=1, description="Never balloon a pod below this request")
    forecast_horizon_s: int = Field(
        default=1800, gt=0, description="Consolidate only when the load forecast stays low this far ahead"
    )
    forecast_cpu_p90: float = Field(
        default=0.3, ge=0.0, le=1.0, description="Forecast CPU p90 (any horizon up to forecast_horizon_s) still low"
    )
    forecast_mem_p90: float = Field(
        default=0.4, ge=0.0, le=1.0, description="Forecast memory p90 (any horizon up to forecast_horizon_s) still low"
    )


class AdmissionSettings(AgentSettings):
    """C: deprioritize / throttle / taint / cordon / evict / hold admission when queues degrade."""

    model_config = SettingsConfigDict(env_prefix="AGENT_ADMISSION_", frozen=True, extra="ignore")

    taint_interference: float = Field(default=1.5, ge=1.0, description="Slowdown that taints a node")
    noschedule_interference: float = Field(default=2.5, ge=1.0, description="Slowdown that taints NoSchedule")
    min_confidence: float = Field(default=0.6, ge=0.0, le=1.0, description="Regime confidence needed to taint")
    cordon_anomaly_score: float = Field(default=0.95, ge=0.0, le=1.0, description="Anomaly score that cordons")
    cordon_risk: float = Field(default=0.9, ge=0.0, le=1.0, description="Node failure risk that cordons")
    evict_risk: float = Field(default=0.8, ge=0.0, le=1.0, description="Task risk on a contended node that evicts")
    low_priority: int = Field(default=100, description="Pods below this priority are deprioritized first")
    throttle_step: int = Field(default=1, ge=1, description="Replicas removed by one throttle")
    taint_key: str = Field(default="borg-orchestrator.io/contended", description="Taint key for contention")
    anomaly_taint_key: str = Field(default="borg-orchestrator.io/anomalous", description="Taint key for anomalies")
