"""Stage and producer spans made without ``Tracer.start_span``: the direct path of ``stream_trace``.

``services.runtime.stream_trace`` makes a span per output message in every stage (the stage's
CONSUMER span and the output's PRODUCER span). In the common cases (a valid parent: the input's
``traceparent`` or the stage span; or none, a new root; no links; plain attribute values; the SDK
set up as ``services.runtime.telemetry`` does it: a parent-based sampler with the default
delegates over a ratio or always-on root, batch or simple span processors, no attribute length
limit, no SDK self-metrics) the span is made here instead: its context as the SDK makes it (the
same ids drawn in the same order, the same flags and sampling decision) and, when the ``with``
ends, the finished ``ReadableSpan`` handed to the span processors as ``Span.end`` would. That
skips the SDK's per-span sampler call, attribute cleaning, locks and ``on_start`` hooks (what it
saves: ``docs/performance.md``); an unsampled parent's child costs one span id. Both give the
same spans, ids, flags and header bytes (``tests/unit/test_trace_fastpath.py``,
``tests/unit/test_publish_span.py``).

The direct path reads private SDK fields (``Tracer._span_limits``, ``ParentBased._root``,
``SynchronousMultiSpanProcessor._span_processors``, ...). So it runs only while ``MIRROR`` holds
(``contracts.fast.guard``): the installed opentelemetry-sdk is the release it was checked against
and, on first use, one span made both ways on a private provider is the same
(:func:`_direct_path_problem`). Otherwise, or when a tracer met later lacks a field, one warning is
logged and every span goes through the public ``Tracer.start_span`` from then on (slower, never
wrong).
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, SynchronousMultiSpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, TraceIdRatioBased
from opentelemetry.trace import (
    DEFAULT_TRACE_STATE,
    NonRecordingSpan,
    ProxyTracer,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)
from opentelemetry.util.types import AttributeValue

from contracts import telemetry as names
from contracts.fast import guard

try:  # a private module: if an SDK release moves it, only the direct path is lost
    from opentelemetry.sdk.trace._tracer_metrics import NoOpTracerMetrics

    _NOOP_METRICS: type | None = NoOpTracerMetrics
except ImportError:
    _NOOP_METRICS = None

log = logging.getLogger(__name__)

CONSUMER: Final = SpanKind.CONSUMER
PRODUCER: Final = SpanKind.PRODUCER
_OPERATION_NAME = names.MESSAGING_OPERATION_NAME
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


class Direct:
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


def _direct_for(sdk_or_proxy: trace.Tracer, cached: Direct | None) -> Direct | None:
    """The direct path's view of ``sdk_or_proxy``, or None when only the SDK's own path is exact."""
    kind = type(sdk_or_proxy)
    # exact types first: isinstance against the ABC costs more than the rest of this check (per span)
    proxy = kind is ProxyTracer or (kind is not SdkTracer and isinstance(sdk_or_proxy, ProxyTracer))
    sdk: Any = sdk_or_proxy
    if proxy:
        sdk = sdk._tracer
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
            or sampler._local_parent_sampled is not ALWAYS_ON or sampler._remote_parent_not_sampled is not ALWAYS_OFF
            or sampler._local_parent_not_sampled is not ALWAYS_OFF
            or limits.max_span_attribute_length is not None or not limits.max_span_attributes
            or any(type(p) not in _QUIET_START for p in processors)):
        return None
    root = sampler._root
    root_bound = (_TRACE_ID_LIMIT + 1 if root is ALWAYS_ON
                  else root.bound if type(root) is TraceIdRatioBased else None)
    return Direct(sdk, processors, root_bound)


_direct: Direct | None = None
_direct_producer: Direct | None = None
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
        direct = Direct(sdk, processors, _TRACE_ID_LIMIT + 1)
        if type(direct.max_attributes) is not int:
            return "SpanLimits.max_span_attributes is not an int"
        parent = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, True, _SAMPLED,
                             TraceState([("borg", "check")]))
        attrs: dict[str, AttributeValue] = {_SYSTEM: "kafka", _OPERATION: "process", _DESTINATION: "t", _GROUP: "g"}
        child = child_of(direct, parent)
        if child != SpanContext(parent.trace_id, child.span_id, False, _SAMPLED, parent.trace_state):
            return "SpanContext's layout changed"
        # a registered stage span name, though these spans stay on the private provider
        DirectSpan(direct, names.SPAN_FEATURES_WINDOW, child, parent, attrs).finish()
        sdk.start_span(names.SPAN_FEATURES_WINDOW, context=set_span_in_context(NonRecordingSpan(parent)),
                       kind=CONSUMER, attributes=attrs).end()
        if len(exporter.spans) != 2 or _view(exporter.spans[0]) != _view(exporter.spans[1]):
            return "a direct span differs from the SDK's"
        # an output's producer span: a local parent (the stage span), kind PRODUCER
        publish: dict[str, AttributeValue] = {_SYSTEM: "kafka", _OPERATION: "send", _OPERATION_NAME: "send",
                                              _DESTINATION: "p-t"}
        name = names.SPAN_PUBLISH.format(topic="t")
        DirectSpan(direct, name, child_of(direct, child), child, publish, PRODUCER).finish()
        sdk.start_span(name, context=set_span_in_context(NonRecordingSpan(child)), kind=PRODUCER,
                       attributes=publish).end()
        if len(exporter.spans) != 4 or _view(exporter.spans[2]) != _view(exporter.spans[3]):
            return "a direct producer span differs from the SDK's"
        unsampled = SpanContext(parent.trace_id, parent.span_id, True, _UNSAMPLED, parent.trace_state)
        sdk_context = sdk.start_span(name, context=set_span_in_context(NonRecordingSpan(unsampled))).get_span_context()
        mine = unsampled_child(direct, unsampled)
        if len(exporter.spans) != 4 or sdk_context != _local(mine.trace_id, sdk_context.span_id, mine.trace_flags,
                                                             mine.trace_state):
            return "an unsampled child's context differs from the SDK's"
    except Exception as exc:  # any missing field or changed signature: the SDK path is still right
        return f"{type(exc).__name__}: {exc}"
    finally:
        provider.shutdown()
    return None


MIRROR: Final = guard.Mirror("stream spans", {"opentelemetry-sdk": "1.45.2", "opentelemetry-api": "1.45.2"},
                             extra=lambda: _direct_path_problem())
"""What the direct path copies: the SDK release it was written against, and a span made both ways."""


def _check_direct_path() -> bool:
    """Check once whether the direct path may be used; warn once when it may not."""
    global _direct_ok
    problem = MIRROR.problem()
    if problem is not None:
        _disable_direct_path(problem)
    else:
        _direct_ok = True
    return _direct_ok is True


def _disable_direct_path(problem: str) -> None:
    global _direct, _direct_ok, _direct_producer
    if _direct_ok is not False:
        log.warning("OpenTelemetry SDK internals changed (%s): stage and producer spans go through "
                    "Tracer.start_span (slower, same spans)", problem)
    _direct, _direct_producer, _direct_ok = None, None, False


def view(sdk_or_proxy: trace.Tracer, *, producer: bool) -> Direct | None:
    """The direct path's view of a stage's (or, ``producer``, the outputs') tracer; None: use the SDK."""
    global _direct, _direct_producer
    if not (_direct_ok or (_direct_ok is None and _check_direct_path())):
        return None
    try:
        if producer:
            direct = _direct_producer = _direct_for(sdk_or_proxy, _direct_producer)
        else:
            direct = _direct = _direct_for(sdk_or_proxy, _direct)
    except (AttributeError, TypeError) as exc:  # a tracer the check did not see (another SDK build)
        _disable_direct_path(f"{type(exc).__name__}: {exc}")
        return None
    return direct


def direct_context(direct: Direct, parent: SpanContext) -> tuple[SpanContext, bool] | None:
    """The new span's context as ``Tracer.start_span`` makes it, and whether it is sampled (None: ask the SDK).

    A valid parent (remote: the input's producer; local: the stage span an output's producer
    span continues): its child, sampled when the parent was (the parent-based sampler's
    ALWAYS_ON / ALWAYS_OFF delegates, which ``_direct_for`` checked). No valid parent: a new
    root, sampled by the root sampler's ratio on the new trace id (the ids are drawn in the
    SDK's order: trace, then span). Another root sampler: the SDK.
    """
    if parent.is_valid:
        if parent.trace_flags.sampled:
            return child_of(direct, parent), True
        return unsampled_child(direct, parent), False
    bound = direct.root_bound
    if bound is None:
        return None
    trace_id = direct.new_trace_id()
    sampled = (trace_id & _TRACE_ID_LIMIT) < bound
    flags = (_SAMPLED if sampled else _UNSAMPLED) if not direct.random_ids else \
        (_SAMPLED_RANDOM if sampled else _UNSAMPLED_RANDOM)
    return _local(trace_id, direct.new_span_id(), flags, DEFAULT_TRACE_STATE), sampled


def child_of(direct: Direct, parent: SpanContext) -> SpanContext:
    """The context of a sampled remote parent's child (the parent-based sampler's ALWAYS_ON)."""
    flags = _SAMPLED_RANDOM if parent.trace_flags.random_trace_id else _SAMPLED
    return _local(parent.trace_id, direct.new_span_id(), flags, parent.trace_state)


def unsampled_child(direct: Direct, parent: SpanContext) -> SpanContext:
    """The context of an unsampled parent's child: not recorded, but a span id of its own, as the SDK gives it."""
    flags = _UNSAMPLED_RANDOM if parent.trace_flags.random_trace_id else _UNSAMPLED
    return _local(parent.trace_id, direct.new_span_id(), flags, parent.trace_state)


def _local(trace_id: int, span_id: int, flags: TraceFlags, state: TraceState) -> SpanContext:
    """``SpanContext(trace_id, span_id, False, flags, state)`` for a not-None ``state``, without
    the keyword and default handling (validity computed as it computes it)."""
    valid = 0 < trace_id <= _TRACE_ID_MAX and 0 < span_id <= _SPAN_ID_MAX
    return tuple.__new__(SpanContext, (trace_id, span_id, False, flags, state, valid))


class DirectSpan:
    """A sampled span made as ``Tracer.start_span`` makes it, handed to the processors on exit."""

    __slots__ = ("_attributes", "_context", "_direct", "_kind", "_name", "_parent", "_start")

    def __init__(self, direct: Direct, name: str, context: SpanContext, parent: SpanContext | None,
                 attributes: Mapping[str, AttributeValue], kind: SpanKind = CONSUMER) -> None:
        self._direct = direct
        self._name = name
        self._context = context
        self._parent = parent
        self._attributes = attributes
        self._kind = kind
        self._start = time.time_ns()

    def finish(self) -> None:
        d = self._direct
        span = ReadableSpan(self._name, self._context, self._parent, d.resource, self._attributes, (), (), self._kind,
                            d.info, start_time=self._start, end_time=time.time_ns(), instrumentation_scope=d.scope)
        for processor in d.processors:
            processor.on_end(span)

    def fail(self, exc: Exception) -> None:
        """End it as ``use_span`` ends a span an exception escaped: an ``exception`` event and an ERROR status."""
        d = self._direct
        end = time.time_ns()
        span = ReadableSpan(self._name, self._context, self._parent, d.resource, self._attributes,
                            (Event("exception", _exception_attributes(exc), end),), (), self._kind, d.info,
                            Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"), start_time=self._start,
                            end_time=end, instrumentation_scope=d.scope)
        for processor in d.processors:
            processor.on_end(span)


def _exception_attributes(exc: BaseException) -> dict[str, AttributeValue]:
    """The attributes ``Span.record_exception`` gives its event (``escaped`` False, as ``use_span`` records it)."""
    module = type(exc).__module__
    qualname = type(exc).__qualname__
    return {"exception.type": f"{module}.{qualname}" if module and module != "builtins" else qualname,
            "exception.message": str(exc),
            "exception.stacktrace": "".join(traceback.format_exception(exc)),
            "exception.escaped": "False"}


def plain(attrs: dict[str, AttributeValue], caller: Mapping[str, AttributeValue] | None) -> bool:
    """Every attribute is one the SDK would keep as it is (the four messaging keys are ours)."""
    if type(attrs[_DESTINATION]) is not str or type(attrs[_GROUP]) is not str:
        return False
    if caller:
        # a loop, not all() over a generator: this runs for every stage span
        for k, v in caller.items():
            if type(v) not in _PLAIN_VALUES or type(k) is not str or not k:
                return False
    return True

