"""Settings of the features service (env prefix ``FEATURES_`` plus the shared stream settings)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.runtime.stream_settings import StreamSettings, stream_default


class FeaturesSettings(StreamSettings):
    model_config = SettingsConfigDict(env_prefix="FEATURES_", frozen=True, extra="ignore")

    # Each commit rewrites the state of every node that sent a sample since the last (~13 µs each),
    # so at 1 Hz per node a 1 s interval spends ~13 µs of every sample on it, 5 s ~3 µs.
    commit_interval_s: float | None = stream_default("commit_interval_s", 5.0)

    spread_panes: bool = Field(
        default=True, description="offset each node's pane boundaries (spreads window closes over the hop)"
    )
    fault_exit_after: int = Field(
        default=0, ge=0,
        description="TESTS ONLY: exit the process after the batch holding this many events is produced and "
                    "flushed but before its offsets are committed (a crash between processing and commit)",
    )
