"""Shared building blocks for the wire models: strict config and bounded types."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# 2000-01-01T00:00:00Z .. 2100-01-01T00:00:00Z in epoch milliseconds: anything
# outside is a unit mistake (seconds or microseconds) rather than a real time.
MIN_TS_MS = 946_684_800_000
MAX_TS_MS = 4_102_444_800_000

TimestampMs = Annotated[
    int,
    Field(ge=MIN_TS_MS, le=MAX_TS_MS, description="Unix epoch time in milliseconds (UTC)"),
]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]
NonNegFloat = Annotated[float, Field(ge=0.0)]
NonNegInt = Annotated[int, Field(ge=0)]
Name = Annotated[str, Field(min_length=1, max_length=253)]


class Contract(BaseModel):
    """Base for every wire model: frozen, no unknown fields, no NaN/inf, strict types."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        strict=True,
        allow_inf_nan=False,
        populate_by_name=False,
    )
