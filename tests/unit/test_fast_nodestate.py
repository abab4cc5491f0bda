"""The orjson fast path for NodeState agrees with the pydantic contract, value for value.

``decode_nodestate_dict`` must accept exactly what ``decode(NodeState, ...)`` accepts,
raise the very same ``ContractError`` otherwise, and return ``model_dump()``'s dict
(floats as floats). The mutation fuzzer below is the proof that a fast accept is
never a pydantic reject.
"""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

import contracts.fast.nodestate as fast
from contracts import NodeState, decode
from contracts.base import MAX_TS_MS, MIN_TS_MS
from contracts.fast.nodestate import decode_nodestate_dict
from services.node_agent.nodestate import counted, nodestate_dict, without_number
from services.node_agent.recorded import alibaba_nodestate, parse_alibaba_line
from simulator import SyntheticCluster
from tests.unit.decoder_fuzz import SlowSpy, bytewise, outcome, random_value, run_mutations

TS = 1_700_000_000_000


# ------------------------------------------------------------------ helpers
def same(a: Any, b: Any) -> bool:
    """Equal values of equal types (so 1 != 1.0 here), floats down to the sign of zero."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return bool(a == b)


def reference(data: bytes | None) -> Any:
    return decode(NodeState, data).model_dump()


def assert_agrees(data: bytes | None) -> str:
    """Assert the fast path and pydantic agree on ``data``; return the outcome kind."""
    want = outcome(reference, data)
    got = outcome(decode_nodestate_dict, data)
    if want[0] == "ok":
        assert got[0] == "ok", (data, got)
        assert same(got[1], want[1]), data
    else:
        assert got == want, data
    return want[0]


# ------------------------------------------------------------------ valid messages
def simulator_messages() -> Iterator[dict[str, Any]]:
    for seed in (1, 2, 3):
        sim = SyntheticCluster(nodes=10, seed=seed)
        for batch in sim.run(10):
            yield from batch.nodestate_dicts(ts_ms=TS)
    sim = SyntheticCluster(nodes=12, seed=4, missing_event_prob=0.6, multiplex_prob=0.6)
    for batch in sim.run(8):
        yield from batch.nodestate_dicts(ts_ms=TS, seq_offset=1 << 40)


def node_agent_messages() -> list[dict[str, Any]]:
    counters = {
        "cycles": counted(1_000_000, enabled_ns=1_000_000_000),  # ints, as read from perf
        "instructions": counted(2.5e6, enabled_ns=1_000_000_000, running_ns=400_000_000, raw=1e6),
        "cache-misses": without_number("not_supported"),
        "LLC-loads": without_number("not_counted", enabled_ns=5, running_ns=9),
        "cpu_core/r0280:k/": counted(0, enabled_ns=0),
    }
    groups = {
        "pod-a": {"cycles": counted(12.5, enabled_ns=10)},
        "kubepods/burstable/pod-b": {"cycles": without_number("not_counted"), "instructions": counted(7, enabled_ns=3)},
    }
    alibaba = parse_alibaba_line("m_1932,386640,41,92,1.5,0.25,4.02,3.2,5\n", "machine_usage.csv", 1)
    sparse = parse_alibaba_line("m_2,10,0,100,,,,,-1\n", "machine_usage.csv", 2)
    return [
        nodestate_dict(
            node="worker-1.example.internal",
            ts_ms=TS,
            seq=0,
            interval_ms=1000,
            source="perf_event",
            pmu="hardware",
            supported_events=list(counters),
            counters=counters,
            cpu_util=1,
            mem_util=0,
            cpu_freq_mhz=2400,
            cgroups=groups,
        ),
        nodestate_dict(
            node="n",
            ts_ms=MIN_TS_MS,
            seq=2**63,
            interval_ms=3_600_000,
            source="software",
            pmu="software",
            supported_events=[],
            counters={},
            cpu_util=0.0,
            mem_util=1.0,
        ),
        alibaba_nodestate(alibaba, seq=3, ts_ms=MAX_TS_MS, interval_ms=10_000),
        alibaba_nodestate(sparse, seq=4, ts_ms=TS, interval_ms=10_000),
        {  # the shape of tests/unit/test_contracts.py's fixture
            "node": "node-1",
            "ts_ms": 1_764_000_000_000,
            "seq": 7,
            "interval_ms": 1000,
            "source": "synthetic",
            "pmu": "recorded",
            "supported_events": ["cycles", "instructions"],
            "counters": {
                "cycles": {
                    "raw": 500.0,
                    "value": 1000.0,
                    "enabled_ns": 1000,
                    "running_ns": 500,
                    "status": "multiplexed",
                },
                "instructions": {"status": "not_supported"},
            },
            "cpu_util": 0.5,
            "mem_util": 0.25,
            "metrics": {"mkpi": 1.5, "mem_gps": 0},
        },
        {  # every default at once
            "node": "é" * 253,
            "ts_ms": TS,
            "seq": 0,
            "interval_ms": 1,
            "source": "replay_perfstat",
            "pmu": "recorded",
            "supported_events": ["", "x", "x"],
            "counters": {"a": {"value": 1}, "b": {"status": "not_counted"}, "c": {"raw": None, "value": 0.0}},
            "cpu_util": 0.5,
            "mem_util": 0.5,
            "cpu_freq_mhz": None,
            "cgroups": {"p": {}},
        },
    ]


def test_fast_path_matches_the_pinned_model() -> None:
    assert fast.SCHEMA_MATCHES, (
        "NodeState changed: update contracts/fast/nodestate.py's checks, then PINNED_SCHEMA_SHA256 "
        f"= {fast.schema_sha256()!r}"
    )


def test_simulator_messages_decode_like_pydantic_without_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = SlowSpy(monkeypatch, fast)
    count = 0
    for state in simulator_messages():
        data = orjson.dumps(state)
        got = decode_nodestate_dict(data)
        assert same(got, NodeState.model_validate_json(data).model_dump())
        count += 1
    assert count >= 350
    assert spy.calls == 0


def test_node_agent_shapes_decode_like_pydantic_without_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = SlowSpy(monkeypatch, fast)
    for state in node_agent_messages():
        data = orjson.dumps(state)
        assert same(decode_nodestate_dict(data), NodeState.model_validate_json(data).model_dump())
        # pretty-printed JSON is the same value
        pretty = orjson.dumps(state, option=orjson.OPT_INDENT_2)
        assert same(decode_nodestate_dict(pretty), NodeState.model_validate_json(data).model_dump())
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
    ],
)
def test_rejections_are_the_normal_paths(data: bytes | None, kind: str) -> None:
    assert assert_agrees(data) == kind


def test_orjson_never_yields_non_finite_floats() -> None:
    # The fast checks test only the sign of floats because of this.
    for token in (b"NaN", b"Infinity", b"-Infinity", b"1e309", b"-1e309", b"1" + b"0" * 400):
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(b"[" + token + b"]")


def _base() -> dict[str, Any]:
    return node_agent_messages()[0]


def _with_token(state: dict[str, Any], path: tuple[str, ...], token: bytes) -> bytes:
    obj: Any = state
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = "@@TOKEN@@"
    return orjson.dumps(state).replace(b'"@@TOKEN@@"', token)


@pytest.mark.parametrize(
    ("path", "token", "kind"),
    [
        (("seq",), b"1.0", "schema"),  # no float for an int field, even integral
        (("seq",), b"1e0", "schema"),
        (("seq",), b"true", "schema"),  # bool is not int
        (("seq",), b"-0", "ok"),
        (("seq",), b"%d" % 2**64, "ok"),  # orjson gives a float: pydantic decides, and accepts
        (("seq",), b"%d" % 2**70, "ok"),
        (("cpu_util",), b"1", "ok"),  # int for a float field is fine in strict JSON mode
        (("cpu_util",), b"true", "schema"),
        (("cpu_util",), b"NaN", "schema"),  # pydantic parses NaN and rejects it as a value
        (("cpu_util",), b"1e400", "schema"),
        (("cpu_freq_mhz",), b"%d" % 2**70, "ok"),
        (("cpu_freq_mhz",), b"%d" % (2**64 - 1), "ok"),
        (("cpu_freq_mhz",), b"null", "ok"),
        (("cpu_freq_mhz",), b"-0.0", "ok"),
        (("cpu_freq_mhz",), b"-1e-400", "ok"),
        (("node",), b'"\\ud800"', "malformed"),
        (("node",), b'"\\ud83d\\ude00"', "ok"),
        (("node",), b'"' + "😀".encode() * 253 + b'"', "ok"),  # code points, not bytes
        (("node",), b'"' + "😀".encode() * 254 + b'"', "schema"),
        (("counters", "cycles", "enabled_ns"), b"1.0", "schema"),
        (("counters", "cycles", "value"), b"-0", "ok"),
        (("metrics",), b'{"m":1,"m":2}', "ok"),  # duplicate keys: last wins
        (("metrics",), b'{"m":-1,"m":2}', "schema"),  # ... but pydantic validates the first too
        (("counters",), b'{"a":{"value":null},"a":{"value":1}}', "schema"),
        (("cgroups",), b'{"p":{"c":{"raw":-1,"raw":1,"value":1}}}', "ok"),  # a model's field: last wins
    ],
)
def test_strict_json_rules(path: tuple[str, ...], token: bytes, kind: str) -> None:
    assert assert_agrees(_with_token(_base(), path, token)) == kind


def _float_tokens(rng: random.Random) -> Iterator[bytes]:
    for _ in range(400):
        x = abs(rng.choice([rng.random(), rng.uniform(0, 1e12), math.ldexp(rng.random(), rng.randint(-1074, 1023))]))
        yield repr(x).encode()
        yield b"%.17g" % x
        yield b"%.25e" % x
        yield b"%.3E" % x
        yield (b"%.40f" % x).rstrip(b"0").rstrip(b".") or b"0"
        yield b"%d" % rng.randint(0, 2**64 - 1)
        yield b"%d" % rng.randint(2**64, 2**80)


def test_float_spellings_parse_to_the_same_double() -> None:
    rng = random.Random(11)
    state = node_agent_messages()[4]
    for token in _float_tokens(rng):
        data = _with_token(state, ("counters", "cycles", "value"), token)
        assert assert_agrees(data) == "ok", token
        data = _with_token(state, ("metrics", "mkpi"), token)
        assert assert_agrees(data) == "ok", token


# ------------------------------------------------------------------ mutation fuzzer
_UNSET = object()
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
    b"nul",
    b'"\\u0041"',
    b'"\\ud800"',
    b'"a\\"b"',
    b'"\\n"',
    b'"\x01"',
    b'"\xff"',
    b"[1,]",
    b"{}",
    b"[]",
    b'{"a":1,"a":2}',
]
VALUES: list[Any] = [
    None,
    True,
    False,
    "",
    "x",
    "counted",
    "multiplexed",
    "not_counted",
    "not_supported",
    "bogus",
    "synthetic",
    "hardware",
    "a" * 253,
    "a" * 254,
    0,
    1,
    -1,
    2,
    7,
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
    3_600_000,
    3_600_001,
    [],
    ["a"],
    [1],
    [None],
    {},
    {"a": 1},
    {"value": 1.0},
    {"status": "not_supported"},
    {"raw": 1.0, "value": 2.0, "enabled_ns": 5, "running_ns": 5, "status": "counted"},
    {"x": {"value": 1.0}},
]
FIELDS = list(NodeState.model_fields)
KEYS = ["node", "seq", "counters", "metrics", "cgroups", "raw", "value", "status", "enabled_ns", "extra", "", "cycles"]


def _dicts(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    if isinstance(obj, dict):
        yield path, obj
        for k, v in obj.items():
            yield from _dicts(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _dicts(v, (*path, i))


def _slots(obj: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) whose value can be replaced."""
    out: list[tuple[Any, Any]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append((obj, k))
            out.extend(_slots(v))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.append((obj, i))
            out.extend(_slots(v))
    return out


def _random_value(rng: random.Random) -> Any:
    return random_value(rng, VALUES)


class Mutator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def structural(self, state: dict[str, Any]) -> tuple[dict[str, Any], bytes, bytes]:
        """Mutate the parsed value; return it with a raw token and a duplicate key to splice in."""
        rng = self.rng
        token = rng.choice(TOKENS)
        dup_key = b""
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            op = rng.randrange(9)
            slots = _slots(state)
            dicts = list(_dicts(state))
            if op == 0 and slots:  # replace a value with one of another type, often a field's
                if rng.random() < 0.5:
                    container, key = state, rng.choice(FIELDS)
                else:
                    container, key = rng.choice(slots)
                container[key] = _random_value(rng)
            elif op == 1 and slots:  # drop a key / list item
                container, key = rng.choice(slots)
                del container[key]
            elif op == 2:  # add a key, known or not
                _, d = rng.choice(dicts)
                d[rng.choice(KEYS)] = _random_value(rng)
            elif op == 3:  # counter semantics: status/value/raw/running mismatches
                counters = [c for p, c in dicts if len(p) in (2, 3) and p[0] in ("counters", "cgroups")]
                if counters:
                    c = rng.choice(counters)
                    field = rng.choice(["status", "value", "raw", "running_ns", "enabled_ns"])
                    if field == "status":
                        c[field] = rng.choice(["counted", "multiplexed", "not_counted", "not_supported", "Counted"])
                    elif field in ("value", "raw"):
                        c[field] = rng.choice([None, 0, 3, 2.5, -1.0])
                    else:
                        other = c.get("enabled_ns" if field == "running_ns" else "running_ns", 0)
                        other = other if type(other) is int and other < 2**63 else 0
                        c[field] = other + rng.choice((-1, 0, 1))
            elif op == 4:  # top-level fields out of range
                field, value = rng.choice(
                    [
                        ("ts_ms", MIN_TS_MS - 1),
                        ("ts_ms", MAX_TS_MS + 1),
                        ("ts_ms", TS * 1000),
                        ("interval_ms", 0),
                        ("interval_ms", 3_600_001),
                        ("seq", -1),
                        ("cpu_util", 1.0000001),
                        ("mem_util", -0.0),
                        ("node", ""),
                        ("node", "n" * 254),
                        ("node", "n" * 253),
                        ("source", "carrier-pigeon"),
                        ("pmu", "Hardware"),
                        ("cpu_freq_mhz", -1.0),
                    ]
                )
                state[field] = value
            elif op == 5:  # nested cgroups
                groups = state.setdefault("cgroups", {})
                if isinstance(groups, dict):
                    groups[rng.choice(["p1", "p2"])] = rng.choice(
                        [{}, {"cycles": {"value": 1}}, {"cycles": {"value": None}}, {"c": {"status": "x"}}, [], None]
                    )
            elif op == 6:  # metrics
                metrics = state.setdefault("metrics", {})
                if isinstance(metrics, dict):
                    metrics[rng.choice(["mkpi", "m"])] = rng.choice([0, 1.5, -1, None, "1", 2**70, True])
            elif op == 7:  # a duplicate key, spliced in after encoding
                _, d = rng.choice(dicts)
                if d:
                    dup_key = rng.choice(list(d)).encode()
                    if rng.random() < 0.5:  # the duplicate before the original
                        items = list(d.items())
                        d.clear()
                        d["@@DUP@@"] = _random_value(rng)
                        d.update(items)
                    else:
                        d["@@DUP@@"] = rng.choice([_random_value(rng), d[dup_key.decode()]])
            else:  # ints for floats, floats for ints
                slots_ = [(c, k) for c, k in slots if isinstance(c[k], int | float) and not isinstance(c[k], bool)]
                if slots_:
                    container, key = rng.choice(slots_)
                    v = container[key]
                    container[key] = float(v) if isinstance(v, int) else int(v)
        return state, token, dup_key

    def bytewise(self, data: bytes) -> bytes:
        return bytewise(self.rng, data, inserts=[b" ", b"\n", b"\t", b"\r", b"\x0c", b"\xc2\xa0", b",", b":"],
                        swap_true=False)


def fuzz_corpus() -> list[dict[str, Any]]:
    corpus = node_agent_messages()
    sims = list(simulator_messages())
    corpus += [sims[i] for i in range(0, len(sims), 37)]
    return corpus


def test_mutation_fuzzer_agrees_with_pydantic(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = SlowSpy(monkeypatch, fast)
    rng = random.Random(20240601)
    mutator = Mutator(rng)
    corpus = [orjson.dumps(s) for s in fuzz_corpus()]
    mutations = 25_000
    kinds = run_mutations(rng, corpus, structural=mutator.structural, mutate_bytes=mutator.bytewise,
                          agrees=assert_agrees, mutations=mutations, structural_share=0.8)
    # The fuzzer must exercise all three outcomes, and the fast path must have accepted
    # a good share of the valid mutants by itself.
    assert kinds.get("ok", 0) > 2_000, kinds
    assert kinds.get("schema", 0) > 5_000, kinds
    assert kinds.get("malformed", 0) > 1_000, kinds
    fast_accepts = mutations - spy.calls
    assert fast_accepts > 1_000, (fast_accepts, kinds)
