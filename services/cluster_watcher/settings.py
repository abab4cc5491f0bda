"""Cluster watcher settings (env prefix WATCHER_)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.runtime.settings import RuntimeSettings


class WatcherSettings(RuntimeSettings):
    model_config = SettingsConfigDict(env_prefix="WATCHER_", frozen=True, extra="ignore")

    kubeconfig: str | None = Field(default=None, description="Kubeconfig file; unset = KUBECONFIG or in-cluster")
    namespace: str | None = Field(default=None, description="Watch one namespace's pods/deployments; unset = all")
    cluster: str = Field(default="borg-local", description="Cluster name in clusterstate.v1 keys")
    watch_timeout_s: int = Field(default=240, ge=5, le=3600, description="Server-side watch timeout (then resume)")
    state_interval_s: float = Field(default=1.0, gt=0, description="How often changed queue/replica state is sent")
    heartbeat_s: float = Field(default=30.0, gt=0, description="Unchanged state is re-sent this often")
    degraded_pending: int = Field(default=5, ge=1, description="Unscheduled pods that make a queue degraded")
    degraded_age_s: float = Field(default=60.0, gt=0, description="Oldest unscheduled pod age that degrades")
    critical_pending: int = Field(default=50, ge=1, description="Unscheduled pods that make a queue critical")
    critical_age_s: float = Field(default=300.0, gt=0, description="Oldest unscheduled pod age that is critical")
