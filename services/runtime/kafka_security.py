"""How every Kafka client authenticates and encrypts: one settings object, one keyword-argument builder.

Every AIOKafkaProducer / AIOKafkaConsumer / AIOKafkaAdminClient in services, borgctl and loadtests
is built with ``**kafka_client_options()``, so a deployment switches to TLS and SASL (SCRAM or
PLAIN) by environment alone. Passwords may come from a file because Kubernetes mounts Secrets as
files (and a file keeps the secret out of ``/proc/<pid>/environ`` and pod specs).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from aiokafka.conn import create_conn
from aiokafka.errors import (
    AuthenticationFailedError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)
from aiokafka.helpers import create_ssl_context
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


class KafkaSecurity(BaseSettings):
    """Kafka client security; :class:`~services.runtime.settings.RuntimeSettings` extends it, so a
    service refuses a bad value at start-up with the variable named."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="", case_sensitive=False)

    kafka_security_protocol: SecurityProtocol = Field(
        default="PLAINTEXT",
        validation_alias="KAFKA_SECURITY_PROTOCOL",
        description="PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (SASL over TLS)",
    )
    kafka_sasl_mechanism: SaslMechanism = Field(
        default="SCRAM-SHA-512",
        validation_alias="KAFKA_SASL_MECHANISM",
        description="SASL mechanism when the protocol is SASL_*",
    )
    kafka_sasl_username: str | None = Field(default=None, validation_alias="KAFKA_SASL_USERNAME")
    kafka_sasl_password: SecretStr | None = Field(
        default=None,
        validation_alias="KAFKA_SASL_PASSWORD",
        description="Prefer KAFKA_SASL_PASSWORD_FILE",
    )
    kafka_sasl_password_file: Path | None = Field(
        default=None,
        validation_alias="KAFKA_SASL_PASSWORD_FILE",
        description="File holding the SASL password (a mounted Secret); trailing newline ignored",
    )
    kafka_ssl_cafile: Path | None = Field(
        default=None,
        validation_alias="KAFKA_SSL_CAFILE",
        description="PEM CA bundle the broker certificate is checked against; unset: the system CAs",
    )
    kafka_ssl_certfile: Path | None = Field(
        default=None,
        validation_alias="KAFKA_SSL_CERTFILE",
        description="PEM client certificate (mutual TLS)",
    )
    kafka_ssl_keyfile: Path | None = Field(
        default=None,
        validation_alias="KAFKA_SSL_KEYFILE",
        description="PEM key of the client certificate",
    )
    kafka_ssl_check_hostname: bool = Field(
        default=True,
        validation_alias="KAFKA_SSL_CHECK_HOSTNAME",
        description="Check the broker certificate names the host dialled (the chain is always verified)",
    )

    @field_validator("kafka_sasl_password_file", "kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile")
    @classmethod
    def _readable_file(cls, path: Path | None) -> Path | None:
        # Found now, not at the first connection minutes later inside a retry loop.
        if path is not None and not path.is_file():
            raise ValueError(f"file {path} does not exist or is not a regular file")
        return path

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSecurity:
        protocol = self.kafka_security_protocol
        sasl = protocol.startswith("SASL_")
        tls = protocol in ("SSL", "SASL_SSL")
        problems: list[str] = []
        if sasl and not self.kafka_sasl_username:
            problems.append(f"KAFKA_SASL_USERNAME is required with KAFKA_SECURITY_PROTOCOL={protocol}")
        if sasl and self.kafka_sasl_password is None and self.kafka_sasl_password_file is None:
            problems.append(
                f"KAFKA_SASL_PASSWORD or KAFKA_SASL_PASSWORD_FILE is required with KAFKA_SECURITY_PROTOCOL={protocol}"
            )
        if self.kafka_sasl_password is not None and self.kafka_sasl_password_file is not None:
            problems.append("set only one of KAFKA_SASL_PASSWORD and KAFKA_SASL_PASSWORD_FILE")
        if (self.kafka_ssl_certfile is None) != (self.kafka_ssl_keyfile is None):
            problems.append("KAFKA_SSL_CERTFILE and KAFKA_SSL_KEYFILE go together (mutual TLS needs both)")
        if not tls and any((self.kafka_ssl_cafile, self.kafka_ssl_certfile, self.kafka_ssl_keyfile)):
            # Silently ignoring a CA file would let an operator believe the traffic is encrypted.
            problems.append(
                f"KAFKA_SSL_* files are set but KAFKA_SECURITY_PROTOCOL={protocol} does not use TLS "
                f"(use SSL or SASL_SSL)"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def sasl_password(self) -> str | None:
        if self.kafka_sasl_password is not None:
            return self.kafka_sasl_password.get_secret_value()
        if self.kafka_sasl_password_file is not None:
            # Secrets written by editors or `echo` end with a newline that is not part of the password.
            return self.kafka_sasl_password_file.read_text(encoding="utf-8").rstrip("\r\n")
        return None

    def ssl_context(self) -> ssl.SSLContext | None:
        if self.kafka_security_protocol not in ("SSL", "SASL_SSL"):
            return None
        context: ssl.SSLContext = create_ssl_context(
            cafile=self.kafka_ssl_cafile,
            certfile=self.kafka_ssl_certfile,
            keyfile=self.kafka_ssl_keyfile,
        )
        context.check_hostname = self.kafka_ssl_check_hostname
        return context


def client_options(security: KafkaSecurity) -> dict[str, Any]:
    """The aiokafka keyword arguments for ``security`` (the same for producers, consumers and admins)."""
    options: dict[str, Any] = {"security_protocol": security.kafka_security_protocol}
    context = security.ssl_context()
    if context is not None:
        options["ssl_context"] = context
    if security.kafka_security_protocol.startswith("SASL_"):
        options["sasl_mechanism"] = security.kafka_sasl_mechanism
        options["sasl_plain_username"] = security.kafka_sasl_username
        options["sasl_plain_password"] = security.sasl_password()
    return options


@functools.cache
def kafka_client_options() -> Mapping[str, Any]:
    """This process's client options from the environment, built once (one SSL context, one file read).

    A bad setting exits with the variable named, like every other setting; services have already
    checked it at start-up through their RuntimeSettings. Tests that change the environment call
    ``kafka_client_options.cache_clear()``.
    """
    from services.runtime.settings import load_settings

    # Read-only: one cached mapping is shared by every client of the process.
    return MappingProxyType(client_options(load_settings(KafkaSecurity)))


class KafkaAccessError(RuntimeError):
    """The broker refused this client's credentials or the client refused the broker's certificate."""


async def check_access(bootstrap: str, *, timeout_s: float = 10.0) -> None:
    """Fail fast on credentials or trust that retrying cannot mend.

    aiokafka logs an authentication failure and then reports only "Unable to bootstrap", which
    the runtime's start-up retries would repeat for half a minute. One connection, made here with
    the same options, turns it into one error naming the variables to fix. A broker that cannot be
    reached is not an error here: the clients' own retries handle a broker still starting.
    """
    options = kafka_client_options()
    protocol = options["security_protocol"]
    if protocol == "PLAINTEXT":
        return
    for address in (a.strip() for a in bootstrap.split(",") if a.strip()):
        host, _, port = address.rpartition(":")
        try:
            conn = await asyncio.wait_for(
                create_conn(host.strip("[]"), int(port), request_timeout_ms=int(timeout_s * 1000), **options),
                timeout_s,
            )
        except (SaslAuthenticationFailed, AuthenticationFailedError, UnsupportedSaslMechanismError) as exc:
            raise KafkaAccessError(
                f"broker {address} refused SASL user {options['sasl_plain_username']!r} "
                f"(KAFKA_SASL_MECHANISM={options['sasl_mechanism']}; check KAFKA_SASL_USERNAME and "
                f"KAFKA_SASL_PASSWORD / KAFKA_SASL_PASSWORD_FILE): {exc}"
            ) from None
        except ssl.SSLCertVerificationError as exc:
            raise KafkaAccessError(
                f"broker {address} presented a certificate this client does not trust "
                f"(check KAFKA_SSL_CAFILE and KAFKA_SSL_CHECK_HOSTNAME): {exc.verify_message}"
            ) from None
        except (OSError, KafkaError, TimeoutError):
            continue
        conn.close()
        return
