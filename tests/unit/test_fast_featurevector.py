"""The orjson fast path for FeatureVector agrees with the pydantic contract, value for value.

``decode_feature_row`` must accept exactly what ``decode(FeatureVector, ...)`` accepts,
raise the very same ``ContractError`` otherwise, and return the model's values packed
(``row_of`` of the model: the same floats bit for bit, the same flags). The mutation
fuzzer below is the proof that a fast accept is never a pydantic reject.
"""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Iterator
from functools import cache
from typing import Any

import orjson
import pytest

import contracts.fast.featurevector as fast
from contracts import AnomalyScore, FeatureVector, RegimeLabel, RegimeLabelV2, decode
from contracts.base import MAX_TS_MS, MIN_TS_MS, Contract
from contracts.fast.featurevector import FeatureRow, assembler, decode_feature_row, row_of
from featurelib.node.samples import sample_from_dict
from featurelib.node.schema import N_FEATURES, node_feature_schema_hash
from featurelib.node.windows import features_for_stream
from tests.unit.decoder_fuzz import SlowSpy, bytewise, outcome, random_value, run_mutations

TS = 1_700_000_000_000


# ------------------------------------------------------------------ helpers
def reference(data: bytes | None) -> FeatureRow:
    return row_of(decode(FeatureVector, data))


def assert_agrees(data: bytes | None) -> str:
    """Assert the fast path and pydantic agree on ``data``; return the outcome kind."""
    want = outcome(reference, data)
    got = outcome(decode_feature_row, data)
    if want[0] == "ok":
        assert got[0] == "ok", (data, got)
        # equal fields of equal types (1 != 1.0 here); packed floats compare bit for bit
        assert got[1] == want[1], data
        assert [type(x) for x in got[1]] == [type(x) for x in want[1]], data
    else:
        assert got == want, data
    return want[0]


# ------------------------------------------------------------------ valid messages
@cache
def simulator_vectors() -> tuple[bytes, ...]:
    """FeatureVectors as the features service writes them (orjson of the model dump)."""
    from simulator import SyntheticCluster

    sim = SyntheticCluster(nodes=8, seed=5, missing_event_prob=0.3, multiplex_prob=0.3)
    samples = [sample_from_dict(d) for batch in sim.run(300) for d in batch.nodestate_dicts()]
    schema = node_feature_schema_hash()
    out = []
    for w in features_for_stream(samples):
        fv = FeatureVector(node=w.node, ts_ms=w.ts_ms, window_s=10, schema_hash=schema, values=w.values,
                           valid=w.valid, samples=w.samples, input_ts_ms=w.input_ts_ms)
        out.append(orjson.dumps(fv.model_dump(mode="json")))
    return tuple(out)


def small_vector(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "node": "worker-1.example.internal",
        "ts_ms": TS,
        "window_s": 10,
        "schema_hash": "ab" * 32,
        "values": [0.5, 0.0, 1e-300, 12345.678, -0.0, 1e22, 3.0],
        "valid": [True, False, True, True, False, True, True],
        "samples": 10,
        "input_ts_ms": TS - 5,
    }
    doc.update(overrides)
    return doc


