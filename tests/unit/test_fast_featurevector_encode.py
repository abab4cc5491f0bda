"""``encode_feature_vector`` writes exactly ``encode(FeatureVector(...))``, or leaves the decision to pydantic.

The features stage publishes what it returns without building the model, so a non-None answer must be the
validated model's bytes, and every field set pydantic refuses must get None (the stage then builds the model,
which raises, and dead-letters the window as before).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import contracts.fast.featurevector as fast
from contracts import FeatureVector, encode
from contracts.base import MAX_TS_MS, MIN_TS_MS
from contracts.fast.featurevector import encode_feature_vector
from featurelib.node.samples import sample_from_dict
from featurelib.node.schema import node_feature_schema_hash
from featurelib.node.windows import features_for_stream
from tests.unit.test_fast_featurevector import small_vector


def _fields(**overrides: Any) -> dict[str, Any]:
    doc = small_vector()
    doc.update(overrides)
    return doc


def _check(fields: dict[str, Any]) -> bytes | None:
    """The fast answer, asserted against pydantic's."""
    got = encode_feature_vector(**fields)
    try:
        want: bytes | None = encode(FeatureVector(**fields))
    except ValueError:
        want = None
    if want is None:
        assert got is None, fields
    elif got is not None:  # None is always allowed: pydantic then decides
        assert got == want, fields
    return got


def test_service_windows_encode_as_the_model_without_pydantic() -> None:
    from simulator import SyntheticCluster

    sim = SyntheticCluster(nodes=5, seed=7, missing_event_prob=0.3, multiplex_prob=0.3)
    samples = [sample_from_dict(d) for batch in sim.run(130) for d in batch.nodestate_dicts()]
    schema = node_feature_schema_hash()
    windows = features_for_stream(samples)
    assert len(windows) > 40
    for w in windows:
        got = _check({"node": w.node, "ts_ms": w.ts_ms, "window_s": 10, "schema_hash": schema, "values": w.values,
                      "valid": w.valid, "samples": w.samples, "input_ts_ms": w.input_ts_ms})
        assert got is not None  # the stage's own windows never need pydantic


def test_edge_values_encode_as_the_model() -> None:
    for fields in (_fields(), _fields(node="é" * 253, schema_hash="x" * 8, ts_ms=MIN_TS_MS, input_ts_ms=MAX_TS_MS),
                   _fields(values=[], valid=[]), _fields(values=[-0.0, 5e-324, 1.7976931348623157e308],
                                                         valid=[True, False, True])):
        assert _check(fields) is not None


@pytest.mark.parametrize("overrides", [
    {"values": [math.nan, 1.0], "valid": [True, True]},
    {"values": [math.inf, 1.0], "valid": [True, True]},
    {"values": [-math.inf, math.inf], "valid": [True, True]},
    {"values": [1.7976931348623157e308, 1.7976931348623157e308], "valid": [True, True]},  # finite, sum overflows
    {"values": [1, 2.0], "valid": [True, True]},  # an int: pydantic decides (and stores a float)
    {"values": [True, 2.0], "valid": [True, True]},
    {"values": [np.float64(1.0), 2.0], "valid": [True, True]},  # a float subclass
    {"values": [1.0, 2.0], "valid": [1, True]},
    {"values": [1.0, 2.0], "valid": [True]},
    {"values": (1.0,), "valid": [True]},
    {"node": ""},
    {"node": "n" * 254},
    {"node": 5},
    {"schema_hash": "short"},
    {"schema_hash": "x" * 65},
    {"ts_ms": MIN_TS_MS - 1},
    {"input_ts_ms": MAX_TS_MS + 1},
    {"ts_ms": True},
    {"ts_ms": float(MIN_TS_MS)},
    {"window_s": 0},
    {"samples": 0},
    {"samples": np.int64(3)},
])
def test_anything_unusual_is_left_to_pydantic(overrides: dict[str, Any]) -> None:
    assert _check(_fields(**overrides)) is None


def test_off_when_the_guard_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast, "ACTIVE", False)
    assert encode_feature_vector(**_fields()) is None


class _Sink:
    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.letters: list[tuple[str, str]] = []

    async def send_encoded(self, base_topic: str, key: str, value: bytes, ctx: Any) -> None:
        self.sent.append(value)

    async def dead_letter_record(self, record: Any, error: str, kind: str) -> None:
        self.letters.append((error, kind))


def test_features_stage_publishes_the_model_bytes_and_dead_letters_what_pydantic_refuses() -> None:
    import asyncio
    from types import SimpleNamespace

    from featurelib.node.windows import Window
    from services.features.processor import FeaturesProcessor
    from services.features.settings import FeaturesSettings

    sink = _Sink()
    proc = FeaturesProcessor(FeaturesSettings(), sink)  # type: ignore[arg-type]
    record = SimpleNamespace(headers=[], topic="nodestate.v1")
    good = Window("n1", MIN_TS_MS + 10_000, 1, [0.5, -0.0, 3.0], [True, False, True], 10, MIN_TS_MS + 9_000)
    bad = Window("n1", MIN_TS_MS + 20_000, 2, [0.5, math.nan, 3.0], [True, True, True], 10, MIN_TS_MS + 19_000)
    asyncio.run(proc._emit(record, good))  # type: ignore[arg-type]
    asyncio.run(proc._emit(record, bad))  # type: ignore[arg-type]
    assert sink.sent == [encode(FeatureVector(node="n1", ts_ms=good.ts_ms, window_s=10, schema_hash=proc.schema_hash,
                                              values=good.values, valid=good.valid, samples=10,
                                              input_ts_ms=good.input_ts_ms))]
    ((error, kind),) = sink.letters
    assert kind == "processing" and error.startswith(f"window {bad.ts_ms} not published: ") and "finite" in error
