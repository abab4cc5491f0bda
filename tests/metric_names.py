"""The Prometheus metric names the services export, and the ones a PromQL expression uses (for the
alert rules and the Grafana dashboard, whose expressions must name metrics that exist)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_DEFINED = re.compile(r"""(?:Counter|Gauge|Histogram|Info|PromCounter)\(\s*["'](borg_[a-z0-9_]+)["']""")
_CONSTANT = re.compile(r"""^[A-Z_]+\s*=\s*["'](borg_[a-z0-9_]+)["']""", re.MULTILINE)
_USED = re.compile(r"\b(borg_[a-z0-9_]+)\b")
_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_info", "_created")


def exported() -> set[str]:
    """Every ``borg_*`` metric a service defines (prometheus_client objects, or a module constant used as a
    collector's name, e.g. services/runtime/latency.py)."""
    names: set[str] = set()
    for path in (ROOT / "services").rglob("*.py"):
        text = path.read_text()
        names.update(_DEFINED.findall(text))
        names.update(_CONSTANT.findall(text))
    return names


def used(expr: str) -> set[str]:
    """The metric families a PromQL expression reads (``_bucket``/``_total``/… folded into the family)."""
    out = set()
    for name in _USED.findall(expr):
        for suffix in _SUFFIXES:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        out.add(name)
    return out


def missing(expr: str) -> set[str]:
    """Families the expression reads that no service exports (counters are defined with or without ``_total``)."""
    have = exported()
    folded = {n[: -len("_total")] if n.endswith("_total") else n for n in have} | have
    return {m for m in used(expr) if m not in folded}
