"""Fast path for decoding NodeState values into plain dicts.

``decode_nodestate_dict(data)`` returns the same dict as
``decode(NodeState, data).model_dump()`` and raises the same ``ContractError``,
but validates the orjson-parsed dict with hand-written checks instead of building
a pydantic model (what that saves, measured: ``docs/performance.md``).

Correctness rests on one rule: the fast checks only ever *accept*. Whenever they
see anything they do not fully understand (a failed check, a parse error, an
escape sequence, a duplicate key, an unexpected exception) the value goes through
``contracts.codec.decode`` and whatever it decides (accept or the exact error) is
the answer. So a fast accept must imply a pydantic accept; that is what
``tests/unit/test_fast_nodestate.py`` fuzzes. The checks run only while the model's schema
and the pydantic releases they were checked against are the installed ones (``MIRROR``).

Rules of pydantic's strict JSON validation mirrored here (each checked empirically
against pydantic 2.14 / pydantic-core 2.50, see the tests):

* float fields take JSON floats and JSON integers (dumped as ``float``); int fields
  take only JSON integers (``1.0`` and ``1e0`` are rejected), never ``true``/``false``.
* int fields accept integers of any size (``seq`` = 2**70 is valid); orjson turns
  integers beyond 64 bits into floats, so those take the slow path.
* ``null`` only where the field is ``| None``; ``NaN``/``Infinity`` tokens are
  parsed by pydantic but rejected as non-finite; orjson rejects them as malformed, so
  they take the slow path, which gives pydantic's error.
* Duplicate keys: for model fields (the top level, a Counter) the last value wins,
  as in orjson; but for ``dict[...]`` fields (``counters``, ``metrics``,
  ``cgroups``) pydantic validates every occurrence, so an invalid first value is
  rejected although orjson keeps only the last. Values with any duplicate key
  therefore take the slow path (detected by counting quote characters, see
  ``decode_nodestate_dict``).
* Lone surrogate escapes are malformed for both parsers; any value with a backslash
  takes the slow path anyway.
* ``Name`` lengths count code points (Python ``len``), not bytes.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from contracts.base import MAX_TS_MS, MIN_TS_MS
from contracts.codec import decode
from contracts.fast import guard
from contracts.models import NodeState

__all__ = ["ACTIVE", "MIRROR", "SCHEMA_MATCHES", "decode_nodestate_dict"]

_MAX_INTERVAL_MS: Final = 3_600_000
_NAME_MAX: Final = 253
_SOURCES: Final = frozenset(
    ("perf_stat", "perf_event", "software", "replay_perfstat", "replay_alibaba", "replay_bitbrains", "synthetic")
)
_PMUS: Final = frozenset(("hardware", "software", "recorded"))
_COUNTED: Final = frozenset(("counted", "multiplexed"))
_UNCOUNTED: Final = frozenset(("not_counted", "not_supported"))
_COUNTER_KEYS: Final = frozenset(("raw", "value", "enabled_ns", "running_ns", "status"))
# Top-level fields without a default: present in every accepted value.
_REQUIRED: Final = 9
_MISSING: Final = object()

# The checks below hand-copy NodeState as it was when they were written (pinned by
# the hash of its JSON schema) and pydantic's strict-JSON rules of the releases below.
# If either changes, the fast path switches itself off (every value goes through
# pydantic, still correct) and the unit tests that assert ``SCHEMA_MATCHES`` and
# ``ACTIVE`` fail until the checks are re-checked and the pins updated.
PINNED_SCHEMA_SHA256: Final = "a629bc800994397a4cceebeb82b99aa4b1c555774a7e8706bcf5391b7048601b"
MIRROR: Final = guard.Mirror("NodeState decode", {"pydantic": "2.14.4", "pydantic-core": "2.50.5", "orjson": "3.13.0"},
                             lambda: NodeState.model_json_schema(), PINNED_SCHEMA_SHA256)


def schema_sha256() -> str:
    return guard.schema_sha256(NodeState.model_json_schema())


SCHEMA_MATCHES: Final = schema_sha256() == PINNED_SCHEMA_SHA256
ACTIVE: bool = guard.enabled(MIRROR)
"""Whether the fast checks run (re-evaluate with ``guard.enabled(MIRROR)``)."""


class _FallbackError(Exception):
    """Raised inside the fast checks: let pydantic decide (and word the error)."""


def _slow(data: bytes | None) -> dict[str, Any]:
    # Raises the normal path's ContractError; if pydantic accepts what the fast
    # checks did not, its dump is the answer (every NodeState field is JSON-native,
    # so mode="json" and the default python mode give equal dicts).
    return decode(NodeState, data).model_dump(mode="json")


# Float checks below only test the sign: orjson never yields NaN or an infinity
# (it rejects NaN/Infinity tokens and numbers that overflow a double, pinned by a
# test), and -0.0 >= 0.0 passes in pydantic too.


def _nonneg_float(x: Any) -> float:
    """A NonNegFloat as pydantic stores it (JSON ints become floats)."""
    t = type(x)
    if (t is float or t is int) and x >= 0:  # type(True) is bool, not int
        return float(x)
    raise _FallbackError


def _counter(c: Any) -> int:
    """Validate one Counter dict of any shape in place: defaults filled, ints made floats.

    Returns how many JSON strings the original object held (its keys plus the
    status value), for the duplicate-key check.
    """
    if type(c) is not dict or not c.keys() <= _COUNTER_KEYS:
        raise _FallbackError
    strings = len(c) + ("status" in c)
    raw = c.get("raw")
    value = c.get("value")
    enabled = c.setdefault("enabled_ns", 0)
    running = c.setdefault("running_ns", 0)
    status = c.setdefault("status", "counted")
    if type(enabled) is not int or type(running) is not int or not 0 <= running <= enabled:
        raise _FallbackError
    if status in _COUNTED:
        if value is None:
            raise _FallbackError
        c["value"] = _nonneg_float(value)
        c["raw"] = None if raw is None else _nonneg_float(raw)
    elif status in _UNCOUNTED:
        if value is not None or raw is not None:
            raise _FallbackError
        c["value"] = c["raw"] = None
    else:
        raise _FallbackError
    return strings


def _check(obj: dict[str, Any]) -> int:
    """Validate a parsed NodeState dict in place; return how many JSON strings it holds.

    Raises _FallbackError, or any other exception (KeyError for a missing field,
    TypeError for an unhashable literal or a non-str event), when it cannot accept.
    """
    size = len(obj)
    node = obj["node"]
    ts = obj["ts_ms"]
    seq = obj["seq"]
    interval = obj["interval_ms"]
    events = obj["supported_events"]
    if not (
        type(node) is str
        and 0 < len(node) <= _NAME_MAX
        and type(ts) is type(seq) is type(interval) is int
        and MIN_TS_MS <= ts <= MAX_TS_MS
        and seq >= 0
        and 0 < interval <= _MAX_INTERVAL_MS
        and obj["source"] in _SOURCES
        and obj["pmu"] in _PMUS
        and type(events) is list
    ):
        raise _FallbackError
    "".join(events)  # TypeError unless every item is a str
    cpu = obj["cpu_util"]
    mem = obj["mem_util"]
    if not (type(cpu) is type(mem) is float and 0.0 <= cpu <= 1.0 and 0.0 <= mem <= 1.0):
        obj["cpu_util"] = _probability(cpu)
        obj["mem_util"] = _probability(mem)
    # top-level keys + node/source/pmu values + event names
    strings = size + 3 + len(events)
    present = _REQUIRED

    counters = obj.get("counters", _MISSING)
    if counters is _MISSING:
        obj["counters"] = {}
    else:
        present += 1
        if type(counters) is not dict:
            raise _FallbackError
        # Each counter: its name, five keys and the status value. That is a lower
        # bound for a counter accepted inline below (which does not check for unknown
        # keys: an extra key is one more string than counted here, so the quote
        # count in decode_nodestate_dict sends the value to pydantic).
        strings += 7 * len(counters)
        for c in counters.values():
            # The usual shape inline; anything else (defaults, ints, no number) in
            # _counter. A non-dict raises TypeError on the first lookup.
            try:
                value = c["value"]
                raw = c["raw"]
                enabled = c["enabled_ns"]
                running = c["running_ns"]
                status = c["status"]
            except KeyError:
                strings += _counter(c) - 6
                continue
            if not (
                type(value) is type(raw) is float
                and type(enabled) is type(running) is int
                and value >= 0.0 <= raw
                and 0 <= running <= enabled
                and (status == "counted" or status == "multiplexed")  # no hashing of a new str
            ):
                strings += _counter(c) - 6

    freq = obj.get("cpu_freq_mhz", _MISSING)
    if freq is _MISSING:
        obj["cpu_freq_mhz"] = None
    else:
        present += 1
        if freq is not None and (type(freq) is not float or freq < 0.0):
            obj["cpu_freq_mhz"] = _nonneg_float(freq)

    metrics = obj.get("metrics", _MISSING)
    if metrics is _MISSING:
        obj["metrics"] = {}
    else:
        present += 1
        if type(metrics) is not dict:
            raise _FallbackError
        strings += len(metrics)
        for name, x in metrics.items():
            if type(x) is not float or x < 0.0:
                metrics[name] = _nonneg_float(x)

    cgroups = obj.get("cgroups", _MISSING)
    if cgroups is _MISSING:
        obj["cgroups"] = {}
    else:
        present += 1
        if type(cgroups) is not dict:
            raise _FallbackError
        strings += len(cgroups)
        for group in cgroups.values():
            if type(group) is not dict:
                raise _FallbackError
            strings += len(group)
            for c in group.values():
                strings += _counter(c)

    if present != size:  # an unknown top-level key
        raise _FallbackError
    return strings


def _probability(x: Any) -> float:
    t = type(x)
    if (t is float or t is int) and 0 <= x <= 1:
        return float(x)
    raise _FallbackError


def decode_nodestate_dict(data: bytes | None) -> dict[str, Any]:
    """Decode one NodeState value to the dict ``decode(NodeState, data).model_dump()`` gives.

    Raises ``contracts.codec.ContractError`` exactly as ``decode(NodeState, data)`` does.
    """
    # A backslash means an escape sequence: rather than rely on orjson and pydantic's
    # parser agreeing on every escape (they do on lone surrogates, for one), let
    # pydantic decide. Producers never escape anything in practice.
    if type(data) is not bytes or b"\\" in data or not ACTIVE:
        return _slow(data)
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return _slow(data)
    if type(obj) is not dict:
        return _slow(data)
    try:
        strings = _check(obj)
    except Exception:
        return _slow(data)
    # Without escapes every '"' delimits a string, so the text holds exactly twice as
    # many quotes as the parsed value has strings, plus two for every string the
    # parser dropped with a duplicate key (pydantic validates those too in dict
    # fields). ``strings`` is exact, or too low when an inline-checked counter has an
    # unknown key; either way equality proves no duplicates and no unknown keys.
    if data.count(b'"') != 2 * strings:
        return _slow(data)
    return obj
