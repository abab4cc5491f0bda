"""Settings of the features service (env prefix ``FEATURES_`` plus the shared stream settings)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.runtime.stream_settings import StreamSettings


class FeaturesSettings(StreamSettings):
    model_config = SettingsConfigDict(env_prefix="FEATURES_", frozen=True, extra="ignore")

    spread_panes: bool = Field(
        default=True, description="offset each node's pane boundaries (spreads window closes over the hop)"
    )
    fault_exit_after: int = Field(
        default=0, ge=0,
        description="TESTS ONLY: exit the process after the batch holding this many events is produced and "
                    "flushed but before its offsets are committed (a crash between processing and commit)",
    )
