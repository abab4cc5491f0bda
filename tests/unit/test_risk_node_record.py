"""risk's node_features records: binary, a quarter of the JSON size, and the JSON ones still read."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest

from featurelib.node.schema import N_FEATURES, as_model_input
from services.risk import node_record

# 3.4e39 among the values is inf in float32, as it always was in the model input
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast")
TP = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"


def _vector(seed: int) -> tuple[list[float], list[bool]]:
    rng = np.random.default_rng(seed)
    values = [float(v) for v in rng.normal(0, 1e3, N_FEATURES)]
    values[3] = 1e-300  # float64 values that float32 cannot hold round as the model input does
    values[4] = 3.4e39
    valid = [bool(b) for b in rng.random(N_FEATURES) > 0.2]
    return values, valid


def test_round_trip_is_the_model_input() -> None:
    values, valid = _vector(1)
    raw = node_record.encode(1_700_000_010_000, 1_700_000_009_950, values, valid, TP)
    record = node_record.decode(raw)
    assert (record.ts_ms, record.input_ts_ms, record.traceparent) == (1_700_000_010_000, 1_700_000_009_950, TP)
    assert record.row.dtype == np.float32 and record.row.shape == (N_FEATURES,)
    np.testing.assert_array_equal(record.row, as_model_input(values, valid))  # NaN where not valid, same bits
    assert node_record.ts_of(raw) == 1_700_000_010_000
    legacy = orjson.dumps({"ts": 1, "in": 0, "v": values, "m": valid, "tp": TP})
    assert len(raw) < 800 < len(legacy) / 4  # the point: the changelog's write rate


def test_legacy_json_records_still_read() -> None:
    values, valid = _vector(2)
    legacy = orjson.dumps({"ts": 20_000, "in": 19_990, "v": values, "m": valid, "tp": TP})
    record = node_record.decode(legacy)
    assert (record.ts_ms, record.input_ts_ms, record.traceparent) == (20_000, 19_990, TP)
    np.testing.assert_array_equal(record.row, as_model_input(values, valid))
    assert node_record.ts_of(legacy) == 20_000
    assert node_record.decode(orjson.dumps({"ts": 5, "v": values, "m": valid, "tp": ""})).traceparent == ""


def test_empty_traceparent_and_all_invalid() -> None:
    values, _ = _vector(3)
    record = node_record.decode(node_record.encode(7, 6, values, [False] * N_FEATURES, ""))
    assert record.traceparent == "" and all(math.isnan(v) for v in record.row)


@pytest.mark.parametrize("raw", [b"", b"\x02" + bytes(40), b"\x01" + bytes(5),
                                 node_record.encode(1, 1, [1.0, 2.0], [True, True], TP)[:-1]])
def test_a_broken_record_is_an_error(raw: bytes) -> None:
    with pytest.raises(ValueError, match="node_features record"):
        node_record.decode(raw)
