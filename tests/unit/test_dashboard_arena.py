"""The dashboard's Benefit panel data: arena results (bench format) as policies side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from services.dashboard.arena import MAX_BYTES, arena_view, load_arena


def row(case: str, metric: str, value: float, unit: str = "") -> dict[str, Any]:
    return {"bench": "arena", "case": case, "metric": metric, "value": value, "unit": unit}


def doc(*rows: dict[str, Any]) -> dict[str, Any]:
    return {"machine": {"cpus": 2, "commit": "abc1234"}, "results": list(rows)}


def test_policies_side_by_side_with_ratios_to_kube_default() -> None:
    view = arena_view(
        doc(
            row("kube-default", "slo_violation_task_s", 200.0, "s"),
            row("random", "slo_violation_task_s", 300.0, "s"),
            row("extender", "slo_violation_task_s", 120.0, "s"),
            row("kube-default", "mean_cpu_utilisation", 0.5, "ratio"),
            row("extender", "mean_cpu_utilisation", 0.55, "ratio"),
            {"bench": "stages", "case": "features", "metric": "throughput", "value": 1.0, "unit": "msg/s"},
        ),
        source="r.json",
    )
    assert view["policies"] == ["kube-default", "random", "extender"]
    assert view["baseline"] == "kube-default"
    slo, util = view["table"]
    assert slo["metric"] == "slo_violation_task_s" and slo["unit"] == "s"
    assert slo["values"] == {"kube-default": 200.0, "random": 300.0, "extender": 120.0}
    assert slo["vs_baseline"] == {"kube-default": 1.0, "random": 1.5, "extender": 0.6}
    # a policy without the metric has no value and no ratio (not a zero)
    assert util["values"] == {"kube-default": 0.5, "extender": 0.55}
    assert util["vs_baseline"]["extender"] == pytest.approx(1.1)
    assert view["machine"]["commit"] == "abc1234"


def test_without_kube_default_there_are_no_ratios_and_a_zero_baseline_divides_nothing() -> None:
    view = arena_view(doc(row("random", "evictions", 3.0)), source="r.json")
    assert view["baseline"] is None and view["table"][0]["vs_baseline"] == {}
    zero = arena_view(doc(row("kube-default", "evictions", 0.0), row("random", "evictions", 2.0)), source="r.json")
    assert zero["table"][0]["vs_baseline"] == {}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([], "r.json: expected an object with a 'results' list"),
        ({"results": {}}, "r.json: expected an object with a 'results' list"),
        (doc(), "r.json: no arena rows (bench 'arena') in it"),
        (doc({"bench": "arena", "case": 1, "metric": "m", "value": 1}), "r.json: results[0]: 'case' and 'metric'"),
        (
            doc(row("kube-default", "m", 1.0), {"bench": "arena", "case": "x", "metric": "m", "value": "1"}),
            "r.json: results[1] (x m): 'value' must be a number",
        ),
        (doc({"bench": "arena", "case": "x", "metric": "m", "value": True}), "r.json: results[0] (x m): 'value'"),
    ],
)
def test_a_document_that_is_not_arena_results_is_refused_naming_the_row(bad: Any, message: str) -> None:
    from services.dashboard.arena import ArenaResultsError

    with pytest.raises(ArenaResultsError) as caught:
        arena_view(bad, source="r.json")
    assert str(caught.value).startswith(message)


def test_load_reads_a_file_or_the_arena_out_directory(tmp_path: Path) -> None:
    out = tmp_path / "arena-run"
    out.mkdir()
    (out / "results.json").write_bytes(orjson.dumps(doc(row("kube-default", "nodes_used", 20.0))))
    for path in (out, out / "results.json"):
        view = load_arena(path)
        assert view["available"] is True
        assert view["source"] == str(out / "results.json") and view["mtime_ms"] > 0


def test_load_says_why_nothing_is_shown(tmp_path: Path) -> None:
    assert load_arena(None) == {"available": False, "reason": "no arena results configured (DASHBOARD_ARENA_RESULTS)"}
    missing = load_arena(tmp_path / "nope.json")
    assert missing["available"] is False and "nope.json not found: run `borgctl eval arena" in missing["reason"]
    broken = tmp_path / "broken.json"
    broken.write_bytes(b'{"results": [')
    assert load_arena(broken)["available"] is False and str(broken) in load_arena(broken)["reason"]
    huge = tmp_path / "huge.json"
    huge.write_bytes(b" " * (MAX_BYTES + 1))
    assert "more than an arena result" in load_arena(huge)["reason"]
    wrong = tmp_path / "wrong.json"
    wrong.write_bytes(orjson.dumps(doc()))
    assert load_arena(wrong) == {"available": False, "reason": f"{wrong}: no arena rows (bench 'arena') in it"}