def edge_vectors() -> list[dict[str, Any]]:
    return [
        small_vector(),
        small_vector(node="é" * 253, schema_hash="x" * 8, ts_ms=MIN_TS_MS, input_ts_ms=MAX_TS_MS),
        small_vector(node="n", schema_hash="y" * 64, window_s=2**63, samples=1, values=[], valid=[]),
        small_vector(values=[1.5] * N_FEATURES, valid=[True, False] * (N_FEATURES // 2) + [True]),
        small_vector(node="values", schema_hash="valid-valid"),  # key names as strings elsewhere
        small_vector(node="t f [ ] { } , :", schema_hash="truefalse-null"),
    ]


def test_fast_path_matches_the_pinned_model() -> None:
    assert fast.SCHEMA_MATCHES, (
        "FeatureVector changed: update contracts/fast/featurevector.py's checks, then PINNED_SCHEMA_SHA256 "
        f"= {fast.schema_sha256()!r}"
    )


def test_service_vectors_decode_like_pydantic_without_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = SlowSpy(monkeypatch, fast)
    vectors = simulator_vectors()
    assert len(vectors) >= 200
    for data in vectors:
        row = decode_feature_row(data)
        model = FeatureVector.model_validate_json(data)
        assert row == row_of(model)
        assert list(row.values) == model.values and list(row.valid) == model.valid
        assert struct.pack(f"{len(model.values)}d", *model.values) == row.packed
    assert spy.calls == 0


def test_other_layouts_decode_without_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = SlowSpy(monkeypatch, fast)
    for doc in edge_vectors():
        layouts = [
            orjson.dumps(doc),
            orjson.dumps(doc, option=orjson.OPT_INDENT_2),  # whitespace everywhere
            orjson.dumps(dict(reversed(doc.items()))),  # valid before values
        ]
        if "," not in doc["node"] + doc["schema_hash"]:
            layouts.append(orjson.dumps(doc).replace(b":", b" : ").replace(b",", b" ,\n"))
        for data in layouts:
            assert assert_agrees(data) == "ok", data
    assert spy.calls == 0


def test_json_ints_are_floats_as_in_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = SlowSpy(monkeypatch, fast)
    data = orjson.dumps(small_vector(values=[1.0, 0.0, 2.0], valid=[True, True, True])).replace(b".0", b"")
    assert b"[1,0,2]" in data
    row = decode_feature_row(data)
    assert list(row.values) == [1.0, 0.0, 2.0] and all(type(v) is float for v in row.values)
    assert_agrees(data)
    assert spy.calls == 0


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (None, "malformed"),
        (b"", "malformed"),
        (b"{", "malformed"),
        (b"\xff\xfe", "malformed"),
        (b"null", "schema"),
        (b"[]", "schema"),
        (b"{}", "schema"),
        (b'"x"', "schema"),
    ],
)
def test_rejections_are_the_normal_paths(data: bytes | None, kind: str) -> None:
    assert assert_agrees(data) == kind


def _with_token(doc: dict[str, Any], path: tuple[Any, ...], token: bytes) -> bytes:
    obj: Any = doc
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = "@@TOKEN@@"
    return orjson.dumps(doc).replace(b'"@@TOKEN@@"', token)


