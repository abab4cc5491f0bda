"""What the fast-decoder tests share (NodeState and FeatureVector): outcomes, the slow-path spy,
byte-level mutations and the mutation loop. The structural mutations, tokens and values stay
with each contract's tests: they are what differs."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import orjson
import pytest

from contracts import ContractError

TOKEN = b'"@@TOKEN@@"'
"""Placeholder a structural mutation leaves for a raw JSON token (one orjson cannot encode)."""
DUP = b'"@@DUP@@"'
"""Placeholder key a structural mutation leaves for a duplicate of an existing key."""


def outcome(fn: Callable[[bytes | None], Any], data: bytes | None) -> tuple[str, Any]:
    try:
        return "ok", fn(data)
    except ContractError as exc:
        return exc.kind, exc.message


class SlowSpy:
    """Counts the calls of ``module._slow`` (the pydantic fallback of a fast decoder)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> None:
        self.calls = 0
        original = module._slow

        def spy(data: bytes | None) -> Any:
            self.calls += 1
            return original(data)

        monkeypatch.setattr(module, "_slow", spy)


def random_value(rng: random.Random, values: Sequence[Any]) -> Any:
    """The token placeholder (a quarter of the time) or a fresh copy of one of ``values``."""
    if rng.random() < 0.25:
        return "@@TOKEN@@"
    value = rng.choice(values)
    return orjson.loads(orjson.dumps(value)) if isinstance(value, dict | list) else value


def bytewise(rng: random.Random, data: bytes, *, inserts: Sequence[bytes], swap_true: bool) -> bytes:
    """One byte-level mutation of encoded JSON (``swap_true``: also misspell a ``true``)."""
    op = rng.randrange(11 if swap_true else 10)
    i = rng.randrange(len(data) + 1)
    if op == 0:
        return data[:i]  # truncated
    if op == 1:
        return data[:i] + data[i + 1 :]
    if op == 2:
        return data[:i] + bytes([rng.randrange(256)]) + data[i + 1 :]
    if op == 3:
        return data[:i] + rng.choice(inserts) + data[i:]
    if op == 4:
        return data.replace(b".0,", b",")  # integral floats as JSON ints
    if op == 5:
        return data.replace(b'"n', b'"\\u006e', 1)  # an escape that changes nothing
    if op == 6:
        return rng.choice([b"\xef\xbb\xbf", b" ", b"[", b"x"]) + data
    if op == 7:
        return data + rng.choice([b" ", b"\n", b"x", b"}", b"\x00", b",{}"])
    if op == 8:
        return rng.choice([b"NaN", b"not json", b"", b"[]", b"1", b'"x"', b"{}", b"null"])
    if op == 9 and swap_true:
        return data.replace(b"true", rng.choice([b"1", b"True", b"tru", b"false", b"null"]), 1)
    return data.replace(b'"', b"'", 1)


def run_mutations(
    rng: random.Random,
    corpus: Sequence[bytes],
    *,
    structural: Callable[[Any], tuple[Any, bytes, bytes]],
    mutate_bytes: Callable[[bytes], bytes],
    agrees: Callable[[bytes | None], str],
    mutations: int,
    structural_share: float,
    indent_share: float = 0.0,
) -> dict[str, int]:
    """``mutations`` mutants of the corpus through ``agrees``; returns how many of each outcome kind.

    A mutant is structural (the parsed value changed, then encoded with its token and
    duplicate key spliced in, sometimes indented, sometimes also mutated bytewise) or bytewise.
    """
    kinds: dict[str, int] = {}
    done = 0
    while done < mutations:
        doc = orjson.loads(rng.choice(corpus))
        if rng.random() < structural_share:
            doc, token, dup_key = structural(doc)
            option = orjson.OPT_INDENT_2 if indent_share and rng.random() < indent_share else None
            try:
                data = orjson.dumps(doc, option=option)
            except TypeError:  # an int past 64 bits (those are spliced in as tokens instead)
                continue
            data = data.replace(TOKEN, token)
            if dup_key:
                data = data.replace(DUP, b'"' + dup_key + b'"')
            if rng.random() < 0.1:
                data = mutate_bytes(data)
        else:
            data = mutate_bytes(orjson.dumps(doc))
        kind = agrees(data)
        kinds[kind] = kinds.get(kind, 0) + 1
        done += 1
    return kinds
