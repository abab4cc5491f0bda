"""Settings and names every stream processor (features, regime, anomaly, risk) shares.

Every name derived from a service — its consumer group ``<prefix>borg-<service>`` and its
changelog topics ``<prefix>borg-<service>-<table>-changelog`` — starts with
``BORG_TOPIC_PREFIX``, so tests with unique prefixes share one broker safely. (The names
are the ones the earlier faust-streaming apps used, so committed offsets and changelogs
carry over.)
"""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, Field
from pydantic.fields import FieldInfo

from services.runtime.settings import RuntimeSettings

PARTITIONS = 6
"""Partitions of every keyed stream topic (contracts/topics.py) and therefore of the changelogs."""


class StreamSettings(RuntimeSettings):
    """Settings every stream processor shares (explicit env names, no service prefix)."""

    commit_interval_s: float | None = Field(
        default=None, gt=0, le=60, validation_alias=AliasChoices("STREAM_COMMIT_INTERVAL_S", "FAUST_COMMIT_INTERVAL_S"),
        description="how often processed offsets are committed (state and outputs are flushed first); default "
                    "per service: features 5 s (its checkpoint rewrites every node that sent a sample), others 1 s")
    replication_factor: int = Field(
        default=1, ge=1, le=5, validation_alias=AliasChoices("STREAM_REPLICATION_FACTOR", "FAUST_REPLICATION_FACTOR"),
        description="replication factor of the changelog topics a processor creates")
    session_timeout_s: float = Field(
        default=10.0, ge=6.0, le=300.0,
        validation_alias=AliasChoices("STREAM_SESSION_TIMEOUT_S", "FAUST_SESSION_TIMEOUT_S"),
        description="how long a crashed member holds its partitions before the group rebalances without it")
    batch_max: int | None = Field(
        default=None, ge=1, le=20_000, validation_alias="STREAM_BATCH_MAX",
        description="most records handled per batch; default per service: features 500 (smaller: lower latency "
                    "under load; at 10,000 NodeState/s its p99 was ~320 ms with 500 and ~530 ms with 2,000), regime, "
                    "anomaly and risk 2,000 (their batches fill only when they are behind, and a bigger one drains "
                    "faster: regime ~7 % less CPU per record than with 500)")
    batch_linger_s: float | None = Field(
        default=None, ge=0, le=5, validation_alias=AliasChoices("STREAM_BATCH_LINGER_S", "STREAM_BATCH_WITHIN_S"),
        description="how long the broker may hold a fetch to fill a batch (bigger batches amortise model calls; "
                    "adds at most this much latency); default per service")
    flush_each_batch: bool = Field(
        default=False, validation_alias="STREAM_FLUSH_EACH_BATCH",
        description="wait for the broker to acknowledge each batch's outputs (else: before each offset commit)")
    nice: int | None = Field(
        default=None, ge=0, le=19, validation_alias="STREAM_NICE",
        description="CPU niceness the process runs at (0 = normal priority, 19 = lowest; only raised, never "
                    "lowered); default per service: features and regime 0, anomaly and risk 10 (their outputs feed "
                    "agents acting on seconds, so they yield the CPU to the latency-critical path)")
    model_poll_s: float = Field(default=5.0, gt=0, le=3600, validation_alias="MODEL_POLL_S",
                                description="how often the model directory's CURRENT is checked")


def stream_default(name: str, default: object) -> Any:
    """A service's own default for the shared ``StreamSettings`` field ``name``, declared on its settings class.

    Keeps the field's environment names, bounds and description; the variable still wins. Usage:
    ``commit_interval_s: float | None = stream_default("commit_interval_s", 5.0)``.
    """
    return FieldInfo.merge_field_infos(StreamSettings.model_fields[name], default=default)


def app_id(service: str, prefix: str) -> str:
    """The service's consumer group and the stem of its changelog topics."""
    return f"{prefix}borg-{service}"


def changelog_name(app: str, table: str, prefix: str = "") -> str:
    """The compacted changelog of one state table: ``<prefix>borg-<app>-<table>-changelog``.

    ``app`` is the stream service's name, or the consumer group of an agent or the referee
    (they add the prefix themselves through ``settings.topic``, so they pass none here).
    """
    return f"{app_id(app, prefix)}-{table}-changelog"
