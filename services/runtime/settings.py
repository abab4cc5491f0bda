"""Base settings every service extends: frozen, keyword-only, env-driven, checked at start-up."""

from __future__ import annotations

import sys
from typing import Literal, TypeVar

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from contracts.topics import TOPICS
from services.runtime.kafka_security import KafkaSecurity

S = TypeVar("S", bound=BaseSettings)


class RuntimeSettings(KafkaSecurity):
    """Settings common to every service (Kafka client security included); a service subclasses this with its
    own env prefix."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="", case_sensitive=False)

    kafka_bootstrap: str = Field(default="127.0.0.1:9092", validation_alias="KAFKA_BOOTSTRAP")
    topic_prefix: str = Field(
        default="",
        validation_alias="BORG_TOPIC_PREFIX",
        description="Prepended to every topic name (tests and multi-tenant brokers)",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(default="INFO", validation_alias="LOG_LEVEL")
    log_format: Literal["json", "text"] = Field(default="json", validation_alias="LOG_FORMAT")
    health_host: str = Field(default="127.0.0.1", validation_alias="HEALTH_HOST")
    health_port: int = Field(default=0, ge=0, le=65535, validation_alias="HEALTH_PORT")
    otel_endpoint: str | None = Field(default=None, validation_alias="OTEL_EXPORTER_OTLP_ENDPOINT")
    otel_sample_ratio: float = Field(
        default=1.0, ge=0.0, le=1.0, validation_alias="OTEL_SAMPLE_RATIO",
        description="Deprecated alias: parent-based ratio sampler when OTEL_TRACES_SAMPLER is not set",
    )
    otel_traces_sampler: Literal[
        "always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off",
        "parentbased_traceidratio",
    ] | None = Field(default=None, validation_alias="OTEL_TRACES_SAMPLER")
    otel_traces_sampler_arg: float | None = Field(
        default=None, ge=0.0, le=1.0, validation_alias="OTEL_TRACES_SAMPLER_ARG"
    )
    otel_exporter_otlp_protocol: Literal["grpc", "http/protobuf"] | None = Field(
        default=None, validation_alias="OTEL_EXPORTER_OTLP_PROTOCOL",
        description="OTLP transport; unset: HTTP for port 4318 or a /v1/traces path, else gRPC",
    )
    otel_exporter_otlp_insecure: bool | None = Field(
        default=None, validation_alias="OTEL_EXPORTER_OTLP_INSECURE",
        description="gRPC without TLS; unset: plain text unless the endpoint is https://",
    )
    otel_sdk_disabled: bool = Field(
        default=False,
        validation_alias="OTEL_SDK_DISABLED",
        description="OpenTelemetry's standard switch: true exports no spans whatever the endpoint",
    )
    shutdown_grace_s: float = Field(default=10.0, gt=0, le=300, validation_alias="SHUTDOWN_GRACE_S")
    error_policy: Literal["deadletter", "crash"] = Field(default="deadletter", validation_alias="ERROR_POLICY")
    topic_replication: int = Field(
        default=1, ge=1, le=5, validation_alias="BORG_TOPIC_REPLICATION",
        description="Replication factor of the registry topics `borgctl topics create` and topic-init make",
    )
    topic_partitions: str = Field(
        default="", validation_alias="BORG_TOPIC_PARTITIONS",
        description="Partition counts other than the registry's, as `topic=count,…`; the node-keyed streams the "
                    "stages join and keep state for (the registry's 6-partition topics) are co-partitioned and must "
                    "be set together. Read by `borgctl topics create` and checked by every stage at start-up",
    )
    health_stall_after_s: float = Field(
        default=120.0,
        gt=0,
        validation_alias="HEALTH_STALL_AFTER_S",
        description="/healthz fails when input lag stays > 0 this long without an offset commit",
    )

    def topic(self, base: str) -> str:
        return f"{self.topic_prefix}{base}"

    @field_validator("topic_partitions")
    @classmethod
    def _partitions_are_registry_topics(cls, value: str) -> str:
        parse_topic_partitions(value)
        return value

    def partitions_of(self, base_topic: str) -> int:
        """The partition count of a registry topic (its name without the prefix) in this deployment."""
        return parse_topic_partitions(self.topic_partitions).get(base_topic) or _REGISTRY_PARTITIONS[base_topic]


class SettingsError(SystemExit):
    """Start-up failure caused by a missing or bad setting (message names the variable)."""


_REGISTRY_PARTITIONS = {spec.name: spec.partitions for spec in TOPICS}
CO_PARTITIONED = frozenset(name for name, n in _REGISTRY_PARTITIONS.items() if n == 6)
"""The node-keyed streams (and task events) the stages read together and keep state for: one count for all
(the registry gives exactly these 6 partitions; the decision topics 3, the single-record ones 1)."""


def parse_topic_partitions(value: str) -> dict[str, int]:
    """``BORG_TOPIC_PARTITIONS`` as a mapping; a ValueError naming the bad entry otherwise."""
    out: dict[str, int] = {}
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            continue
        name, sep, count = entry.partition("=")
        name = name.strip()
        if not sep or name not in _REGISTRY_PARTITIONS:
            raise ValueError(f"{entry!r}: expected `<registry topic>=<count>` "
                             f"(topics: {', '.join(_REGISTRY_PARTITIONS)})")
        try:
            n = int(count)
        except ValueError:
            raise ValueError(f"{entry!r}: the count is not an integer") from None
        if not 1 <= n <= 10_000:
            raise ValueError(f"{entry!r}: the count must be 1..10000")
        out[name] = n
    family = {name: out.get(name, _REGISTRY_PARTITIONS[name]) for name in sorted(CO_PARTITIONED)}
    if len(set(family.values())) > 1:
        raise ValueError("the co-partitioned topics must share one count (stages join them by key and keep state "
                         f"per partition): {', '.join(f'{k}={v}' for k, v in family.items())}")
    return out


def load_settings(cls: type[S]) -> S:
    """Build the settings or exit with one line per bad variable."""
    try:
        return cls()
    except ValidationError as exc:
        lines = []
        prefix = str(cls.model_config.get("env_prefix") or "")
        for err in exc.errors():
            if not err["loc"]:
                # A check across variables names them in its message; its input is every value, secrets included.
                lines.append(err["msg"].removeprefix("Value error, "))
                continue
            name = ".".join(str(p) for p in err["loc"])
            field = cls.model_fields.get(name)
            # Report the environment variable the operator sets, not the Python field name.
            if field is not None and field.validation_alias is None:
                name = f"{prefix}{name}"
            name = name.upper()
            lines.append(f"setting {name}: {err['msg']} (got {err.get('input')!r})")
        print(f"{cls.__name__}: invalid configuration\n  " + "\n  ".join(lines), file=sys.stderr)
        raise SettingsError(2) from None
