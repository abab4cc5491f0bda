"""Fast path for decoding FeatureVector values into what the model processors need.

``decode_feature_row(data)`` makes exactly the accept/reject decision of
``decode(FeatureVector, data)``, raises the same ``ContractError``, and returns the
vector as a light :class:`FeatureRow`: the scalar fields, the values packed as float64
and the ``valid`` flags as a byte mask, ready for ``numpy.frombuffer``. It is cheaper than
``decode`` plus packing, and it spares the processors turning 157 Python floats per row
into numpy (figures and the command that measures them: ``docs/performance.md``).

Not keeping the values as Python floats is much of the gain: a batch of 500 vectors as
lists holds ~80,000 floats (~2 MB) at once, where packing each vector right away lets the
parser reuse the memory it just freed. The same checks returning a FeatureVector (lists
kept) measured *slower* than pydantic's ``model_validate_json``, which parses and
validates in one pass; that is why there is no such function here.

As in ``contracts/fast/nodestate.py`` (read its docstring for the strict-JSON rules),
the fast checks only ever *accept*: anything they do not fully understand (a failed
check, a parse error, an escape sequence, a duplicate key, an unexpected exception)
goes through ``contracts.codec.decode``, whose answer (the model, then packed, or the
exact error) is returned. ``tests/unit/test_fast_featurevector.py`` fuzzes that a fast
accept is never a pydantic reject and yields the same values.

The 157 ``values`` and ``valid`` items are not type-checked one by one in Python (that
alone would cost about as much as the rest); the raw text of the two arrays is checked instead, which is
exact because the text has no escapes and orjson parsed it:

* The text must hold exactly 20 ``"``: the 8 keys plus ``node`` and ``schema_hash``
  (10 strings of two quotes each). So there is no other string anywhere: no duplicate
  key (at the top level pydantic keeps the last value like orjson, but the array
  checks below must look at the array orjson kept), no string in the arrays and no
  non-empty object in them; hence the only ``"values"`` followed by ``:`` is the
  top-level key, and likewise ``"valid"``.
* ``values``: ``struct.pack("<n>d", *values)`` accepts only numbers and bools (nothing
  else orjson yields has ``__float__`` or ``__index__``): no string, null or container,
  so the text from ``[`` to the first ``]`` is exactly the array's items, and without a
  ``t`` or an ``f`` in it none is a bool. An int (a JSON integer; orjson turns those
  beyond 64 bits into floats) is packed as ``float()`` converts it, which is what
  pydantic stores for a float field in strict JSON mode (checked by the float-spelling
  test).
* ``valid``: its array text must hold only the letters of ``true``/``false``, commas and
  whitespace, so every item is a bool (``null`` has an ``n``, numbers have digits). One
  ``bytes.translate`` checks that and maps each ``t``/``f`` to a 1/0 byte: the mask.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Final, NamedTuple, TypeVar

import orjson

from contracts.base import MAX_TS_MS, MIN_TS_MS, Contract
from contracts.codec import decode
from contracts.fast import guard
from contracts.models import FeatureVector

__all__ = ["ACTIVE", "MIRROR", "SCHEMA_MATCHES", "FeatureRow", "assembler", "decode_feature_row",
           "encode_feature_vector", "row_of"]

M = TypeVar("M", bound=Contract)

_NAME_MAX: Final = 253
_HASH_MIN: Final = 8
_HASH_MAX: Final = 64
_FIELDS: Final = 8
_QUOTES: Final = 2 * (_FIELDS + 2)  # the keys, node and schema_hash
# The valid array's text: t → 1, f → 0, the other letters of true/false and the
# separators deleted, anything else → 2 (not a bool).
_MASK_TABLE: Final = bytes(1 if b == ord("t") else 0 if b == ord("f") else 2 for b in range(256))
_MASK_DELETE: Final = b"rueals, \t\n\r"
_VALUES_KEY: Final = b'"values":['
_BETWEEN: Final = b'],"valid":['  # the arrays as orjson writes them: values, then valid

# The checks below hand-copy FeatureVector as it was when they were written (pinned by
# the hash of its JSON schema). If the model changes, the fast path switches itself off
# (every value goes through pydantic, still correct) and the unit test that asserts
# ``SCHEMA_MATCHES`` fails until the checks are updated and the hash re-pinned. The
# schema does not show validators: ``_mask_matches`` (len(values) == len(valid)) is
# mirrored below.
# The pydantic / orjson releases are pinned too: the strict-JSON rules and orjson's output
# format (the array text checked below) are theirs.
PINNED_SCHEMA_SHA256: Final = "cc487bd98fbafc07299f1db23365aedc752f2315668b8230cb33d4b3e9039e57"
MIRROR: Final = guard.Mirror("FeatureVector decode",
                             {"pydantic": "2.14.4", "pydantic-core": "2.50.5", "orjson": "3.13.0"},
                             lambda: FeatureVector.model_json_schema(), PINNED_SCHEMA_SHA256)


def schema_sha256() -> str:
    return guard.schema_sha256(FeatureVector.model_json_schema())


SCHEMA_MATCHES: Final = schema_sha256() == PINNED_SCHEMA_SHA256
ACTIVE: bool = guard.enabled(MIRROR)
"""Whether the fast checks run (re-evaluate with ``guard.enabled(MIRROR)``)."""

def _slot_setter(model: type[Contract], name: str) -> Callable[[Any, Any], None]:
    """The ``__set__`` of the descriptor behind attribute ``name`` (a slot of BaseModel)."""
    for cls in model.__mro__:
        if name in vars(cls):
            setter: Callable[[Any, Any], None] = vars(cls)[name].__set__
            return setter
    raise TypeError(f"{model.__name__} has no {name}")


def assembler(model: type[M]) -> Callable[[dict[str, Any]], M]:
    """A builder of ``model`` instances from field values already known to be valid.

    The instance is what validation would have built from the same values: ``fields``
    becomes its ``__dict__`` as it is, so it must hold every field, in field order, with
    the exact types validation yields (float, not int, for a float field). Cheaper than
    validation and than ``model_construct``, which also resolves aliases and defaults
    (``docs/performance.md``). Models with private attributes, ``model_post_init`` or extra
    fields allowed need more than this and are refused. It writes pydantic's instance
    slots itself, so when the pinned pydantic is not the installed one (``ACTIVE`` false)
    the builder is ``model_validate`` (the same instance, validated).
    """
    if not ACTIVE:
        return model.model_validate
    if (model.__pydantic_post_init__ or model.__private_attributes__ or model.__pydantic_root_model__
            or model.model_config.get("extra") == "allow"):
        raise TypeError(f"{model.__name__} needs model_construct")
    new = model.__new__
    # the slots' descriptors themselves: cheaper than object.__setattr__ by name
    set_dict = _slot_setter(model, "__dict__")
    set_fields_set = _slot_setter(model, "__pydantic_fields_set__")
    set_extra = _slot_setter(model, "__pydantic_extra__")
    set_private = _slot_setter(model, "__pydantic_private__")

    def build(fields: dict[str, Any]) -> M:
        instance = new(model)
        set_dict(instance, fields)
        set_fields_set(instance, set(fields))
        set_extra(instance, None)
        set_private(instance, None)
        return instance

    return build


class FeatureRow(NamedTuple):
    """A valid FeatureVector, light: its fields, with ``values`` and ``valid`` packed for numpy.

    ``packed`` is the values as native float64 (``numpy.frombuffer(packed)``), ``mask`` the
    ``valid`` flags as 0/1 bytes (``numpy.frombuffer(mask, dtype=bool)``).
    """

    node: str
    ts_ms: int
    window_s: int
    schema_hash: str
    samples: int
    input_ts_ms: int
    packed: bytes
    mask: bytes

    @property
    def values(self) -> memoryview[float]:
        """The model's ``values`` (floats), as a read-only sequence."""
        return memoryview(self.packed).cast("d")

    @property
    def valid(self) -> memoryview[bool]:
        """The model's ``valid`` (bools), as a read-only sequence."""
        return memoryview(self.mask).cast("?")


