"""Dead letters stay bounded whatever the input, and say what they left out."""

from __future__ import annotations

import base64
import hashlib

import pytest

from contracts import DeadLetterV2, decode, encode
from services.runtime import deadletter
from services.runtime.deadletter import dead_letter, original_value

BROKER_REQUEST_MAX = 1_048_576
"""aiokafka's default max_request_size: a dead letter must fit in one request with room to spare."""


def letter(value: bytes | None, key: bytes | None = b"k", headers: list[tuple[object, object]] | None = None,
           error: str = "boom", kind: str = "malformed") -> DeadLetterV2:
    return dead_letter(service="svc", topic="p-nodestate.v1", partition=3, offset=17, key=key, value=value,
                       headers=headers, error=error, kind=kind)


def test_small_value_is_kept_whole_with_its_hash() -> None:
    out = letter(b'{"node": 1}')
    assert out.value is not None
    assert original_value(out) == b'{"node": 1}'
    assert (out.value.size, out.value.truncated) == (11, False)
    assert out.value.sha256 == hashlib.sha256(b'{"node": 1}').hexdigest()
    assert decode(DeadLetterV2, encode(out)) == out


@pytest.mark.parametrize("size", [deadletter.VALUE_MAX + 1, 900_000, 1_048_000, 5_000_000])
def test_large_value_keeps_a_prefix_size_and_hash_and_fits_a_request(size: int) -> None:
    value = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    out = letter(value, key=b"K" * 50_000, headers=[(f"h{i}", b"v" * 5_000) for i in range(100)],
                 error="e" * 100_000)
    assert out.value is not None and out.value.truncated and out.value.size == size
    assert out.value.sha256 == hashlib.sha256(value).hexdigest()
    assert original_value(out) == value[: deadletter.VALUE_MAX]
    assert out.key is not None and out.key.truncated and out.key.size == 50_000
    assert len(out.headers) == deadletter.HEADERS_MAX and out.headers_dropped == 100 - deadletter.HEADERS_MAX
    assert all(h.value is not None and h.value.truncated for h in out.headers)
    assert len(out.error) == deadletter.ERROR_MAX
    assert len(encode(out)) < BROKER_REQUEST_MAX // 4


def test_strange_headers_keys_and_kinds_never_raise() -> None:
    out = letter(None, key=None, headers=[("x" * 1000, None), (b"\xff\xfe", "text"), ("ok", bytearray(b"\x00"))],
                 error="", kind="not-a-kind")
    assert out.value is None and out.key is None
    assert [h.name for h in out.headers] == ["x" * 253, "\ufffd\ufffd", "ok"]
    assert out.headers[0].value is None
    assert out.headers[1].value is not None and base64.b64decode(out.headers[1].value.b64) == b"text"
    assert (out.error, out.error_kind) == ("unknown error", "processing")


def test_poison_is_a_kind() -> None:
    assert letter(b"x", kind="poison").error_kind == "poison"
