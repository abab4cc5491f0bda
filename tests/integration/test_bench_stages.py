"""`borgctl bench stages` against the real broker with a tiny input: shape, counts and ratios (no timing)."""

from __future__ import annotations

import pytest

from loadtests.bench_stages import STAGES, TARGET_RATIO, _Sample, drain_window, run_stages

pytestmark = pytest.mark.integration

RECORDS = 6000
NODES = 500


def _trace(phases: list[tuple[int, int, float]]) -> list[_Sample]:
    """Samples every 25 ms from (polls, committed, child CPU share of a core) phases."""
    samples: list[_Sample] = []
    t = cpu = 0.0
    for polls, committed, share in phases:
        for _ in range(polls):
            t += 0.025
            cpu += 0.025 * share
            samples.append(_Sample(t, committed, cpu))
    return samples


def test_drain_window_skips_startup_and_the_idle_wait_for_the_last_commit() -> None:
    # start-up (busy), ready at poll 20, first commit at 40 with 100 of 1000 done, busy until 79,
    # a 10 ms blip while idle, the final commit at 120
    samples = _trace([(40, 0, 1.0), (40, 100, 0.9), (20, 100, 0.0), (1, 100, 0.4), (19, 100, 0.0), (1, 1000, 0.0)])
    assert drain_window(samples, 20, 1000) == (40, 79, "first-commit")
    # most of the input done by the first commit: the window starts at readiness
    late = _trace([(20, 0, 1.0), (20, 0, 0.9), (20, 900, 0.9), (40, 900, 0.0), (1, 1000, 0.0)])
    assert drain_window(late, 20, 1000) == (20, 59, "ready")
    # everything committed at once, still busy when the commit shows
    once = _trace([(20, 0, 1.0), (20, 0, 0.9), (1, 1000, 0.9)])
    assert drain_window(once, 20, 1000) == (20, 40, "ready")


async def test_stages_bench_drains_every_input_and_reports_the_shared_format(kafka_bootstrap: str) -> None:
    rows = await run_stages(kafka_bootstrap, records=RECORDS, nodes=NODES)

    for row in rows:
        assert set(row) == {"bench", "case", "offered", "metric", "value", "unit"}, row
        assert row["bench"] == "stages"
        assert isinstance(row["case"], str) and isinstance(row["metric"], str) and isinstance(row["unit"], str)
        assert isinstance(row["value"], float) and isinstance(row["offered"], int)
    by = {(r["case"], r["metric"]): r for r in rows}
    cases = list(dict.fromkeys(r["case"] for r in rows))
    assert cases[:4] == ["passthrough", "features", "regime", "anomaly"]
    assert cases[4:] in (["forecast"], ["risk", "forecast"])  # risk runs when models/failure loads
    assert set(cases) <= {"passthrough", *STAGES}

    # every stage drained exactly its input: the prefilled NodeState, then the FeatureVectors features wrote
    assert by["passthrough", "consumed"]["value"] == by["passthrough", "consumed"]["offered"] == RECORDS
    assert by["features", "consumed"]["value"] == by["features", "consumed"]["offered"] == RECORDS
    vectors = by["features", "produced"]["value"]
    assert 0 < vectors < RECORDS
    for case in cases[2:]:
        assert by[case, "consumed"]["value"] == vectors
        assert by[case, "consumed"]["offered"] == vectors

    ceiling = by["passthrough", "throughput"]["value"]
    assert ceiling > 0 and by["passthrough", "cpu_per_msg"]["value"] > 0
    for case in cases[1:]:
        throughput = by[case, "throughput"]["value"]
        # CPU time has 10 ms resolution: a stage draining a few hundred records can read 0
        assert throughput > 0 and by[case, "cpu_per_msg"]["value"] >= 0
        assert by[case, "throughput"]["unit"] == "msg/s" and by[case, "cpu_per_msg"]["unit"] == "µs"
        ratio = by[case, "vs_passthrough"]
        assert ratio["unit"] == "ratio" and ratio["value"] == pytest.approx(throughput / ceiling, abs=1e-4)
        met = by[case, "target_met"]
        assert met["unit"] == "bool" and met["value"] == (1.0 if ratio["value"] >= TARGET_RATIO else 0.0)
