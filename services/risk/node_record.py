"""risk's ``node_features`` records: a node's newest model row and the trace it arrived with.

One record per FeatureVector (~1,000/s at 10,000 nodes), so its size is the changelog's
write rate and what the broker's log cleaner has to compact. The record holds what risk
reads back: the window's ``ts_ms`` and ``input_ts_ms``, the ``traceparent`` of the
vector's message and the model row (float32, NaN where a feature is not valid: exactly
``as_model_input(values, valid)``) — ~700 bytes for 157 features, where the JSON record of
values and flags that earlier releases wrote is ~3.4 KB. Those JSON records are still read
(a changelog written before an upgrade restores as it is).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import orjson

from featurelib.node.schema import as_model_input

BINARY = 1
"""First byte of a binary record (a JSON record starts with ``{``)."""
_HEAD = struct.Struct("<BqqH")  # BINARY, ts_ms, input_ts_ms, length of the traceparent
_TS = struct.Struct("<q")


class NodeRecord(NamedTuple):
    ts_ms: int
    input_ts_ms: int
    row: np.ndarray
    """float32 model row, NaN where the feature is not valid."""
    traceparent: str


def encode(ts_ms: int, input_ts_ms: int, values: Sequence[float], valid: Sequence[bool], traceparent: str) -> bytes:
    """The record of a vector's ``values`` (floats) and ``valid`` (bools) with its message's traceparent."""
    tp = traceparent.encode("ascii", "replace")
    return _HEAD.pack(BINARY, ts_ms, input_ts_ms, len(tp)) + tp + as_model_input(values, valid).tobytes()


def ts_of(raw: bytes) -> int:
    """The record's window ``ts_ms`` without decoding the rest."""
    if raw[:1] == b"{":
        return int(orjson.loads(raw)["ts"])
    return int(_TS.unpack_from(raw, 1)[0])


def decode(raw: bytes) -> NodeRecord:
    if raw[:1] == b"{":
        doc = orjson.loads(raw)
        return NodeRecord(doc["ts"], doc.get("in", doc["ts"]), as_model_input(doc["v"], doc["m"]), doc.get("tp") or "")
    if raw[:1] != bytes([BINARY]) or len(raw) < _HEAD.size:
        raise ValueError(f"not a node_features record (first byte {raw[:1]!r}, {len(raw)} bytes)")
    _, ts_ms, input_ts_ms, tp_len = _HEAD.unpack_from(raw)
    start = _HEAD.size + tp_len
    if (len(raw) - start) % 4:
        raise ValueError(f"node_features record of {len(raw)} bytes: its row is not whole float32s")
    row = np.frombuffer(raw, dtype=np.float32, offset=start)
    return NodeRecord(ts_ms, input_ts_ms, row, raw[_HEAD.size:start].decode("ascii", "replace"))
