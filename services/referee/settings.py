"""Referee settings (env prefix REFEREE_)."""

from __future__ import annotations

import os
import socket
from typing import Literal

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import SettingsConfigDict

from services.runtime.settings import RuntimeSettings

Mode = Literal["apply", "dry-run", "shadow"]


class RefereeSettings(RuntimeSettings):
    model_config = SettingsConfigDict(env_prefix="REFEREE_", frozen=True, extra="ignore")

    mode: Mode = Field(
        default="dry-run",
        description="apply: write; dry-run: server-side dry run (validated, nothing persisted); shadow: no API calls",
    )
    group_id: str = Field(default="referee", description="Consumer group on proposals.v1")
    window_ms: int = Field(default=500, ge=0, le=60_000, description="Decision window per target")
    min_score: float = Field(default=0.5, ge=0.0, le=1.0, description="Proposals below this are not acted on")
    cooldown_s: float = Field(default=60.0, ge=0.0, description="No second action on a target within this")
    hysteresis_s: float = Field(default=300.0, ge=0.0, description="Reversing a target's last action needs ...")
    hysteresis_margin: float = Field(default=0.15, ge=0.0, le=1.0, description="... a score this much higher")
    rate_limit_per_min: int = Field(default=30, ge=0, description="Actions per minute, cluster-wide (0 = none)")
    max_disruptions: int = Field(default=5, ge=0, description="Disruptive actions per disruption window")
    disruption_window_s: float = Field(default=300.0, gt=0.0, description="Window of the disruption budget")
    min_replicas: int = Field(default=1, ge=0, description="Never scale below (annotation min-replicas overrides)")
    max_replicas: int = Field(default=20, ge=1, description="Never scale above (annotation max-replicas overrides)")
    pdb_precheck: bool = Field(
        default=True, description="Refuse evictions a PodDisruptionBudget forbids, before asking"
    )
    kubeconfig: str | None = Field(default=None, description="Kubeconfig file; unset = KUBECONFIG or in-cluster")
    field_manager: str = Field(default="borg-referee", description="fieldManager of every write")
    conflict_retries: int = Field(default=3, ge=0, le=10, description="Re-read and retry on 409 Conflict")
    request_timeout_s: float = Field(default=10.0, gt=0.0, description="Per Kubernetes API request")
    capabilities_refresh_s: float = Field(
        default=300.0, gt=0.0, description="How often API discovery is read again (actions the API lacks are refused)"
    )
    cluster: str = Field(default="borg-local", min_length=1, max_length=253,
                         description="Cluster name: the key of its capabilities.v1 record (as the watcher's)")
    event_namespace: str = Field(default="default", description="Namespace of Events on cluster-scoped objects")
    protected_namespaces: tuple[str, ...] = Field(
        default=("kube-system", "kube-public", "kube-node-lease", "borg-system", "borg-node"),
        description="Namespaces whose admission is never held",
    )
    durable_state: bool = Field(
        default=True,
        description="Keep cooldowns, budgets and carried-out decisions in a compacted topic and restore them on start",
    )
    state_replication: int = Field(default=1, ge=1, le=5, description="Replication factor of that topic")
    leader_election: bool = Field(
        default=False,
        description="Act only while holding a coordination.k8s.io Lease (run two replicas for fail-over)",
    )
    lease_name: str = Field(default="borg-referee", min_length=1, description="Lease of the leader election")
    lease_namespace: str = Field(default="borg-system", min_length=1, description="Namespace of that Lease")
    lease_duration_s: int = Field(default=15, ge=2, le=300, description="A silent leader is replaced after this")
    renew_deadline_s: float = Field(default=10.0, gt=0.0, description="A leader that cannot renew this long stops")
    retry_period_s: float = Field(default=2.0, gt=0.0, description="How often candidates try and leaders renew")
    identity: str = Field(
        default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}",
        validation_alias=AliasChoices("REFEREE_IDENTITY", "POD_NAME"), min_length=1,
        description="This replica's name in the Lease (the manifest sets POD_NAME; default: host name and pid)",
    )

    @model_validator(mode="after")
    def _election_timing(self) -> RefereeSettings:
        if self.leader_election and not self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                "REFEREE_RETRY_PERIOD_S < REFEREE_RENEW_DEADLINE_S < REFEREE_LEASE_DURATION_S must hold "
                f"(got {self.retry_period_s} / {self.renew_deadline_s} / {self.lease_duration_s}): a leader must "
                "give up before its lease can expire for the standby"
            )
        return self
