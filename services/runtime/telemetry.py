"""OpenTelemetry set-up: OTLP export when an endpoint is configured, never blocking the pipeline."""

from __future__ import annotations

import logging

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

log = logging.getLogger(__name__)
_provider: TracerProvider | None = None


def setup_tracing(service: str, endpoint: str | None, sample_ratio: float = 1.0) -> TracerProvider:
    """Install the global tracer provider once per process.

    Spans are exported in batches from a bounded queue: when Jaeger is slow or down
    the queue drops spans instead of slowing the caller.
    """
    global _provider
    if _provider is not None:
        return _provider
    provider = TracerProvider(
        resource=Resource.create({"service.name": service}),
        sampler=ParentBased(TraceIdRatioBased(sample_ratio)),
    )
    if endpoint:
        if ":4318" in endpoint or endpoint.rstrip("/").endswith("/v1/traces"):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

            url = endpoint.rstrip("/")
            exporter: object = HttpExporter(
                endpoint=url if url.endswith("/v1/traces") else url + "/v1/traces", timeout=2
            )
        else:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

            exporter = GrpcExporter(endpoint=endpoint, insecure=True, timeout=2)
        provider.add_span_processor(
            BatchSpanProcessor(
                exporter,  # type: ignore[arg-type]
                max_queue_size=8192,
                max_export_batch_size=512,
                schedule_delay_millis=500,
                export_timeout_millis=2000,
            )
        )
        log.info("tracing to %s (sample ratio %.2f, parent-based)", endpoint, sample_ratio)
    trace.set_tracer_provider(provider)
    _provider = provider
    return provider


def shutdown_tracing() -> None:
    if _provider is not None:
        _provider.shutdown()
