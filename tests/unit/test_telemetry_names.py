"""Span and attribute names must come from contracts.telemetry (the registry)."""

from __future__ import annotations

import ast
from pathlib import Path

from contracts import telemetry

ROOT = Path(__file__).resolve().parents[2]
CODE_DIRS = ("services", "borgctl", "loadtests", "contracts")
SPAN_CALLS = {"start_as_current_span", "start_span"}


def _literal_keys(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Dict):
        return [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return []


def violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    bad: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in ("set_attribute", "set_attributes") and node.args:
            first = node.args[0]
            keys = (
                [first.value]
                if isinstance(first, ast.Constant) and isinstance(first.value, str)
                else _literal_keys(first)
            )
            bad += [f"{path.name}:{node.lineno} attribute {k!r}" for k in keys if k not in telemetry.SPAN_ATTRIBUTES]
        if name in SPAN_CALLS:
            for kw in node.keywords:
                if kw.arg == "attributes":
                    bad += [
                        f"{path.name}:{node.lineno} attribute {k!r}"
                        for k in _literal_keys(kw.value)
                        if k not in telemetry.SPAN_ATTRIBUTES
                    ]
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                span = node.args[0].value
                if span not in telemetry.SPAN_NAMES:
                    bad.append(f"{path.name}:{node.lineno} span name {span!r}")
    return bad


def test_code_uses_only_registered_names() -> None:
    found: list[str] = []
    for directory in CODE_DIRS:
        for path in (ROOT / directory).rglob("*.py"):
            found += violations(path)
    assert not found, "names missing from contracts/telemetry.py:\n" + "\n".join(found)


def test_checker_flags_unregistered_names(tmp_path: Path) -> None:
    sample = tmp_path / "s.py"
    sample.write_text(
        "span.set_attribute('made.up', 1)\n"
        "tracer.start_as_current_span('adhoc span', attributes={'borg.node.name': 'n', 'other.thing': 2})\n"
    )
    found = violations(sample)
    assert any("made.up" in v for v in found)
    assert any("other.thing" in v for v in found)
    assert any("adhoc span" in v for v in found)
    assert not any("borg.node.name" in v for v in found)
