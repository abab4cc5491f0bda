"""Every hand-written fast path is on with the pinned libraries and schemas, and falls back to the
library's own path, with the same results, when a release or a mirrored schema changes.

The mismatches are simulated: ``guard.installed`` answers another release, or the model's JSON
schema gains a field; the guard is then re-evaluated as an import would.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from opentelemetry import trace
from opentelemetry.propagate import get_global_textmap
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import contracts.fast.featurevector as fast_fv
import contracts.fast.nodestate as fast_ns
from contracts import FeatureVector, NodeState, decode
from contracts import headers as hdr
from contracts.fast import guard
from contracts.fast import traceparent as fast_tp
from services.runtime import trace_fastpath
from tests.unit.decoder_fuzz import SlowSpy

TP = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
NODESTATE = orjson.dumps({"node": "n1", "ts_ms": 1_764_000_000_000, "seq": 1, "interval_ms": 1000,
                          "source": "synthetic", "pmu": "recorded", "supported_events": [], "cpu_util": 0.25,
                          "mem_util": 0.5})
FEATURES = orjson.dumps({"node": "n1", "ts_ms": 1_764_000_000_000, "window_s": 10, "schema_hash": "abcdef012345",
                         "values": [0.5, 1.0, 2], "valid": [True, False, True], "samples": 10,
                         "input_ts_ms": 1_764_000_000_000})


def _other_release(monkeypatch: pytest.MonkeyPatch, distribution: str) -> None:
    real = guard.installed
    monkeypatch.setattr(guard, "installed", lambda d: "99.0.0" if d == distribution else real(d))


def _changed_schema(monkeypatch: pytest.MonkeyPatch, model: Any) -> None:
    real: Callable[..., dict[str, Any]] = model.model_json_schema

    def schema(*args: Any, **kwargs: Any) -> dict[str, Any]:
        out = dict(real(*args, **kwargs))
        out["properties"] = {**out["properties"], "added_later": {"type": "integer"}}
        return out

    monkeypatch.setattr(model, "model_json_schema", schema)


def test_every_fast_path_is_on_with_the_pinned_releases() -> None:
    for mirror in (fast_ns.MIRROR, fast_fv.MIRROR, fast_tp.MIRROR, trace_fastpath.MIRROR):
        assert mirror.problem() is None, (mirror.name, mirror.problem())
    assert fast_ns.ACTIVE and fast_fv.ACTIVE and fast_tp.ACTIVE


@pytest.mark.parametrize(("module", "model", "data"), [(fast_ns, NodeState, NODESTATE),
                                                       (fast_fv, FeatureVector, FEATURES)])
@pytest.mark.parametrize("change", ["pydantic-core", "pydantic", "orjson", "schema"])
def test_a_changed_library_or_schema_turns_the_decoder_off(
        module: Any, model: Any, data: bytes, change: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    decoder = fast_ns.decode_nodestate_dict if module is fast_ns else fast_fv.decode_feature_row
    spy = SlowSpy(monkeypatch, module)
    fast_answer = decoder(data)
    assert spy.calls == 0  # the fast path took it
    if change == "schema":
        _changed_schema(monkeypatch, model)
    else:
        _other_release(monkeypatch, change)
    with caplog.at_level(logging.WARNING, logger=guard.__name__):
        monkeypatch.setattr(module, "ACTIVE", guard.enabled(module.MIRROR))  # as a fresh import would
    assert module.ACTIVE is False
    (warning,) = [r.getMessage() for r in caplog.records if r.name == guard.__name__]
    assert ("schema changed" if change == "schema" else f"{change} 99.0.0") in warning
    assert decoder(data) == fast_answer and spy.calls == 1  # pydantic decided, the same answer
    if module is fast_ns:
        assert fast_answer == decode(NodeState, data).model_dump()


def test_the_assembler_validates_when_pydantic_is_not_the_pinned_one(monkeypatch: pytest.MonkeyPatch) -> None:
    fields = decode(FeatureVector, FEATURES).model_dump()
    built = fast_fv.assembler(FeatureVector)(dict(fields))
    _other_release(monkeypatch, "pydantic")
    monkeypatch.setattr(fast_fv, "ACTIVE", guard.enabled(fast_fv.MIRROR))
    build = fast_fv.assembler(FeatureVector)
    assert build == FeatureVector.model_validate
    assert build(dict(fields)) == built


def test_another_opentelemetry_api_leaves_traceparent_to_the_propagator(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real_extract = TraceContextTextMapPropagator.extract

    def counting(self: TraceContextTextMapPropagator, *args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        return real_extract(self, *args, **kwargs)

    monkeypatch.setattr(TraceContextTextMapPropagator, "extract", counting)
    fast_ctx = trace.get_current_span(hdr.extract_trace([("traceparent", TP)])).get_span_context()
    fast_out = hdr.build_headers("x.v1", hdr.extract_trace([("traceparent", TP)]))
    assert calls == [] and hdr.remote_parent([("traceparent", TP)]) == fast_ctx
    _other_release(monkeypatch, "opentelemetry-api")
    monkeypatch.setattr(fast_tp, "ACTIVE", guard.enabled(fast_tp.MIRROR))
    assert fast_tp.parse(TP) is None and fast_tp.value_of(fast_ctx) is None
    assert hdr.remote_parent([("traceparent", TP)]) is None  # only extract_trace may read it now
    slow_ctx = trace.get_current_span(hdr.extract_trace([("traceparent", TP)])).get_span_context()
    assert len(calls) == 1 and slow_ctx == fast_ctx
    assert hdr.build_headers("x.v1", hdr.extract_trace([("traceparent", TP)])) == fast_out
    assert type(get_global_textmap()).__name__  # the global propagator itself was not replaced


def test_another_sdk_release_turns_the_span_fast_path_off(monkeypatch: pytest.MonkeyPatch) -> None:
    _other_release(monkeypatch, "opentelemetry-sdk")
    problem = trace_fastpath.MIRROR.problem()
    assert problem is not None and "opentelemetry-sdk 99.0.0" in problem
