"""Topic names come from ``contracts.topics.Topic``: the registry and the constants agree, and code
outside contracts names no topic by a string literal."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

from contracts.topics import TOPICS, Topic, topic_names, topic_spec

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("services", "borgctl", "loadtests", "simulator", "training", "featurelib")


def literal_topics(path: Path) -> list[tuple[int, str]]:
    names = set(topic_names())
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.STRING and tok.string[:1] in "\"'" and tok.string[1:-1] in names:
            found.append((tok.start[0], tok.string))
    return found


def test_the_constants_are_the_registry() -> None:
    assert sorted(topic_names()) == sorted(spec.name for spec in TOPICS)
    assert len(set(topic_names())) == len(topic_names())
    assert topic_spec(Topic.REGIMES).name == "regimes.v2"
    assert f"p-{Topic.NODESTATE}" == "p-nodestate.v1"  # plain str: prefixes, headers, orjson as before


def test_no_topic_literal_outside_contracts() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for package in CHECKED
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, text in literal_topics(path)
    ]
    assert not offenders, "use contracts.topics.Topic:\n" + "\n".join(offenders)


def test_the_check_sees_a_literal(tmp_path: Path) -> None:
    bad = tmp_path / "x.py"
    bad.write_text('TOPIC = "features.v1"\nDOC = """features.v1 in prose is fine"""\n')
    assert literal_topics(bad) == [(1, '"features.v1"')]