@lru_cache(maxsize=16)
def _packer(n: int) -> Callable[..., bytes]:
    return struct.Struct(f"{n}d").pack


def row_of(vector: FeatureVector) -> FeatureRow:
    """The FeatureRow of a validated model."""
    return FeatureRow(vector.node, vector.ts_ms, vector.window_s, vector.schema_hash, vector.samples,
                      vector.input_ts_ms, _packer(len(vector.values))(*vector.values), bytes(vector.valid))


def _slow(data: bytes | None) -> FeatureRow:
    # Raises the normal path's ContractError, or packs pydantic's model.
    return row_of(decode(FeatureVector, data))


def _array(data: bytes, key: bytes) -> tuple[int, int]:
    """Bounds of the text between ``[`` and the first ``]`` of an array after ``key`` and ``:``.

    (-1, -1) when no ``key`` is followed by only whitespace, ``:`` and ``[``.
    """
    at = data.find(key)
    while at >= 0:
        after = at + len(key)
        start = data.find(b"[", after)
        if start < 0:
            break
        # ``strip`` also drops \v and \f, which a parsed JSON text never holds outside strings
        if data[after:start].strip() == b":":
            return start + 1, data.find(b"]", start)
        at = data.find(key, after)  # e.g. a node named "values"
    return -1, -1


