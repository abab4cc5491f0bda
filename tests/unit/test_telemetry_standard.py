"""Standard OpenTelemetry variables: sampler, protocol, TLS and the resource (services/runtime/telemetry.py)."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, Sampler, TraceIdRatioBased

from services.runtime.settings import RuntimeSettings, SettingsError, load_settings
from services.runtime.telemetry import exporter_protocol, grpc_insecure, make_sampler, resource_attributes


def describe(sampler: Sampler) -> str:
    return sampler.get_description()


@pytest.mark.parametrize(
    ("name", "arg", "description"),
    [
        ("always_on", None, describe(ALWAYS_ON)),
        ("always_off", None, describe(ALWAYS_OFF)),
        ("traceidratio", 0.25, describe(TraceIdRatioBased(0.25))),
        ("parentbased_always_off", None, describe(ParentBased(ALWAYS_OFF))),
        ("parentbased_traceidratio", 0.5, describe(ParentBased(TraceIdRatioBased(0.5)))),
        # nothing set: the project's older OTEL_SAMPLE_RATIO, parent-based (legacy ratio 0.1 below)
        (None, None, describe(ParentBased(TraceIdRatioBased(0.1)))),
    ],
)
def test_samplers_follow_otel_traces_sampler(name: str | None, arg: float | None, description: str) -> None:
    assert describe(make_sampler(name, arg, legacy_ratio=0.1)) == description


def test_a_bad_sampler_is_refused_naming_the_variable() -> None:
    with pytest.raises(ValueError, match="OTEL_TRACES_SAMPLER='sometimes'"):
        make_sampler("sometimes", None)
    with pytest.raises(ValueError, match="OTEL_TRACES_SAMPLER_ARG=2"):
        make_sampler("traceidratio", 2.0)


def test_protocol_is_the_variable_else_guessed_from_the_endpoint() -> None:
    assert exporter_protocol("http://jaeger:4317", None) == "grpc"
    assert exporter_protocol("http://jaeger:4318", None) == "http/protobuf"
    assert exporter_protocol("https://collector.example/v1/traces", None) == "http/protobuf"
    assert exporter_protocol("http://jaeger:4318", "grpc") == "grpc"
    assert exporter_protocol("http://collector:443", "http/protobuf") == "http/protobuf"
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_PROTOCOL='http/json'"):
        exporter_protocol("http://x:4318", "http/json")


def test_tls_follows_the_scheme_unless_otel_exporter_otlp_insecure_says() -> None:
    assert grpc_insecure("http://jaeger:4317", None) is True
    assert grpc_insecure("jaeger:4317", None) is True
    assert grpc_insecure("https://collector:4317", None) is False
    assert grpc_insecure("https://collector:4317", True) is True
    assert grpc_insecure("http://jaeger:4317", False) is False


def test_resource_names_service_version_and_instance() -> None:
    attrs = resource_attributes("regime")
    assert attrs["service.name"] == "regime"
    assert attrs["service.version"] == "0.1.0"
    assert attrs["service.instance.id"].endswith(f"-{__import__('os').getpid()}")


def test_settings_read_the_standard_variables_and_refuse_bad_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.2")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "false")
    s = RuntimeSettings()
    assert (s.otel_traces_sampler, s.otel_traces_sampler_arg) == ("parentbased_traceidratio", 0.2)
    assert (s.otel_exporter_otlp_protocol, s.otel_exporter_otlp_insecure) == ("http/protobuf", False)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "sometimes")
    with pytest.raises(SettingsError):
        load_settings(RuntimeSettings)