@pytest.mark.parametrize(
    ("path", "token", "kind"),
    [
        (("ts_ms",), b"1.7e12", "schema"),  # no float for an int field, even integral
        (("ts_ms",), b"%d.0" % TS, "schema"),
        (("window_s",), b"true", "schema"),  # bool is not int
        (("window_s",), b"0", "schema"),
        (("window_s",), b"-0", "schema"),
        (("window_s",), b"%d" % 2**64, "ok"),  # orjson gives a float: pydantic decides, and accepts
        (("samples",), b"%d" % 2**70, "ok"),
        (("samples",), b"null", "schema"),
        (("ts_ms",), b"%d" % (MIN_TS_MS - 1), "schema"),
        (("input_ts_ms",), b"%d" % (MAX_TS_MS + 1), "schema"),
        (("node",), b'""', "schema"),
        (("node",), b'"\\ud800"', "malformed"),
        (("node",), b'"\\ud83d\\ude00"', "ok"),
        (("node",), b'"' + "😀".encode() * 253 + b'"', "ok"),  # code points, not bytes
        (("node",), b'"' + "😀".encode() * 254 + b'"', "schema"),
        (("node",), b"7", "schema"),
        (("schema_hash",), b'"1234567"', "schema"),
        (("schema_hash",), b'"' + b"h" * 65 + b'"', "schema"),
        (("values", 0), b"1", "ok"),  # int for a float field is fine in strict JSON mode
        (("values", 0), b"-0", "ok"),
        (("values", 0), b"%d" % 2**64, "ok"),
        (("values", 0), b"-%d" % 2**70, "ok"),
        (("values", 0), b"1E2", "ok"),
        (("values", 0), b"1e-400", "ok"),
        (("values", 0), b"true", "schema"),
        (("values", 0), b"false", "schema"),
        (("values", 0), b"null", "schema"),
        (("values", 0), b'"1.0"', "schema"),
        (("values", 0), b"[1.0]", "schema"),
        (("values", 0), b"{}", "schema"),
        (("values", 0), b"NaN", "schema"),  # pydantic parses NaN and rejects it as a value
        (("values", 0), b"Infinity", "schema"),
        (("values", 0), b"1e400", "schema"),
        (("values", 0), b"01", "malformed"),
        (("values", 0), b".5", "malformed"),
        (("values",), b"[]", "schema"),  # length differs from valid
        (("values",), b"null", "schema"),
        (("valid", 0), b"1", "schema"),
        (("valid", 0), b"0", "schema"),
        (("valid", 0), b"1.0", "schema"),
        (("valid", 0), b"null", "schema"),
        (("valid", 0), b'"true"', "schema"),
        (("valid", 0), b"[true]", "schema"),
        (("valid",), b"[true]", "schema"),
        (("valid",), b"{}", "schema"),
    ],
)
def test_strict_json_rules(path: tuple[Any, ...], token: bytes, kind: str) -> None:
    assert assert_agrees(_with_token(small_vector(), path, token)) == kind


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        # duplicate keys: the last one counts in both parsers ...
        (b'{"values":[true],' + orjson.dumps(small_vector())[1:], "ok"),
        (orjson.dumps(small_vector())[:-1] + b',"values":[true,1,2,3,4,5,6]}', "schema"),
        (orjson.dumps(small_vector())[:-1] + b',"valid":[1,1,1,1,1,1,1]}', "schema"),
        (orjson.dumps(small_vector())[:-1] + b',"node":"other"}', "ok"),
        (orjson.dumps(small_vector())[:-1] + b',"node":""}', "schema"),
        # ... unknown and missing keys
        (orjson.dumps(small_vector())[:-1] + b',"extra":1}', "schema"),
        (orjson.dumps({k: v for k, v in small_vector().items() if k != "samples"}), "schema"),
        # an array in an array ends at the inner ']'
        (orjson.dumps(small_vector()).replace(b'"values":[', b'"values":[[1.0],'), "schema"),
        (orjson.dumps(small_vector()).replace(b'"valid":[', b'"valid":[[true],'), "schema"),
    ],
)
def test_duplicate_unknown_and_nested(text: bytes, kind: str) -> None:
    assert assert_agrees(text) == kind


def test_orjson_never_yields_non_finite_floats() -> None:
    for token in (b"NaN", b"Infinity", b"-Infinity", b"1e309", b"-1e309", b"1" + b"0" * 400):
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(b"[" + token + b"]")


def _float_tokens(rng: random.Random) -> Iterator[bytes]:
    for _ in range(300):
        x = rng.choice([rng.random(), rng.uniform(-1e12, 1e12), math.ldexp(rng.random(), rng.randint(-1074, 1023))])
        yield repr(x).encode()
        yield b"%.17g" % x
        yield b"%.25e" % x
        yield b"%.3E" % x
        yield (b"%.40f" % x).rstrip(b"0").rstrip(b".") or b"0"
        yield b"%d" % rng.randint(-(2**63), 2**64 - 1)
        yield b"%d" % rng.randint(2**64, 2**80)
        yield b"-%d" % rng.randint(2**63, 2**80)


def test_float_spellings_parse_to_the_same_double() -> None:
    rng = random.Random(11)
    for token in _float_tokens(rng):
        data = _with_token(small_vector(), ("values", rng.randrange(7)), token)
        assert assert_agrees(data) == "ok", token


