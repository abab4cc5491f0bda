"""`borgctl bench restore` against the real broker with a tiny state: the rows exist and are plausible."""

from __future__ import annotations

import pytest

from loadtests.bench_restore import restored_lines, run_restore

pytestmark = pytest.mark.integration

NODES = 300
SECONDS = 21


def test_restored_lines_reads_the_changelog_restore_log() -> None:
    text = (
        "2026-11-27 05:00:00,001 INFO features services.runtime.changelog: restored 300 keys from 1200 changelog "
        "records of b-borg-features-windows-changelog [0, 1, 2, 3, 4, 5] in 0.125s\n"
        "2026-11-27 05:00:00,002 INFO features x: partitions [0, 1] of nodestate.v1 assigned, state restored\n"
    )
    assert restored_lines(text) == [(300, 1200, "b-borg-features-windows-changelog", 0.125)]


async def test_restore_bench_measures_the_state_features_wrote(kafka_bootstrap: str) -> None:
    # features alone: each stage costs three starts, and the test must stay short
    rows = await run_restore(kafka_bootstrap, nodes=NODES, seconds=SECONDS, stages=("features",))

    for row in rows:
        assert row["bench"] == "restore" and isinstance(row["value"], float), row
    by = {(r["case"], r["metric"]): r["value"] for r in rows}
    assert by["machine", "load_avg_1m_before"] >= 0
    assert {r["case"] for r in rows} == {"machine", "features"}
    assert by["features", "nodes"] == NODES
    assert by["features", "restore_s"] > 0
    assert by["features", "ready_s"] > by["features", "restore_s"]
    for rss in ("rss_mib", "rss_idle_mib", "rss_drained_mib"):
        assert by["features", rss] > 0, rss
    # features keeps a record per node plus one per pane it holds, and restores every live key
    assert by["features", "changelog_records"] >= NODES
    assert by["features", "restored_keys"] >= NODES
    assert by["features", "changelog_mib"] > 0
