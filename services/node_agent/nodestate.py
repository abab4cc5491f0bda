"""Building NodeState values as plain dicts (Counter-shaped counters) and encoding them.

Producers on the hot path build dicts and encode them with orjson directly; the
agent's 1 Hz path validates each one against ``contracts.models.NodeState`` first, and
tests prove the fast paths produce values that validate.
"""

from __future__ import annotations

from typing import Any, Final

import orjson
from opentelemetry import context as otel_context

from contracts import NodeState
from contracts.codec import validate_python
from contracts.headers import Headers, build_headers
from contracts.topics import Topic

TOPIC: Final = Topic.NODESTATE
CounterDict = dict[str, Any]


def counted(value: float, *, enabled_ns: int, running_ns: int | None = None, raw: float | None = None) -> CounterDict:
    """A counter with a number; ``multiplexed`` when it ran for less than it was enabled."""
    running = enabled_ns if running_ns is None else running_ns
    running = min(running, enabled_ns)
    return {
        "raw": raw,
        "value": value,
        "enabled_ns": enabled_ns,
        "running_ns": running,
        "status": "multiplexed" if running < enabled_ns else "counted",
    }


def without_number(status: str, *, enabled_ns: int = 0, running_ns: int = 0) -> CounterDict:
    """``not_supported`` / ``not_counted``: no value and no raw, ever."""
    if status not in ("not_supported", "not_counted"):
        raise ValueError(f"status {status!r} carries a number")
    return {
        "raw": None,
        "value": None,
        "enabled_ns": enabled_ns,
        "running_ns": min(running_ns, enabled_ns),
        "status": status,
    }


def nodestate_dict(
    *,
    node: str,
    ts_ms: int,
    seq: int,
    interval_ms: int,
    source: str,
    pmu: str,
    supported_events: list[str],
    counters: dict[str, CounterDict],
    cpu_util: float,
    mem_util: float,
    cpu_freq_mhz: float | None = None,
    metrics: dict[str, float] | None = None,
    cgroups: dict[str, dict[str, CounterDict]] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "node": node,
        "ts_ms": ts_ms,
        "seq": seq,
        "interval_ms": max(1, interval_ms),
        "source": source,
        "pmu": pmu,
        "supported_events": supported_events,
        "counters": counters,
        "cpu_util": min(max(cpu_util, 0.0), 1.0),
        "mem_util": min(max(mem_util, 0.0), 1.0),
    }
    if cpu_freq_mhz is not None:
        out["cpu_freq_mhz"] = cpu_freq_mhz
    if metrics:
        out["metrics"] = metrics
    if cgroups:
        out["cgroups"] = cgroups
    return out


def encode_fast(state: dict[str, Any]) -> bytes:
    """orjson bytes of a NodeState-shaped dict, no validation (hot path)."""
    return orjson.dumps(state)


def validate(state: dict[str, Any]) -> NodeState:
    """Validate a NodeState-shaped dict (raises contracts.ContractError naming the field)."""
    return validate_python(NodeState, state)


def headers(ctx: otel_context.Context | None = None) -> Headers:
    return build_headers(TOPIC, ctx)