# ------------------------------------------------------------------ assembler
def test_assembled_outputs_equal_validated_ones() -> None:
    label = {"node": "n1", "ts_ms": TS, "regime": "llc", "confidence": 0.25, "raw_regime": "none", "changed": True,
             "interference": {"cpu_bound": 1.0, "llc_sensitive": 2.5}, "model_version": "r1", "input_ts_ms": TS - 1}
    score = {"node": "n1", "ts_ms": TS, "score": 0.5, "is_anomaly": False, "threshold": 0.75, "model_version": "a1",
             "input_ts_ms": TS - 1}
    unknown = {"node": "n1", "ts_ms": TS, "regime": "unknown", "confidence": 0.0, "raw_regime": "unknown",
               "changed": True, "interference": {}, "abstain": ["counters_missing"], "ood_score": None,
               "model_version": "r2", "input_ts_ms": TS - 1}
    for model, fields in ((RegimeLabel, label), (RegimeLabelV2, unknown), (AnomalyScore, score)):
        validated: Contract = model.model_validate(fields)
        built = assembler(model)(dict(fields))
        assert built == validated and type(built) is model
        assert built.model_fields_set == validated.model_fields_set
        assert built.model_dump(mode="json") == validated.model_dump(mode="json")
        assert orjson.dumps(built.model_dump(mode="json")) == orjson.dumps(fields)
        with pytest.raises(Exception, match="frozen"):
            built.node = "other"  # type: ignore[misc]


def test_assembler_refuses_models_it_cannot_build() -> None:
    from pydantic import BaseModel, ConfigDict, PrivateAttr

    class Private(Contract):
        x: int
        _p: int = PrivateAttr(default=1)

    class Extra(BaseModel):
        model_config = ConfigDict(extra="allow")
        x: int

    for model in (Private, Extra):
        with pytest.raises(TypeError, match="model_construct"):
            assembler(model)  # type: ignore[type-var]


# ------------------------------------------------------------------ mutation fuzzer
TOKENS: list[bytes] = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e400",
    b"-1e400",
    b"-0",
    b"-0.0",
    b"1E2",
    b"1.0e0",
    b"%d" % 2**70,
    b"-%d" % 2**70,
    b"%d" % 2**64,
    b"%d" % (2**64 - 1),
    b"%d" % -(2**63),
    b"1e-400",
    b"01",
    b"1.",
    b".5",
    b"+1",
    b"true",
    b"false",
    b"nul",
    b'"\\u0041"',
    b'"\\ud800"',
    b'"a\\"b"',
    b'"\\n"',
    b'"\x01"',
    b'"\xff"',
    b'"]"',
    b'"t"',
    b"[1,]",
    b"{}",
    b'{"a":1}',
    b"[]",
    b"[true]",
    b"[1.0]",
    b'{"a":1,"a":2}',
]
VALUES: list[Any] = [
    None,
    True,
    False,
    "",
    "x",
    "values",
    "valid",
    "a" * 253,
    "a" * 254,
    "h" * 7,
    "h" * 8,
    "h" * 64,
    "h" * 65,
    0,
    1,
    -1,
    2,
    10,
    0.0,
    -0.0,
    0.5,
    1.0,
    1.5,
    -0.5,
    1e308,
    -1e308,
    2**53 + 1,
    2**63,
    2**64 - 1,
    MIN_TS_MS - 1,
    MIN_TS_MS,
    MAX_TS_MS,
    MAX_TS_MS + 1,
    TS // 1000,
    TS * 1000,
    [],
    [1.0],
    [True],
    [None],
    {},
    {"a": 1},
]
FIELDS = list(FeatureVector.model_fields)
KEYS = [*FIELDS, "extra", "", "value", "Values"]


def _random_value(rng: random.Random) -> Any:
    return random_value(rng, VALUES)


