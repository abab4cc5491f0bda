"""Real Kafka, the real drift process and the shipped failure model's card: concept drift from delayed labels.

Generated traffic (``loadtests/concept_traffic.py``): one task scheduled per second with a risk.v2
task record in the shipped failure model's version, then its outcome on taskevents.v1. For the
first 900 s the outcomes agree with the predictions, for the next 900 s they contradict them.
The drift process is stopped after the first part and started again (its matured labels and
pending predictions come back from the changelog). Asserted: while only agreeing labels have
matured every concept claim is ``no_drift`` (and there are some); once the contradicted
predictions fill the window it is ``drift`` with the 5-minute horizon named.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from contracts.base import Contract
from contracts.models import DriftReport
from contracts.topics import DRIFT_TOPIC
from loadtests.concept_traffic import START_MS, traffic
from tests.integration.test_stream_pipeline import collector, running, spawn, wait_ready
from tests.kafka_helpers import produce_contracts

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
PHASE_S, RESTART_AT_S = 900, 1000
ENV = {"DRIFT_REPORT_EVERY_S": "30", "DRIFT_CONCEPT_WINDOW_S": "600", "DRIFT_CONCEPT_MIN_LABELS": "600",
       "DRIFT_CONCEPT_GRACE_S": "10", "DRIFT_CONCEPT_SAMPLE_S": "0", "STREAM_BATCH_MAX": "2000"}


def _s(ts_ms: int) -> float:
    return (ts_ms - START_MS) / 1000


async def _produce(bootstrap: str, prefix: str, items: list[tuple[int, str, str, Contract]]) -> None:
    """(ts, topic, key, record) in event-time order, 60 s of traffic at a time (both topics about level)."""
    i = 0
    while i < len(items):
        j = i
        while j < len(items) and items[j][0] - items[i][0] < 60_000:
            j += 1
        for topic in ("taskevents.v1", "risk.v2"):
            chunk = [(key, rec) for _, t, key, rec in items[i:j] if t == topic]
            if chunk:
                await produce_contracts(bootstrap, prefix, topic, chunk)
        i = j
        await asyncio.sleep(0.05)


async def test_concept_drift_when_labels_contradict_predictions_and_not_when_they_agree(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    version = (ROOT / "models" / "failure" / "CURRENT").read_text().strip()
    agree = traffic(tasks=2 * PHASE_S, agree=True, version=version, seed=31, every_s=0.5, tail_s=0, prefix="a")
    wrong = traffic(tasks=2 * PHASE_S, agree=False, version=version, seed=32, t0_s=PHASE_S, every_s=0.5,
                    tail_s=330, prefix="b")
    items: list[tuple[int, str, str, Contract]] = sorted(
        [(e.ts_ms, "taskevents.v1", e.task_id, e) for e in agree.events + wrong.events]
        + [(r.ts_ms, "risk.v2", f"task:{r.target}", r) for r in agree.risks + wrong.risks],
        key=lambda x: (x[0], x[1] == "risk.v2"))
    cut = START_MS + RESTART_AT_S * 1000
    first, second = [x for x in items if x[0] < cut], [x for x in items if x[0] >= cut]
    end_ms = items[-1][0]
    async with collector(kafka_bootstrap, topic_prefix, [DRIFT_TOPIC]) as (got, poll_until):

        def failure_reports() -> list[DriftReport]:
            return sorted((r for r in got.values(DRIFT_TOPIC, DriftReport) if r.model == "failure"),
                          key=lambda r: r.ts_ms)

        drift = spawn("drift", kafka_bootstrap, topic_prefix, tmp_path, **ENV)
        with running(drift):
            await wait_ready((drift,))
            await _produce(kafka_bootstrap, topic_prefix, first)
            await poll_until(lambda g: any(r.ts_ms >= cut - 31_000 for r in failure_reports()), 60,
                             "reports on the first part")
        drift = spawn("drift", kafka_bootstrap, topic_prefix, tmp_path, **ENV)
        with running(drift):
            await wait_ready((drift,))
            await _produce(kafka_bootstrap, topic_prefix, second)
            await poll_until(lambda g: any(r.ts_ms >= end_ms - 31_000 for r in failure_reports()), 60,
                             "a report on the end of the traffic")
    reports = failure_reports()
    print("\n" + "\n".join(f"t={_s(r.ts_ms):5.0f}s concept={r.concept_status} "
                           + " ".join(f"{c.horizon_s}s:n={c.labels},aucpr={c.aucpr},brier={c.brier}" for c in r.concept)
                           for r in reports[::2]))
    assert all(r.concept_status is not None and len(r.concept) == 3 for r in reports)
    # the first 600 s: fewer matured labels than a claim needs (600 need 300 s of predictions + 310 s)
    assert all(r.concept_status == "insufficient_data" for r in reports if _s(r.ts_ms) < 600)
    # while only agreeing predictions have matured (a contradicted one matures 310 s after 900 s)
    calm = [r for r in reports if _s(r.ts_ms) < PHASE_S + 310 and r.concept_status != "insufficient_data"]
    assert calm and all(r.concept_status == "no_drift" for r in calm), [(r.ts_ms, r.reasons) for r in calm]
    # the restarted process continued from the changelog: its first report already counts matured labels
    after = [r for r in reports if r.ts_ms >= cut]  # the first process saw nothing from the cut on
    assert after and after[0].concept[0].labels >= 600, after[0].concept
    # the window (600 s) holds only contradicted predictions from 900 + 310 + 600 s on
    late = [r for r in reports if _s(r.ts_ms) >= PHASE_S + 310 + 600]
    assert late and all(r.concept_status == "drift" and r.status == "drift" for r in late), \
        [(r.ts_ms, r.reasons) for r in late]
    h5 = late[-1].concept[0]
    assert h5.horizon_s == 300 and h5.status == "drift" and h5.reference_aucpr is not None
    assert any("300s" in reason and "concept" in reason for reason in late[-1].reasons)
