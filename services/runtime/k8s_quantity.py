"""Kubernetes resource quantities ("100m", "1.5", "128Mi", "1G", "1e3") as numbers.

Pure (no kubernetes_asyncio): shared by the cluster watcher, the referee, the extender and the agents.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

_SUFFIX: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([numkMGTPE]i?)?$")
MIB = 2**20
GIB = 2**30


def parse_quantity(value: str | int | float) -> float:
    """The quantity in base units (cores, bytes); ValueError for anything malformed."""
    if isinstance(value, int | float):
        return float(value)
    match = _QUANTITY.match(value.strip())
    if match is None or (match.group(2) or "") not in _SUFFIX:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation:
        raise ValueError(f"not a Kubernetes quantity: {value!r}") from None
    return float(number * _SUFFIX[match.group(2) or ""])


def format_mib(value_bytes: float) -> str:
    """Bytes as a whole number of MiB ("96Mi"), at least 1Mi."""
    return f"{max(1, int(value_bytes // MIB))}Mi"


def quantity_of(requests: Any, name: str, scale: float) -> int:
    """``requests[name]`` × ``scale`` as an int (0 when absent or unreadable)."""
    if not isinstance(requests, Mapping) or name not in requests:
        return 0
    try:
        return round(parse_quantity(requests[name]) * scale)
    except (TypeError, ValueError):
        return 0  # a request the API server accepted but we cannot read counts as unset


def pod_requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    """(milli-CPU, memory bytes) the scheduler reserves for the pod (0 = unset)."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return 0, 0

    def total(containers: Any) -> list[tuple[int, int]]:
        out = []
        for c in containers if isinstance(containers, list) else ():
            resources = c.get("resources") if isinstance(c, Mapping) else None
            requests = resources.get("requests") if isinstance(resources, Mapping) else None
            out.append((quantity_of(requests, "cpu", 1000), quantity_of(requests, "memory", 1)))
        return out

    app = total(spec.get("containers"))
    init = total(spec.get("initContainers"))
    cpu = max(sum(c for c, _ in app), max((c for c, _ in init), default=0))
    mem = max(sum(m for _, m in app), max((m for _, m in init), default=0))
    overhead = spec.get("overhead")
    return cpu + quantity_of(overhead, "cpu", 1000), mem + quantity_of(overhead, "memory", 1)
