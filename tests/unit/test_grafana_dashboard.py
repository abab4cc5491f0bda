"""deploy/grafana/borg-orchestrator.json: a loadable dashboard whose every query names exported metrics."""

from __future__ import annotations

import json
from pathlib import Path

from tests.metric_names import missing, used

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "borg-orchestrator.json"


def test_dashboard_panels_are_laid_out_without_overlap_and_query_exported_metrics() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] == "borg-orchestrator" and doc["schemaVersion"] >= 36
    variables = {v["name"] for v in doc["templating"]["list"]}
    assert variables == {"datasource", "namespace"}
    panels = doc["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        assert p["datasource"]["uid"] == "${datasource}"
        for target in p["targets"]:
            expr = target["expr"]
            assert used(expr), (p["title"], expr)
            assert not missing(expr), f"{p['title']}: {missing(expr)} is exported by no service"
            assert '$namespace"' in expr, f"{p['title']}: not filtered by the namespace variable"
    titles = " ".join(p["title"] for p in panels).lower()
    for topic in ("lag", "throughput", "p99", "dead letters", "decisions"):
        assert topic in titles, topic


def test_metric_names_helper_catches_a_missing_metric() -> None:
    assert missing("rate(borg_no_such_metric_total[5m])") == {"borg_no_such_metric"}
    assert missing("histogram_quantile(0.99, rate(borg_stage_latency_seconds_bucket[5m]))") == set()
