"""stage_span survives an SDK whose private fields moved: one warning, then the public path.

The direct path (``services.runtime.stream_trace``) reads private OpenTelemetry SDK fields.
Each test here takes one of them away, as an SDK upgrade might, and checks that spans are
still made, with the input's trace id and parent, through ``Tracer.start_span``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
from opentelemetry.trace import ProxyTracer, Span

from contracts import headers as hdr
from contracts.fast import guard
from services.runtime import stream_trace, trace_fastpath

TP = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
PARENT_ID = 0xB7AD6B7169203331


class _Setup:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, sampler: Any) -> None:
        self.provider = TracerProvider(sampler=sampler, shutdown_on_exit=False)
        self.exporter = InMemorySpanExporter()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("borg.stream")
        monkeypatch.setattr(stream_trace, "tracer", self.tracer)
        self.sdk_spans = 0
        real = self.tracer.start_span

        def counted(*args: Any, **kwargs: Any) -> Span:
            self.sdk_spans += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(self.tracer, "start_span", counted)


@pytest.fixture
def unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The module as just imported: the SDK not checked yet, no cached direct view."""
    monkeypatch.setattr(trace_fastpath, "_direct_ok", None)
    monkeypatch.setattr(trace_fastpath, "_direct", None)
    monkeypatch.setattr(trace_fastpath, "_direct_producer", None)


@pytest.fixture
def setup(monkeypatch: pytest.MonkeyPatch, unchecked: None) -> Iterator[_Setup]:
    s = _Setup(monkeypatch, ParentBased(ALWAYS_ON))
    yield s
    s.provider.shutdown()


def _two_stages_are_traced(s: _Setup) -> None:
    """Two outputs, each a span continuing the input's trace, named by the output's traceparent."""
    for _ in range(2):
        with stream_trace.stage_span("stage", [("traceparent", TP)], topic="t", group="g") as ctx:
            out = hdr.build_headers("y.v1", ctx)
        finished = s.exporter.get_finished_spans()[-1]
        assert finished.context.trace_id == TRACE_ID
        assert finished.parent is not None and finished.parent.span_id == PARENT_ID and finished.parent.is_remote
        assert hdr.header(out, "traceparent") == f"00-{TRACE_ID:032x}-{finished.context.span_id:016x}-01"
    assert len(s.exporter.get_finished_spans()) == 2


def _one_warning(caplog: pytest.LogCaptureFixture, words: str) -> None:
    warnings = [r for r in caplog.records if r.name == trace_fastpath.__name__ and r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert words in warnings[0].getMessage()


def test_the_installed_sdk_passes_the_check(setup: _Setup, caplog: pytest.LogCaptureFixture) -> None:
    assert trace_fastpath._direct_path_problem() is None
    _two_stages_are_traced(setup)
    assert setup.sdk_spans == 0  # both went the direct way
    assert trace_fastpath._direct_ok is True
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_missing_private_module(setup: _Setup, monkeypatch: pytest.MonkeyPatch,
                                caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(trace_fastpath, "_NOOP_METRICS", None)
    _two_stages_are_traced(setup)
    assert setup.sdk_spans == 2
    assert trace_fastpath._direct_ok is False
    _one_warning(caplog, "NoOpTracerMetrics")


def test_renamed_private_tracer_field(setup: _Setup, monkeypatch: pytest.MonkeyPatch,
                                      caplog: pytest.LogCaptureFixture) -> None:
    """Tracers made from now on keep their limits under another name (the check makes one)."""
    real_init = SdkTracer.__init__

    def renaming_init(self: Any, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        self._limits_renamed = self.__dict__.pop("_span_limits")

    monkeypatch.setattr(SdkTracer, "__init__", renaming_init)
    _two_stages_are_traced(setup)
    assert setup.sdk_spans == 2
    _one_warning(caplog, "_span_limits")


def test_direct_span_that_differs_from_the_sdk_is_refused(setup: _Setup, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """E.g. a ReadableSpan whose constructor's positional order changed: same fields, wrong places."""
    real = ReadableSpan

    def shuffled(name: str, context: Any, parent: Any, resource: Any, attributes: Any, *rest: Any,
                 **kwargs: Any) -> Any:
        return real(name, context, None, resource, attributes, *rest, **kwargs)  # parent lost

    monkeypatch.setattr(trace_fastpath, "ReadableSpan", shuffled)
    _two_stages_are_traced(setup)
    assert setup.sdk_spans == 2
    _one_warning(caplog, "differs")


class _RenamedProxy(ProxyTracer):
    """A ProxyTracer from an SDK release that keeps its delegate under another name."""

    def __init__(self, delegate: trace.Tracer) -> None:
        super().__init__("borg.stream")
        self._delegate = delegate

    @property
    def _tracer(self) -> trace.Tracer:
        raise AttributeError("'ProxyTracer' object has no attribute '_tracer'")

    def start_span(self, *args: Any, **kwargs: Any) -> Span:
        return self._delegate.start_span(*args, **kwargs)


def test_field_missing_on_a_tracer_after_the_check(setup: _Setup, monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """The check passed, then stage_span meets a tracer lacking a private field it reads."""
    assert trace_fastpath._check_direct_path()
    monkeypatch.setattr(stream_trace, "tracer", _RenamedProxy(setup.tracer))
    _two_stages_are_traced(setup)
    assert setup.sdk_spans == 2
    assert trace_fastpath._direct_ok is False
    _one_warning(caplog, "_tracer")


def test_no_sdk_at_all_still_passes_the_parent_on(unchecked: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream_trace, "tracer", trace.NoOpTracer())
    monkeypatch.setattr(trace_fastpath, "_NOOP_METRICS", None)
    with stream_trace.stage_span("x", [("traceparent", TP)], topic="t", group="g") as ctx:
        out = hdr.build_headers("y", ctx)
    assert hdr.header(out, "traceparent") == TP.decode()


def test_another_sdk_release_takes_the_sdk_path(setup: _Setup, monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """An SDK upgrade the direct path was not checked against: the public path, whatever the self-check says."""
    real = guard.installed
    monkeypatch.setattr(guard, "installed", lambda d: "1.99.0" if d == "opentelemetry-sdk" else real(d))
    _two_stages_are_traced(setup)
    assert setup.sdk_spans == 2
    assert trace_fastpath._direct_ok is False
    _one_warning(caplog, "opentelemetry-sdk 1.99.0")
