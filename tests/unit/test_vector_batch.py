"""The shared FeatureVector batch path of regime and anomaly: decode, check, one model call, dead letters."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import orjson
import pytest

from contracts import FeatureVector
from contracts.fast.featurevector import decode_feature_row
from featurelib.node.schema import N_FEATURES, as_model_input, node_feature_schema_hash, vector_problem
from services.runtime.model_watch import infer_rows
from services.runtime.vector_batch import infer_batch, model_input, score_vectors
from tests.unit.standins import Ev, Msg

T0 = 1_700_000_000_000


@dataclass
class LetterSink:
    letters: list[tuple[int, str, str]] = field(default_factory=list)

    async def dead_letter(self, event: Ev, error: str, kind: str) -> None:
        self.letters.append((event.message.offset, error, kind))


@dataclass
class Watcher:
    current: Any


def vector_bytes(rng: np.random.Generator, *, n: int = N_FEATURES, schema: str | None = None, ints: bool = False,
                 node: str = "n1") -> bytes:
    values = [float(v) for v in rng.normal(0, 1e3, n)]
    values[:3] = [0.0, -0.0, 1e-310]  # zeros of both signs, a subnormal
    valid = [bool(b) for b in rng.random(n) < 0.7]
    fv = FeatureVector(node=node, ts_ms=T0, window_s=10, schema_hash=schema or node_feature_schema_hash(),
                       values=values, valid=valid, samples=10, input_ts_ms=T0 - 5)
    data = orjson.dumps(fv.model_dump(mode="json"))
    return data.replace(b"0.0,", b"0,") if ints else data


def event(offset: int, value: bytes | None) -> Ev:
    return Ev(Msg("p-features.v1", 0, offset, b"k", value, [], T0 / 1000))


def test_model_input_is_as_model_input_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    blobs = [vector_bytes(rng, ints=i % 3 == 0) for i in range(40)]
    models = [FeatureVector.model_validate_json(b) for b in blobs]
    got = model_input([decode_feature_row(b) for b in blobs])
    want = np.stack([as_model_input(m.values, m.valid) for m in models])
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape == (40, N_FEATURES)
    assert got.flags.c_contiguous
    assert got.view(np.uint32).tobytes() == want.view(np.uint32).tobytes()  # NaN patterns and -0.0 included


class Model:
    """Two outputs; raises for rows whose first feature is huge, NaN for negative ones."""

    def __init__(self) -> None:
        self.calls: list[int] = []  # rows per call

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, ...]:
        self.calls.append(len(x))
        if np.any(x[:, 0] > 1e6):
            raise RuntimeError("boom")
        out = x[:, 0].astype(np.float64)
        out[x[:, 0] < 0] = np.nan
        return out, np.stack([out, out * 2], axis=1)


def test_infer_batch_whole_arrays_when_all_rows_pass() -> None:
    model = Model()
    x = np.array([[1.0], [2.0], [3.0]], dtype=np.float32)
    outputs, errors = infer_batch(model, x)
    assert errors == {} and model.calls == [3]
    assert outputs[0].tolist() == [1.0, 2.0, 3.0] and outputs[1].tolist() == [[1, 2], [2, 4], [3, 6]]


@pytest.mark.parametrize("column", [[1.0, 2e6, -1.0, 3.0], [1.0, -1.0, 3.0], [2e6], [-1.0, -2.0]])
def test_infer_batch_isolates_rows_like_infer_rows(column: list[float]) -> None:
    x = np.array([[v] for v in column], dtype=np.float32)
    model, reference = Model(), Model()
    outputs, errors = infer_batch(model, x)
    results, want_errors = infer_rows(reference, x)
    assert errors == want_errors
    assert model.calls == reference.calls == [len(x)] + [1] * len(x)  # the failed batch is not run twice
    ok = [r for r in results if r is not None]
    if not ok:
        assert outputs == ()
        return
    for k, part in enumerate(outputs):
        assert part.tolist() == np.stack([r[k] for r in ok]).tolist()


def test_score_vectors_dead_letters_in_order_and_keeps_the_rest() -> None:
    rng = np.random.default_rng(5)
    good = [vector_bytes(rng, node=f"n{i}") for i in range(4)]
    bad_row = orjson.loads(good[2])
    bad_row["values"][0] = 5e6  # the model raises on this row
    events = [
        event(0, good[0]),
        event(1, b"{broken"),
        event(2, orjson.dumps(bad_row)),
        event(3, vector_bytes(rng, schema="a" * 64)),
        event(4, good[1]),
        event(5, vector_bytes(rng, n=N_FEATURES - 3)),
        event(6, None),
        event(7, good[3]),
    ]
    sink = LetterSink()
    model = Model()
    scored = asyncio.run(score_vectors(events, sink=cast(Any, sink), models=cast(Any, Watcher(model)),
                                       schema_hash=node_feature_schema_hash(), consumer="regime"))
    assert [(offset, kind) for offset, _, kind in sink.letters] == [
        (1, "malformed"), (3, "schema"), (5, "schema"), (6, "malformed"), (2, "processing")]
    messages = {offset: error for offset, error, _ in sink.letters}
    vector = FeatureVector.model_validate_json(events[3].message.value or b"")
    assert messages[3] == vector_problem(vector, node_feature_schema_hash(), "regime")
    assert messages[2].startswith("model failed: RuntimeError: boom")
    assert scored.model is model and scored.failed == 1
    assert [e.message.offset for e in scored.events] == [0, 4, 7]
    assert [r.node for r in scored.rows] == ["n0", "n1", "n3"]
    assert len(scored.outputs[0]) == len(scored.outputs[1]) == 3


def test_score_vectors_with_nothing_to_score() -> None:
    sink = LetterSink()
    scored = asyncio.run(score_vectors([event(0, b"[]")], sink=cast(Any, sink), models=cast(Any, Watcher(Model())),
                                       schema_hash=node_feature_schema_hash(), consumer="anomaly"))
    assert scored.rows == [] and scored.events == [] and scored.outputs == () and scored.failed == 0
    assert [kind for _, _, kind in sink.letters] == ["schema"]
