"""The Benefit panel's data: the latest ``borgctl eval arena`` results, policies side by side (pure).

Reads the bench-format document the arena writes (``{"machine": …, "results": [{"bench": "arena",
"case": <policy>, "metric": …, "value": …, "unit": …}, …]}``) and turns it into one table: a row per
metric, a column per policy, and each value's ratio to the ``kube-default`` policy (the plain
Kubernetes scheduler) where that has the metric. Nothing here knows the metric names: whatever the
arena measures is shown, in the order it wrote them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson

BASELINE = "kube-default"
MAX_BYTES = 8 * 2**20
"""A results file larger than this is refused (the arena writes a few kB)."""


class ArenaResultsError(ValueError):
    """The results file is missing or not what ``borgctl eval arena`` writes; the message names it."""


def results_file(path: Path) -> Path:
    """``path`` itself, or ``path/results.json`` when it is a directory (``--out DIR`` of the arena)."""
    return path / "results.json" if path.is_dir() else path


def arena_view(doc: Any, *, source: str) -> dict[str, Any]:
    """The table for the page from a parsed results document (``ArenaResultsError`` when it is not one)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise ArenaResultsError(f"{source}: expected an object with a 'results' list (borgctl eval arena --out DIR)")
    policies: list[str] = []
    metrics: list[str] = []
    units: dict[str, str] = {}
    values: dict[str, dict[str, float]] = {}
    for i, row in enumerate(doc["results"]):
        if not isinstance(row, dict) or row.get("bench") != "arena":
            continue
        case, metric, value = row.get("case"), row.get("metric"), row.get("value")
        if not isinstance(case, str) or not isinstance(metric, str):
            raise ArenaResultsError(f"{source}: results[{i}]: 'case' and 'metric' must be strings")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ArenaResultsError(f"{source}: results[{i}] ({case} {metric}): 'value' must be a number")
        if case not in policies:
            policies.append(case)
        if metric not in metrics:
            metrics.append(metric)
            units[metric] = str(row.get("unit") or "")
        values.setdefault(metric, {})[case] = float(value)
    if not policies:
        raise ArenaResultsError(f"{source}: no arena rows (bench 'arena') in it")
    table = []
    for metric in metrics:
        by_policy = values[metric]
        base = by_policy.get(BASELINE)
        ratios = {
            p: v / base
            for p, v in by_policy.items()
            if base is not None and base != 0 and math.isfinite(base) and math.isfinite(v)
        }
        table.append(
            {
                "metric": metric,
                "unit": units[metric],
                "values": {p: (v if math.isfinite(v) else None) for p, v in by_policy.items()},
                "vs_baseline": ratios,
            }
        )
    machine = doc.get("machine") if isinstance(doc.get("machine"), dict) else {}
    return {
        "source": source,
        "baseline": BASELINE if BASELINE in policies else None,
        "policies": policies,
        "table": table,
        "machine": machine,
        "meta": doc.get("meta") if isinstance(doc.get("meta"), dict) else {},
    }


def load_arena(path: Path | None) -> dict[str, Any]:
    """What ``GET /api/arena`` answers: ``{"available": false, "reason": …}`` or the view plus ``available``."""
    if path is None:
        return {"available": False, "reason": "no arena results configured (DASHBOARD_ARENA_RESULTS)"}
    file = results_file(path)
    try:
        size = file.stat().st_size
        if size > MAX_BYTES:
            raise ArenaResultsError(f"{file}: {size} bytes, more than an arena result ({MAX_BYTES} at most)")
        doc = orjson.loads(file.read_bytes())
    except FileNotFoundError:
        return {
            "available": False,
            "reason": f"{file} not found: run `borgctl eval arena --quick --out DIR` and point "
            "DASHBOARD_ARENA_RESULTS at DIR",
        }
    except (OSError, orjson.JSONDecodeError) as exc:
        return {"available": False, "reason": f"{file}: {exc}"}
    except ArenaResultsError as exc:
        return {"available": False, "reason": str(exc)}
    try:
        view = arena_view(doc, source=str(file))
    except ArenaResultsError as exc:
        return {"available": False, "reason": str(exc)}
    view["available"] = True
    view["mtime_ms"] = int(file.stat().st_mtime * 1000)
    return view
