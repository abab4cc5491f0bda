"""Trace context for stream processors: continue each input's trace on every output.

The batch loop does not extract W3C context from input headers or inject it into what it
produces (and OpenTelemetry's aiokafka instrumentation would start new root traces), so
processors call :func:`stage_span` with the input's headers: the span is a child of the
input's producer span, and the context it yields is passed to ``Sink.send`` so the output's
``traceparent`` names it. A fan-in (one output from several inputs) passes the other
inputs' contexts as ``links``.

This runs once per output message in every stage, so it is kept lean. In the common cases
(a sampled remote parent, or none: a new root; no links; plain attribute values; the SDK
set up as ``services.runtime.telemetry`` does it: a parent-based sampler over a ratio or
always-on root, batch or simple span processors, no attribute length limit, no SDK
self-metrics) the span is not built through ``Tracer.start_span``: its context is made as
the SDK makes it (same ids drawn in the same order, same flags and sampling decision) and,
when the ``with`` ends, the finished ``ReadableSpan`` is handed to the span processors as
``Span.end`` would. That skips the SDK's per-span sampler call, attribute cleaning, locks
and ``on_start`` hooks (about 19 → 8 µs per output). Every other case goes through the SDK.
Both give the same spans, ids, flags and header bytes (``tests/unit/test_trace_fastpath.py``).

The direct path reads private SDK fields (``Tracer._span_limits``, ``ParentBased._root``,
``SynchronousMultiSpanProcessor._span_processors``, ...), which an SDK upgrade may rename.
So on first use :func:`_check_direct_path` makes one span both ways on a private provider
and compares them; if a field is missing or the spans differ, it logs one warning and
every span goes through the public ``Tracer.start_span`` from then on (slower, never wrong).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SynchronousMultiSpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased
from opentelemetry.trace import (
    DEFAULT_TRACE_STATE,
    Link,
    NonRecordingSpan,
    ProxyTracer,
    SpanContext,
    SpanKind,
    TraceFlags,
    TraceState,
    set_span_in_context,
)
from opentelemetry.util.types import AttributeValue

from contracts import telemetry as names
from contracts.headers import extract_trace, remote_parent, span_context_in

try:  # a private module: if an SDK release moves it, only the direct path is lost
    from opentelemetry.sdk.trace._tracer_metrics import NoOpTracerMetrics

    _NOOP_METRICS: type | None = NoOpTracerMetrics
except ImportError:
    _NOOP_METRICS = None

log = logging.getLogger(__name__)

tracer: trace.Tracer = trace.get_tracer("borg.stream")

_CONSUMER = SpanKind.CONSUMER
_SYSTEM = names.MESSAGING_SYSTEM
_OPERATION = names.MESSAGING_OPERATION
_DESTINATION = names.MESSAGING_DESTINATION
_GROUP = names.MESSAGING_CONSUMER_GROUP

# Processors whose on_start and _on_ending do nothing: skipping those calls changes nothing.
_QUIET_START = (BatchSpanProcessor, SimpleSpanProcessor)
# Attribute values the SDK keeps as they are (no copy, no conversion) when no length limit is set.
_PLAIN_VALUES = (str, bool, int, float)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_SAMPLED_RANDOM = TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID)
_UNSAMPLED = TraceFlags(TraceFlags.DEFAULT)
_UNSAMPLED_RANDOM = TraceFlags(TraceFlags.DEFAULT | TraceFlags.RANDOM_TRACE_ID)
_TRACE_ID_LIMIT = TraceIdRatioBased.TRACE_ID_LIMIT
_TRACE_ID_MAX = 2**128 - 1
_SPAN_ID_MAX = 2**64 - 1


def link_to(headers: Sequence[tuple[str, bytes]] | None) -> Link | None:
    """A span link to the span that produced a message (None when it carried no context)."""
    ctx = trace.get_current_span(extract_trace(headers)).get_span_context()
    return Link(ctx) if ctx.is_valid else None


class _Direct:
    """What the direct path needs from one SDK tracer and its current span processors."""

    __slots__ = ("info", "max_attributes", "new_span_id", "new_trace_id", "processors", "random_ids", "resource",
                 "root_bound", "scope", "source", "tracer")

    def __init__(self, sdk: SdkTracer, source: tuple[Any, ...], root_bound: int | None) -> None:
        self.tracer = sdk
        self.source = source
        self.processors: tuple[Any, ...] = source
        self.root_bound = root_bound
        """A new root is sampled when ``trace_id & TRACE_ID_LIMIT < root_bound`` (None: the SDK decides)."""
        self.new_span_id = sdk.id_generator.generate_span_id
        self.new_trace_id = sdk.id_generator.generate_trace_id
        self.random_ids = sdk.id_generator.is_trace_id_random()
        self.resource = sdk.resource
        self.scope = sdk._instrumentation_scope
        self.info = sdk.instrumentation_info
        self.max_attributes: int = sdk._span_limits.max_span_attributes or 0


def _processors_of(sdk: SdkTracer) -> tuple[Any, ...] | None:
    multi = sdk.span_processor
    if type(multi) is not SynchronousMultiSpanProcessor:
        return None
    return multi._span_processors


def _direct_for(sdk_or_proxy: trace.Tracer, cached: _Direct | None) -> _Direct | None:
    """The direct path's view of ``sdk_or_proxy``, or None when only the SDK's own path is exact."""
    sdk: Any = sdk_or_proxy._tracer if isinstance(sdk_or_proxy, ProxyTracer) else sdk_or_proxy
    if type(sdk) is not SdkTracer:
        return None
    processors = _processors_of(sdk)
    if processors is None:
        return None
    if cached is not None and cached.tracer is sdk and cached.source is processors:
        return cached if sdk._is_enabled() else None
    sampler = sdk.sampler
    limits = sdk._span_limits
    if (not sdk._is_enabled() or type(sdk._tracer_metrics) is not _NOOP_METRICS
            or type(sampler) is not ParentBased or sampler._remote_parent_sampled is not ALWAYS_ON
            or limits.max_span_attribute_length is not None or not limits.max_span_attributes
            or any(type(p) not in _QUIET_START for p in processors)):
        return None
    root = sampler._root
    root_bound = (_TRACE_ID_LIMIT + 1 if root is ALWAYS_ON
                  else root.bound if type(root) is TraceIdRatioBased else None)
    return _Direct(sdk, processors, root_bound)


_direct: _Direct | None = None
_direct_ok: bool | None = None
"""Whether this SDK has the private fields the direct path reads (None: not checked yet)."""


class _Collect(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def _view(span: ReadableSpan) -> tuple[Any, ...]:
    """What must be equal between a direct and an SDK span (all but the span id and times)."""
    ctx, parent = span.context, span.parent
    return (span.name, span.kind, ctx.trace_id, ctx.is_remote, ctx.trace_flags, ctx.trace_state, ctx.is_valid,
            parent, dict(span.attributes or {}), tuple(span.links), tuple(span.events), span.status.status_code,
            span.resource, span.instrumentation_scope, span.end_time is not None)


def _direct_path_problem() -> str | None:
    """Why the direct path cannot be used with the installed SDK (None: it can)."""
    if _NOOP_METRICS is None:
        return "opentelemetry.sdk.trace._tracer_metrics.NoOpTracerMetrics is gone"
    if not hasattr(ProxyTracer, "_tracer"):  # on the class: the property's getter would make a global tracer
        return "ProxyTracer._tracer is gone"
    exporter = _Collect()
    provider = TracerProvider(sampler=ParentBased(ALWAYS_ON), resource=Resource.get_empty(), shutdown_on_exit=False,
                              span_limits=SpanLimits(max_span_attributes=128, max_span_attribute_length=None))
    try:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        sdk: Any = provider.get_tracer("borg.stream.check")
        if type(sdk) is not SdkTracer:
            return f"TracerProvider.get_tracer gives a {type(sdk).__name__}"
        _direct_for(sdk, None)  # reads every private field the per-span check reads
        ratio = TraceIdRatioBased(0.5)
        if type(ratio.bound) is not int or not hasattr(ParentBased(ratio), "_root"):
            return "TraceIdRatioBased.bound or ParentBased._root changed"
        processors = _processors_of(sdk)
        if type(processors) is not tuple:
            return "SynchronousMultiSpanProcessor._span_processors is not a tuple"
        direct = _Direct(sdk, processors, _TRACE_ID_LIMIT + 1)
        if type(direct.max_attributes) is not int:
            return "SpanLimits.max_span_attributes is not an int"
        parent = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, True, _SAMPLED,
                             TraceState([("borg", "check")]))
        attrs: dict[str, AttributeValue] = {_SYSTEM: "kafka", _OPERATION: "process", _DESTINATION: "t", _GROUP: "g"}
        child = _child_of(direct, parent)
        if child != SpanContext(parent.trace_id, child.span_id, False, _SAMPLED, parent.trace_state):
            return "SpanContext's layout changed"
        # a registered stage span name, though these spans stay on the private provider
        _DirectSpan(direct, names.SPAN_FEATURES_WINDOW, child, parent, attrs).finish()
        sdk.start_span(names.SPAN_FEATURES_WINDOW, context=set_span_in_context(NonRecordingSpan(parent)),
                       kind=_CONSUMER, attributes=attrs).end()
        if len(exporter.spans) != 2 or _view(exporter.spans[0]) != _view(exporter.spans[1]):
            return "a direct span differs from the SDK's"
    except Exception as exc:  # any missing field or changed signature: the SDK path is still right
        return f"{type(exc).__name__}: {exc}"
    finally:
        provider.shutdown()
    return None


def _check_direct_path() -> bool:
    """Check once whether the direct path may be used; warn once when it may not."""
    global _direct_ok
    problem = _direct_path_problem()
    if problem is not None:
        _disable_direct_path(problem)
    else:
        _direct_ok = True
    return _direct_ok is True


def _disable_direct_path(problem: str) -> None:
    global _direct, _direct_ok
    if _direct_ok is not False:
        log.warning("OpenTelemetry SDK internals changed (%s): stage spans go through Tracer.start_span "
                    "(slower, same spans)", problem)
    _direct, _direct_ok = None, False


def _direct_context(direct: _Direct, parent: SpanContext) -> tuple[SpanContext, bool] | None:
    """The new span's context as ``Tracer.start_span`` makes it, and whether it is sampled (None: ask the SDK).

    A sampled remote parent: its child, sampled (the parent-based sampler's ALWAYS_ON). No
    valid parent: a new root, sampled by the root sampler's ratio on the new trace id (the ids
    are drawn in the SDK's order: trace, then span). Anything else, e.g. a parent that was not
    sampled, a local parent: the SDK.
    """
    if parent.is_valid:
        if not (parent.is_remote and parent.trace_flags.sampled):
            return None
        return _child_of(direct, parent), True
    bound = direct.root_bound
    if bound is None:
        return None
    trace_id = direct.new_trace_id()
    sampled = (trace_id & _TRACE_ID_LIMIT) < bound
    flags = (_SAMPLED if sampled else _UNSAMPLED) if not direct.random_ids else \
        (_SAMPLED_RANDOM if sampled else _UNSAMPLED_RANDOM)
    return _local(trace_id, direct.new_span_id(), flags, DEFAULT_TRACE_STATE), sampled


def _child_of(direct: _Direct, parent: SpanContext) -> SpanContext:
    """The context of a sampled remote parent's child (the parent-based sampler's ALWAYS_ON)."""
    flags = _SAMPLED_RANDOM if parent.trace_flags.random_trace_id else _SAMPLED
    return _local(parent.trace_id, direct.new_span_id(), flags, parent.trace_state)


def _local(trace_id: int, span_id: int, flags: TraceFlags, state: TraceState) -> SpanContext:
    """``SpanContext(trace_id, span_id, False, flags, state)`` for a not-None ``state``, without
    the keyword and default handling (validity computed as it computes it)."""
    valid = 0 < trace_id <= _TRACE_ID_MAX and 0 < span_id <= _SPAN_ID_MAX
    return tuple.__new__(SpanContext, (trace_id, span_id, False, flags, state, valid))


class _DirectSpan:
    """A sampled span made as ``Tracer.start_span`` makes it, handed to the processors on exit."""

    __slots__ = ("_attributes", "_context", "_direct", "_name", "_parent", "_start")

    def __init__(self, direct: _Direct, name: str, context: SpanContext, parent: SpanContext | None,
                 attributes: dict[str, AttributeValue]) -> None:
        self._direct = direct
        self._name = name
        self._context = context
        self._parent = parent
        self._attributes = attributes
        self._start = time.time_ns()

    def finish(self) -> None:
        d = self._direct
        span = ReadableSpan(self._name, self._context, self._parent, d.resource, self._attributes, (), (), _CONSUMER,
                            d.info, start_time=self._start, end_time=time.time_ns(), instrumentation_scope=d.scope)
        for processor in d.processors:
            processor.on_end(span)


def _plain(attrs: dict[str, AttributeValue], caller: Mapping[str, AttributeValue] | None) -> bool:
    """Every attribute is one the SDK would keep as it is (the four messaging keys are ours)."""
    if type(attrs[_DESTINATION]) is not str or type(attrs[_GROUP]) is not str:
        return False
    return not caller or all(type(v) in _PLAIN_VALUES and type(k) is str and k for k, v in caller.items())


class _StageSpan:
    """The context manager :func:`stage_span` returns: starts the span on entry and ends it on
    exit, letting exceptions through (nothing is recorded on the span, as before)."""

    __slots__ = ("_attributes", "_direct_span", "_group", "_headers", "_links", "_name", "_span", "_topic")

    def __init__(self, name: str, headers: Sequence[tuple[str, bytes]] | None, topic: str, group: str,
                 attributes: Mapping[str, AttributeValue] | None, links: Sequence[Link]) -> None:
        self._name = name
        self._headers = headers
        self._topic = topic
        self._group = group
        self._attributes = attributes
        self._links = links
        self._span: trace.Span | None = None
        self._direct_span: _DirectSpan | None = None

    def __enter__(self) -> otel_context.Context:
        global _direct
        attrs: dict[str, AttributeValue] = {
            _SYSTEM: "kafka",
            _OPERATION: "process",
            _DESTINATION: self._topic,
            _GROUP: self._group,
        }
        if self._attributes:
            attrs.update(self._attributes)  # caller attributes win, as before
        links = self._links
        if not links and (_direct_ok or (_direct_ok is None and _check_direct_path())):
            try:
                direct = _direct = _direct_for(tracer, _direct)
            except (AttributeError, TypeError) as exc:  # a tracer the check did not see (another SDK build)
                _disable_direct_path(f"{type(exc).__name__}: {exc}")
                direct = None
            if direct is not None and len(attrs) <= direct.max_attributes and _plain(attrs, self._attributes):
                remote = remote_parent(self._headers)
                if remote is not None and remote.trace_flags.sampled:
                    # the usual input: a sampled parent read straight from the header (no
                    # parent Context built and read back); the same child as below
                    context = _child_of(direct, remote)
                    self._direct_span = _DirectSpan(direct, self._name, context, remote, attrs)
                    return span_context_in(context)
                parent = extract_trace(self._headers)
                parent_context = trace.get_current_span(parent).get_span_context()
                made = _direct_context(direct, parent_context)
                if made is not None:
                    context, sampled = made
                    if sampled:
                        self._direct_span = _DirectSpan(direct, self._name, context,
                                                        parent_context if parent_context.is_valid else None, attrs)
                    return set_span_in_context(NonRecordingSpan(context), parent)
        parent = extract_trace(self._headers)
        sdk_span = tracer.start_span(self._name, context=parent, kind=_CONSUMER, attributes=attrs,
                                     links=list(links) if links else ())  # the SDK turns [] into () anyway
        self._span = sdk_span
        try:
            return set_span_in_context(sdk_span, parent)
        except BaseException:
            sdk_span.end()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._direct_span is not None:
            self._direct_span.finish()
        elif self._span is not None:
            self._span.end()


def stage_span(
    span_name: str,
    headers: Sequence[tuple[str, bytes]] | None,
    *,
    topic: str,
    group: str,
    attributes: Mapping[str, AttributeValue] | None = None,
    links: Sequence[Link] = (),
) -> AbstractContextManager[otel_context.Context]:
    """A CONSUMER span continuing the trace in ``headers``; the ``with`` target is the context to
    produce under (``Sink.send(..., ctx)``), whose current span is this one."""
    return _StageSpan(span_name, headers, topic, group, attributes, links)
