"""OpenTelemetry set-up: OTLP export when an endpoint is configured, never blocking the pipeline.

The standard OpenTelemetry variables are honoured (the settings object reads them):

* ``OTEL_SDK_DISABLED=true``: no export at all;
* ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG``: ``always_on``, ``always_off``, ``traceidratio``,
  ``parentbased_always_on``, ``parentbased_always_off``, ``parentbased_traceidratio``. Without them the
  project's older ``OTEL_SAMPLE_RATIO`` (kept as an alias for one release) gives
  ``parentbased_traceidratio`` at that ratio, as before;
* ``OTEL_EXPORTER_OTLP_PROTOCOL``: ``grpc`` or ``http/protobuf``; without it the protocol is guessed from
  the endpoint as before (port 4318 or a ``/v1/traces`` path: HTTP, else gRPC);
* ``OTEL_EXPORTER_OTLP_INSECURE``: TLS off (true) or on (false) for gRPC; without it an ``http://``
  endpoint (or one without a scheme) is plain text and ``https://`` uses TLS. ``OTEL_EXPORTER_OTLP_HEADERS``
  and ``OTEL_EXPORTER_OTLP_CERTIFICATE`` are read by the exporters themselves;
* ``OTEL_RESOURCE_ATTRIBUTES`` / ``OTEL_SERVICE_NAME``: merged into the resource by the SDK. The resource
  always carries ``service.name``, ``service.version`` (the package version) and ``service.instance.id``
  (host and pid); the Kubernetes manifests add ``k8s.pod.name`` / ``k8s.namespace.name`` through
  ``OTEL_RESOURCE_ATTRIBUTES`` from the downward API.
"""

from __future__ import annotations

import logging
import os
import socket
from importlib import metadata
from typing import Literal

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, Sampler, TraceIdRatioBased

log = logging.getLogger(__name__)
_provider: TracerProvider | None = None

SamplerName = Literal[
    "always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off",
    "parentbased_traceidratio",
]
Protocol = Literal["grpc", "http/protobuf"]
SAMPLERS: tuple[str, ...] = SamplerName.__args__  # type: ignore[attr-defined]


def make_sampler(name: str | None, arg: float | None, legacy_ratio: float = 1.0) -> Sampler:
    """The sampler ``OTEL_TRACES_SAMPLER`` names (``arg``: its ratio, default 1.0), else the legacy ratio."""
    if name is None:
        return ParentBased(TraceIdRatioBased(legacy_ratio))
    ratio = 1.0 if arg is None else arg
    if name not in SAMPLERS:
        raise ValueError(f"OTEL_TRACES_SAMPLER={name!r}: expected one of {', '.join(SAMPLERS)}")
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"OTEL_TRACES_SAMPLER_ARG={ratio}: a ratio in [0, 1]")
    root: Sampler = {"always_on": ALWAYS_ON, "always_off": ALWAYS_OFF}.get(
        name.removeprefix("parentbased_"), TraceIdRatioBased(ratio)
    )
    return ParentBased(root) if name.startswith("parentbased_") else root


def exporter_protocol(endpoint: str, protocol: str | None) -> Protocol:
    if protocol is not None:
        if protocol not in ("grpc", "http/protobuf"):
            raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: expected grpc or http/protobuf")
        return "grpc" if protocol == "grpc" else "http/protobuf"
    return "http/protobuf" if ":4318" in endpoint or endpoint.rstrip("/").endswith("/v1/traces") else "grpc"


def grpc_insecure(endpoint: str, insecure: bool | None) -> bool:
    return (not endpoint.startswith("https://")) if insecure is None else insecure


def resource_attributes(service: str) -> dict[str, str]:
    try:
        version = metadata.version("borg-orchestrator")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return {"service.name": service, "service.version": version,
            "service.instance.id": f"{socket.gethostname()}-{os.getpid()}"}


def setup_tracing(service: str, endpoint: str | None, sample_ratio: float = 1.0, *, sampler: str | None = None,
                  sampler_arg: float | None = None, protocol: str | None = None,
                  insecure: bool | None = None) -> TracerProvider:
    """Install the global tracer provider once per process.

    Spans are exported in batches from a bounded queue: when Jaeger is slow or down
    the queue drops spans instead of slowing the caller.
    """
    global _provider
    if _provider is not None:
        return _provider
    provider = TracerProvider(
        resource=Resource.create(resource_attributes(service)),
        sampler=make_sampler(sampler, sampler_arg, sample_ratio),
    )
    if endpoint:
        kind = exporter_protocol(endpoint, protocol)
        if kind == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

            url = endpoint.rstrip("/")
            exporter: object = HttpExporter(
                endpoint=url if url.endswith("/v1/traces") else url + "/v1/traces", timeout=2
            )
        else:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

            exporter = GrpcExporter(endpoint=endpoint, insecure=grpc_insecure(endpoint, insecure), timeout=2)
        provider.add_span_processor(
            BatchSpanProcessor(
                exporter,  # type: ignore[arg-type]
                max_queue_size=8192,
                max_export_batch_size=512,
                schedule_delay_millis=500,
                export_timeout_millis=2000,
            )
        )
        log.info("tracing to %s over %s (sampler %s)", endpoint, kind, provider.sampler.get_description())
    trace.set_tracer_provider(provider)
    _provider = provider
    return provider


def shutdown_tracing() -> None:
    if _provider is not None:
        _provider.shutdown()