def decode_feature_row(data: bytes | None) -> FeatureRow:
    """Decode one FeatureVector value into a FeatureRow.

    Raises ``contracts.codec.ContractError`` exactly as ``decode(FeatureVector, data)`` does.
    """
    # A backslash means an escape sequence: let pydantic decide (see contracts/fast/nodestate.py).
    if type(data) is not bytes or b"\\" in data or not ACTIVE:
        return _slow(data)
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return _slow(data)
    if type(obj) is not dict or len(obj) != _FIELDS:
        return _slow(data)
    try:
        node = obj["node"]
        ts = obj["ts_ms"]
        window = obj["window_s"]
        schema = obj["schema_hash"]
        values = obj["values"]
        valid = obj["valid"]
        samples = obj["samples"]
        input_ts = obj["input_ts_ms"]
    except KeyError:
        return _slow(data)
    # len(obj) == 8 and all 8 fields present: no unknown key (extra="forbid")
    if not (
        type(node) is str
        and 0 < len(node) <= _NAME_MAX  # code points, as pydantic counts
        and type(schema) is str
        and _HASH_MIN <= len(schema) <= _HASH_MAX
        and type(ts) is type(window) is type(samples) is type(input_ts) is int  # not bool, not float
        and MIN_TS_MS <= ts <= MAX_TS_MS
        and MIN_TS_MS <= input_ts <= MAX_TS_MS
        and window > 0
        and samples > 0
        and type(values) is list
        and type(valid) is list
        and len(values) == len(valid)
    ):
        return _slow(data)
    at = data.find(_VALUES_KEY)
    if at >= 0:
        v_start = at + len(_VALUES_KEY)
        v_end = data.find(b"]", v_start)
    else:
        v_start, v_end = _array(data, b'"values"')
    if v_end >= 0 and data.startswith(_BETWEEN, v_end):
        m_start = v_end + len(_BETWEEN)
        m_end = data.find(b"]", m_start)
    else:
        m_start, m_end = _array(data, b'"valid"')
    if v_end < 0 or m_end < 0:
        return _slow(data)
    mask = data[m_start:m_end].translate(_MASK_TABLE, _MASK_DELETE)
    if len(mask) != len(valid) or b"\x02" in mask:
        return _slow(data)
    if data.find(b'"', v_start, v_end) >= 0 or data.find(b"t", v_start, v_end) >= 0 \
            or data.find(b"f", v_start, v_end) >= 0:
        return _slow(data)
    # Neither array holds a '"' (checked above): count the quotes around them.
    if v_end < m_start:
        quotes = data.count(b'"', 0, v_start) + data.count(b'"', v_end, m_start) + data.count(b'"', m_end)
    elif m_end < v_start:
        quotes = data.count(b'"', 0, m_start) + data.count(b'"', m_end, v_start) + data.count(b'"', v_end)
    else:
        return _slow(data)
    if quotes != _QUOTES:
        return _slow(data)
    try:
        packed = _packer(len(values))(*values)
    except (struct.error, OverflowError):  # a value that is not a number
        return _slow(data)
    return FeatureRow(node, ts, window, schema, samples, input_ts, packed, mask)


_FLOAT_ONLY: Final = frozenset({float})
_BOOL_ONLY: Final = frozenset({bool})


def encode_feature_vector(node: str, ts_ms: int, window_s: int, schema_hash: str, values: list[float],
                          valid: list[bool], samples: int, input_ts_ms: int) -> bytes | None:
    """``encode(FeatureVector(...))`` of these fields when the checks here prove the model valid, else None
    (then only pydantic can say: build the model, which raises or encodes as always).

    The features stage publishes one vector per node and window: validating 157 floats and bools in
    pydantic and dumping the model cost about as much again as the rest of the emit. Accepts only what
    strict validation keeps as it is (exact ``float`` and ``bool`` items, none a subclass; ``int`` fields
    not ``bool``), so ``model_dump(mode="json")`` would hold the same objects in this field order.
    """
    if not (
        ACTIVE
        and type(node) is str
        and 0 < len(node) <= _NAME_MAX
        and type(schema_hash) is str
        and _HASH_MIN <= len(schema_hash) <= _HASH_MAX
        and type(ts_ms) is type(window_s) is type(samples) is type(input_ts_ms) is int
        and MIN_TS_MS <= ts_ms <= MAX_TS_MS
        and MIN_TS_MS <= input_ts_ms <= MAX_TS_MS
        and window_s > 0
        and samples > 0
        and type(values) is list
        and type(valid) is list
        and len(values) == len(valid)
        and _FLOAT_ONLY.issuperset(map(type, values))
        and _BOOL_ONLY.issuperset(map(type, valid))
    ):
        return None
    # no NaN or infinity (allow_inf_nan=False): a sum of finite floats can only overflow to
    # infinity, which sends an all-finite vector to pydantic (slower, same answer)
    if not math.isfinite(sum(values)):
        return None
    return orjson.dumps({"node": node, "ts_ms": ts_ms, "window_s": window_s, "schema_hash": schema_hash,
                         "values": values, "valid": valid, "samples": samples, "input_ts_ms": input_ts_ms})
