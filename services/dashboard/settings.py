"""Settings of the dashboard (env prefix ``DASHBOARD_``).

One port serves the page, the event stream, the JSON API and /healthz /readyz /metrics. Where to
listen: ``DASHBOARD_HOST`` / ``DASHBOARD_PORT``, falling back to the common ``HEALTH_HOST`` /
``HEALTH_PORT`` (so the container image, compose and the manifests, which set those to 0.0.0.0:8080
for every service, need nothing dashboard-specific), else 127.0.0.1:8080. The runtime's own health
listener, which every service starts, cannot share that port: for the dashboard it listens on
``DASHBOARD_HEALTH_HOST`` / ``DASHBOARD_HEALTH_PORT`` (default: loopback, any free port).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from services.dashboard.state import StateConfig
from services.runtime.settings import RuntimeSettings

StartAt = Literal["earliest", "latest", "lookback"]
DEFAULT_ARENA_RESULTS = Path(__file__).resolve().parents[2] / "docs" / "arena" / "results.json"
"""The project's latest full arena run (docs/arena.md says how it was made); absent in container images."""


class DashboardSettings(RuntimeSettings):
    model_config = SettingsConfigDict(env_prefix="DASHBOARD_", frozen=True, extra="ignore", populate_by_name=True)

    host: str = Field(
        default="127.0.0.1",
        validation_alias=AliasChoices("DASHBOARD_HOST", "HEALTH_HOST"),
        description="Listen address of the page and its API",
    )
    port: int = Field(
        default=8080,
        ge=0,
        le=65535,
        validation_alias=AliasChoices("DASHBOARD_PORT", "HEALTH_PORT"),
        description="Listen port (0 = any free port; the chosen one is logged)",
    )
    # The runtime's separate health listener (the same checks are also served on `port`).
    health_host: str = Field(default="127.0.0.1")
    health_port: int = Field(default=0, ge=0, le=65535)

    jaeger_url: str = Field(
        default="http://127.0.0.1:16686", description="Jaeger UI base for trace links (<url>/trace/<trace id>)"
    )
    jaeger_query_url: str | None = Field(
        default=None, description="Jaeger query API base the trace page reads (default: DASHBOARD_JAEGER_URL)"
    )
    start: StartAt = Field(
        default="lookback",
        description="Where reading starts: earliest, latest, or lookback_minutes back (clusterstate.v1: earliest)",
    )
    lookback_minutes: float = Field(default=30.0, gt=0, le=7 * 24 * 60)
    stale_s: float = Field(default=60.0, gt=0, description="A node signal older than this (by its ts_ms) is stale")
    history_minutes: float = Field(default=10.0, gt=0, le=24 * 60, description="Sparkline span")
    sparkline_points: int = Field(default=60, ge=2, le=1000)
    max_decisions: int = Field(default=500, ge=1, le=20_000, description="Decisions held (and sent to a new page)")
    max_deadletters: int = Field(default=100, ge=1, le=10_000)
    push_interval_s: float = Field(default=1.0, gt=0, le=60, description="At most one browser update per interval")
    offsets_interval_s: float = Field(default=2.0, gt=0, le=300, description="Topic rates and consumer lag poll")
    read_features: bool = Field(
        default=True,
        description="Read features.v1 for the actual load beside the forecast (one vector per node per 10 s; "
                    "off on very large clusters: the forecast panel then shows forecasts without actuals)",
    )
    load_history_minutes: float = Field(
        default=60.0, ge=5, le=24 * 60,
        description="Per node: how far back the forecast panel keeps actual 5-minute means and past forecasts",
    )
    drift_history_points: int = Field(default=120, ge=2, le=10_000, description="drift.v1 reports kept per model")
    arena_results: Path | None = Field(
        default=DEFAULT_ARENA_RESULTS,
        description="results.json of `borgctl eval arena` (or its --out directory) for the Benefit panel",
    )

    def state_config(self) -> StateConfig:
        return StateConfig(
            stale_ms=int(self.stale_s * 1000),
            history_ms=int(self.history_minutes * 60_000),
            sparkline_points=self.sparkline_points,
            max_decisions=self.max_decisions,
            max_deadletters=self.max_deadletters,
            snapshot_decisions=min(self.max_decisions, 300),
            topic_prefix=self.topic_prefix,
            jaeger_url=self.jaeger_url,
            load_keep_ms=int(self.load_history_minutes * 60_000),
            drift_history_points=self.drift_history_points,
        )
