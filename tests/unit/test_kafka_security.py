"""Kafka client security settings: what each variable does and how a bad one is refused (pure, no broker)."""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.runtime.kafka_security import KafkaSecurity, client_options, kafka_client_options
from services.runtime.settings import RuntimeSettings, SettingsError, load_settings

VARIABLES = (
    "KAFKA_SECURITY_PROTOCOL", "KAFKA_SASL_MECHANISM", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD",
    "KAFKA_SASL_PASSWORD_FILE", "KAFKA_SSL_CAFILE", "KAFKA_SSL_CERTFILE", "KAFKA_SSL_KEYFILE",
    "KAFKA_SSL_CHECK_HOSTNAME",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    kafka_client_options.cache_clear()
    yield
    kafka_client_options.cache_clear()


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real self-signed certificate: ssl.SSLContext loads it as a CA."""
    folder = tmp_path_factory.mktemp("ca")
    key, cert = folder / "ca.key", folder / "ca.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
         "-subj", "/CN=unit", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert


def refusal(capsys: pytest.CaptureFixture[str], cls: type[KafkaSecurity] = KafkaSecurity) -> str:
    with pytest.raises(SettingsError):
        load_settings(cls)
    return capsys.readouterr().err


def test_default_is_plaintext_with_nothing_else() -> None:
    assert client_options(KafkaSecurity()) == {"security_protocol": "PLAINTEXT"}
    assert dict(kafka_client_options()) == {"security_protocol": "PLAINTEXT"}


def test_sasl_ssl_with_scram_and_a_password_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                 ca_file: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")  # as `kubectl create secret --from-file` from an editor's file
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("KAFKA_SASL_MECHANISM", "SCRAM-SHA-256")
    monkeypatch.setenv("KAFKA_SASL_USERNAME", "borg")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD_FILE", str(secret))
    monkeypatch.setenv("KAFKA_SSL_CAFILE", str(ca_file))
    options = kafka_client_options()
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-256"
    assert options["sasl_plain_username"] == "borg"
    assert options["sasl_plain_password"] == "s3cret"
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert kafka_client_options() is options  # built once per process
    with pytest.raises(TypeError):
        options["security_protocol"] = "PLAINTEXT"  # type: ignore[index]


def test_ssl_without_hostname_check_still_verifies_the_chain(monkeypatch: pytest.MonkeyPatch, ca_file: Path) -> None:
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SSL")
    monkeypatch.setenv("KAFKA_SSL_CAFILE", str(ca_file))
    monkeypatch.setenv("KAFKA_SSL_CHECK_HOSTNAME", "false")
    options = client_options(KafkaSecurity())
    assert set(options) == {"security_protocol", "ssl_context"}
    assert not options["ssl_context"].check_hostname
    assert options["ssl_context"].verify_mode == ssl.CERT_REQUIRED


def test_sasl_plaintext_has_no_ssl_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("KAFKA_SASL_MECHANISM", "PLAIN")
    monkeypatch.setenv("KAFKA_SASL_USERNAME", "u")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "p")
    assert client_options(KafkaSecurity()) == {
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "u", "sasl_plain_password": "p",
    }


def test_sasl_without_username_names_the_variable(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "hunter2")
    err = refusal(capsys)
    assert "KAFKA_SASL_USERNAME is required with KAFKA_SECURITY_PROTOCOL=SASL_SSL" in err
    assert "hunter2" not in err  # a check across variables never echoes the secret it was given


def test_sasl_without_any_password_names_both_variables(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("KAFKA_SASL_USERNAME", "u")
    assert "KAFKA_SASL_PASSWORD or KAFKA_SASL_PASSWORD_FILE is required" in refusal(capsys)


def test_both_password_sources_are_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pw").write_text("a")
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("KAFKA_SASL_USERNAME", "u")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "b")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD_FILE", str(tmp_path / "pw"))
    assert "set only one of KAFKA_SASL_PASSWORD and KAFKA_SASL_PASSWORD_FILE" in refusal(capsys)


def test_a_missing_file_names_its_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SSL")
    monkeypatch.setenv("KAFKA_SSL_CAFILE", str(tmp_path / "nowhere.pem"))
    err = refusal(capsys)
    assert "setting KAFKA_SSL_CAFILE:" in err and "nowhere.pem does not exist" in err


def test_unknown_protocol_and_mechanism_are_refused(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "TLS")
    monkeypatch.setenv("KAFKA_SASL_MECHANISM", "GSSAPI")
    err = refusal(capsys)
    assert "setting KAFKA_SECURITY_PROTOCOL:" in err and "setting KAFKA_SASL_MECHANISM:" in err


def test_tls_files_without_tls_are_refused(monkeypatch: pytest.MonkeyPatch, ca_file: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KAFKA_SSL_CAFILE", str(ca_file))
    assert "KAFKA_SECURITY_PROTOCOL=PLAINTEXT does not use TLS" in refusal(capsys)


def test_client_certificate_needs_its_key(monkeypatch: pytest.MonkeyPatch, ca_file: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SSL")
    monkeypatch.setenv("KAFKA_SSL_CERTFILE", str(ca_file))
    assert "KAFKA_SSL_CERTFILE and KAFKA_SSL_KEYFILE go together" in refusal(capsys)


def test_every_service_settings_object_refuses_a_bad_security_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A service fails at start-up, not at its first connection: the fields are part of RuntimeSettings.
    from services.referee.settings import RefereeSettings

    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    for cls in (RuntimeSettings, RefereeSettings):
        assert "KAFKA_SASL_USERNAME is required" in refusal(capsys, cls)


def test_password_is_hidden_in_the_settings_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("KAFKA_SASL_USERNAME", "u")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "hunter2")
    settings = RuntimeSettings()
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings.model_dump())
    assert settings.sasl_password() == "hunter2"
