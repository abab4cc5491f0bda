"""Settings are frozen, env-driven, and a bad value stops start-up naming the variable."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.runtime.settings import RuntimeSettings, SettingsError, load_settings
from services.runtime.stream_settings import StreamSettings


def test_defaults_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "broker:9093")
    monkeypatch.setenv("BORG_TOPIC_PREFIX", "x-")
    settings = load_settings(RuntimeSettings)
    assert settings.kafka_bootstrap == "broker:9093"
    assert settings.topic("nodestate.v1") == "x-nodestate.v1"
    with pytest.raises(ValidationError):
        settings.kafka_bootstrap = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("var", "value"),
    [("OTEL_SAMPLE_RATIO", "2"), ("ERROR_POLICY", "ignore"), ("HEALTH_PORT", "http"), ("LOG_LEVEL", "loud")],
)
def test_bad_setting_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], var: str, value: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingsError):
        load_settings(RuntimeSettings)
    err = capsys.readouterr().err
    assert f"setting {var}" in err
    assert repr(value) in err


@pytest.mark.parametrize(("variable", "value"), [
    ("STREAM_NICE", "20"), ("STREAM_NICE", "-1"), ("STREAM_NICE", "high"),
    ("STREAM_BATCH_MAX", "0"), ("STREAM_BATCH_MAX", "20001"), ("STREAM_BATCH_MAX", "many"),
])
def test_bad_stream_setting_names_the_variable(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                               variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError):
        load_settings(StreamSettings)
    assert f"setting {variable}" in capsys.readouterr().err
