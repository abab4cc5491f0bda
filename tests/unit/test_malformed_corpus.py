"""The malformed corpus generator (tests/malformed_corpus.py): every case present, sized and refused as intended."""

from __future__ import annotations

import pytest

from contracts import decode
from contracts.topics import topic_spec
from tests.malformed_corpus import (
    BATCH_OVERHEAD,
    DEEP,
    MANY_HEADERS,
    NEAR_LIMIT,
    SHAPES,
    Case,
    consumer_breaking_cases,
    corpus,
    template,
)

LIMIT = 1_048_588
"""The local broker's message.max.bytes (Kafka's default)."""
NAMES = {
    "truncated_json", "truncated_one_byte", "wrong_type_string_for_int", "wrong_type_bool_for_float",
    "wrong_type_object_for_string", "missing_required_field", "nan_literal", "infinity_literal",
    "negative_infinity_literal", "binary_garbage", "binary_nul_bytes", "root_array", "root_array_of_valid",
    "root_string", "root_number", "root_null", "root_true", "int_2_pow_70", "int_400_digits",
    "int_2_pow_70_timestamp", "float_1e400", "just_under_broker_limit", "near_limit_truncated_900k",
    "near_limit_valid_whitespace_900k", "unknown_field", "utf8_bom", "invalid_utf8_in_string",
    "lone_surrogate_escape", "deep_nesting", "deep_nesting_in_field", "duplicate_keys",
    "duplicate_keys_invalid_first", "empty_value", "null_value_tombstone", "missing_key_valid_value",
    "missing_key_garbage_value", "header_binary_values", "header_odd_name", "header_empty_name", "header_many",
    "header_traceparent_garbage", "header_traceparent_binary", "header_value_with_nul",
    "garbage_headers_garbage_value",
}
ALWAYS_REFUSED = {
    "truncated_json": "malformed", "truncated_one_byte": "malformed", "binary_garbage": "malformed",
    "binary_nul_bytes": "malformed", "empty_value": "malformed", "null_value_tombstone": "malformed",
    "deep_nesting": "malformed", "invalid_utf8_in_string": "malformed", "missing_key_garbage_value": "malformed",
    "near_limit_truncated_900k": "malformed", "garbage_headers_garbage_value": "malformed",
    "wrong_type_string_for_int": "schema", "wrong_type_bool_for_float": "schema", "nan_literal": "schema",
    "infinity_literal": "schema", "negative_infinity_literal": "schema", "root_array": "schema",
    "root_string": "schema", "root_number": "schema", "root_null": "schema", "unknown_field": "schema",
    "int_2_pow_70_timestamp": "schema", "just_under_broker_limit": "schema", "missing_required_field": "schema",
}
VALID_VALUE = {"near_limit_valid_whitespace_900k", "missing_key_valid_value", "header_binary_values",
               "header_odd_name", "header_empty_name", "header_many", "header_traceparent_garbage",
               "header_traceparent_binary", "header_value_with_nul"}


@pytest.fixture(scope="module", params=sorted(SHAPES))
def cases(request: pytest.FixtureRequest) -> tuple[str, dict[str, Case]]:
    topic = request.param
    return topic, {c.name: c for c in corpus(topic, LIMIT)}


def test_templates_are_valid_messages_of_their_topic() -> None:
    for topic in SHAPES:
        decode(topic_spec(topic).model, topic_spec(topic).model.model_validate(template(topic)).model_dump_json()
               .encode())


def test_every_case_is_present_once_with_its_key(cases: tuple[str, dict[str, Case]]) -> None:
    topic, by_name = cases
    listed = [c.name for c in corpus(topic, LIMIT)]
    assert len(listed) == len(set(listed))
    keyless = {n for n in NAMES if n.startswith("missing_key")}
    assert set(listed) == (NAMES - keyless if topic_spec(topic).compacted else NAMES)
    for name, case in by_name.items():
        expected = None if name.startswith("missing_key") else f"corpus-{name}".encode()
        assert case.key == expected


def test_the_corpus_is_deterministic() -> None:
    assert corpus("taskevents.v1", LIMIT) == corpus("taskevents.v1", LIMIT)


def test_sizes_are_as_intended(cases: tuple[str, dict[str, Case]]) -> None:
    _, by_name = cases

    def size(name: str) -> int:
        value = by_name[name].value
        assert value is not None
        return len(value)

    def text(name: str) -> bytes:
        value = by_name[name].value
        assert value is not None
        return value

    assert size("just_under_broker_limit") == LIMIT - BATCH_OVERHEAD
    assert size("near_limit_truncated_900k") == NEAR_LIMIT
    assert size("near_limit_valid_whitespace_900k") == NEAR_LIMIT
    assert size("deep_nesting") == 2 * DEEP
    assert size("empty_value") == 0
    assert by_name["null_value_tombstone"].value is None
    assert len(by_name["header_many"].headers) == MANY_HEADERS
    assert len(by_name["garbage_headers_garbage_value"].headers) == MANY_HEADERS
    assert b"9" * 400 in text("int_400_digits")
    assert str(2**70).encode() in text("int_2_pow_70")
    assert text("utf8_bom").startswith(b"\xef\xbb\xbf")
    assert b"NaN" in text("nan_literal")


def test_expectations_are_what_decode_says(cases: tuple[str, dict[str, Case]]) -> None:
    topic, by_name = cases
    for name, kind in ALWAYS_REFUSED.items():
        assert name not in by_name or by_name[name].refusal == kind, name
    for name in VALID_VALUE & set(by_name):
        assert by_name[name].refusal is None, name
        decode(topic_spec(topic).model, by_name[name].value)


def test_only_header_cases_kcat_cannot_express_need_another_client() -> None:
    cases = corpus("proposals.v1", LIMIT)
    assert sorted(c.name for c in cases if not c.kcat_ok) == ["header_empty_name", "header_value_with_nul"]


def test_the_consumer_breaking_case_has_a_header_name_that_is_not_utf8() -> None:
    [case] = consumer_breaking_cases("nodestate.v1")
    [(name, _)] = case.headers
    with pytest.raises(UnicodeEncodeError):
        name.encode()
    assert name.encode("utf-8", "surrogateescape") == b"bad\xffname"
    assert case.refusal is None