class Mutator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def structural(self, doc: dict[str, Any]) -> tuple[dict[str, Any], bytes, bytes]:
        """Mutate the parsed value; return it with a raw token and a duplicate key to splice in."""
        rng = self.rng
        token = rng.choice(TOKENS)
        dup_key = b""
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            op = rng.randrange(10)
            arrays = [a for a in (doc.get("values"), doc.get("valid")) if isinstance(a, list) and a]
            if op == 0:  # replace a field with a value of another type
                doc[rng.choice(FIELDS)] = _random_value(rng)
            elif op == 1 and doc:  # drop a key
                del doc[rng.choice(list(doc))]
            elif op == 2:  # add a key, known or not
                doc[rng.choice(KEYS)] = _random_value(rng)
            elif op in (3, 4) and arrays:  # an item of values or valid
                array = rng.choice(arrays)
                array[rng.randrange(len(array))] = _random_value(rng) if op == 3 else rng.choice(
                    [True, False, 0, 1, 0.0, 1.0, 2.5, -1, None, "@@TOKEN@@"])
            elif op == 5 and arrays:  # lengths differ, or both shrink/grow alike
                array = rng.choice(arrays)
                if rng.random() < 0.5:
                    array.pop(rng.randrange(len(array)))
                else:
                    array.append(rng.choice(array))
                if rng.random() < 0.3 and len(arrays) == 2:
                    other = arrays[0] if array is arrays[1] else arrays[1]
                    del other[len(array):]
                    other.extend(other[-1:] * (len(array) - len(other)))
            elif op == 6:  # scalar fields out of range
                field, value = rng.choice([
                    ("ts_ms", MIN_TS_MS - 1), ("ts_ms", MAX_TS_MS + 1), ("input_ts_ms", TS * 1000),
                    ("window_s", 0), ("window_s", -10), ("samples", 0), ("node", ""), ("node", "n" * 254),
                    ("node", "n" * 253), ("schema_hash", "s" * 7), ("schema_hash", "s" * 65),
                ])
                doc[field] = value
            elif op == 7 and doc:  # a duplicate key, spliced in after encoding
                dup_key = rng.choice(list(doc)).encode()
                if rng.random() < 0.5:  # the duplicate before the original
                    items = list(doc.items())
                    doc.clear()
                    doc["@@DUP@@"] = _random_value(rng)
                    doc.update(items)
                else:
                    doc["@@DUP@@"] = rng.choice([_random_value(rng), doc[dup_key.decode()]])
            elif op == 8:  # key order
                items = list(doc.items())
                rng.shuffle(items)
                doc.clear()
                doc.update(items)
            else:  # ints for floats, floats for ints
                slots: list[tuple[Any, Any]] = [(doc, k) for k, v in doc.items() if type(v) in (int, float)]
                slots += [(a, i) for a in arrays for i, v in enumerate(a) if type(v) in (int, float)]
                if slots:
                    container, key = rng.choice(slots)
                    v = container[key]
                    container[key] = float(v) if isinstance(v, int) else int(v)
        return doc, token, dup_key

    def bytewise(self, data: bytes) -> bytes:
        return bytewise(self.rng, data, inserts=[b" ", b"\n", b"\t", b"\r", b"\x0c", b"\xc2\xa0", b",", b":", b"]"],
                        swap_true=True)


def fuzz_corpus() -> list[bytes]:
    vectors = simulator_vectors()
    return [orjson.dumps(d) for d in edge_vectors()] + [vectors[i] for i in range(0, len(vectors), 13)]


def test_mutation_fuzzer_agrees_with_pydantic(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = SlowSpy(monkeypatch, fast)
    rng = random.Random(20240611)
    mutator = Mutator(rng)
    corpus = fuzz_corpus()
    mutations = 20_000
    kinds = run_mutations(rng, corpus, structural=mutator.structural, mutate_bytes=mutator.bytewise,
                          agrees=assert_agrees, mutations=mutations, structural_share=0.85, indent_share=0.1)
    # The fuzzer must exercise all three outcomes, and the fast path must have accepted
    # a good share of the valid mutants by itself.
    assert kinds.get("ok", 0) > 2_000, kinds
    assert kinds.get("schema", 0) > 5_000, kinds
    assert kinds.get("malformed", 0) > 1_000, kinds
    fast_accepts = mutations - spy.calls
    assert fast_accepts > 1_000, (fast_accepts, kinds)
