"""Concept drift of the failure model (pure logic): labels from task events, online AUCPR / Brier, the verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from sklearn.metrics import average_precision_score

from contracts import decode, encode
from contracts.models import DriftReport, FailureRiskV2, TaskEvent
from loadtests.concept_traffic import HORIZONS_S, START_MS, traffic
from services.drift.concept import (
    EVENT_CODES,
    ConceptConfig,
    ConceptReference,
    ConceptTracker,
    average_precision,
    concept_reference,
    outcome,
)
from services.drift.concept_state import ConceptState
from tests.unit.standins import Msg

ROOT = Path(__file__).resolve().parents[2]
FAIL = frozenset({3})
H5 = 300_000


def card(aucpr: float = 0.5, brier: float = 0.03, rate: float = 0.07) -> dict[str, Any]:
    return {"version": "f1", "label": {"horizons_s": list(HORIZONS_S), "failure_types": [3]},
            "metrics": {"horizons": {f"{h}s": {"model": {"aucpr": aucpr}, "calibration": {"brier": brier},
                                               "positive_rate": rate} for h in HORIZONS_S}}}


def reference(**kw: float) -> ConceptReference:
    ref = concept_reference(card(**kw), "f1")
    assert isinstance(ref, ConceptReference)
    return ref


CONFIG = ConceptConfig(window_ms=3_600_000, grace_ms=10_000, sample_gap_ms=0, min_labels=300, min_positives=10)


def feed(tracker: ConceptTracker, *, tasks: int, agree: bool, seed: int, t0_s: float = 0.0, prefix: str = "t",
         tail_s: float = 330.0) -> None:
    t = traffic(tasks=tasks, agree=agree, version="f1", seed=seed, t0_s=t0_s, prefix=prefix, tail_s=tail_s)
    items: list[tuple[int, int, TaskEvent | FailureRiskV2]] = [(e.ts_ms, 0, e) for e in t.events]
    items += [(r.ts_ms, 1, r) for r in t.risks]
    for _, _, item in sorted(items, key=lambda x: (x[0], x[1])):
        if isinstance(item, TaskEvent):
            tracker.add_event(item.task_id, item.ts_ms, EVENT_CODES.get(item.event, -1))
        else:
            tracker.add_prediction(item.target, item.ts_ms, [h.probability for h in item.horizons])
        tracker.mature()


def test_average_precision_matches_sklearn_with_ties() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        y = (rng.random(400) < 0.1).astype(np.int64)
        p = np.round(rng.random(400) * 0.5 + y * rng.random(400) * 0.5, 1)  # many tied scores
        assert average_precision(y, p) == pytest.approx(average_precision_score(y, p), abs=1e-12)
    assert average_precision(np.zeros(5, dtype=np.int64), np.ones(5)) is None


@pytest.mark.parametrize(("events", "t", "expected"), [
    ([(0, 1), (100_000, 3)], 50_000, 1),               # fails within the horizon
    ([(0, 1), (100_000, 4)], 50_000, 0),               # finishes: not a failure
    ([(0, 1), (100_000, 5)], 50_000, 0),               # killed: outside the failure set
    ([(0, 1), (400_000, 3)], 50_000, 0),               # fails after the horizon
    ([(0, 1)], 50_000, 0),                             # still running at t + H
    ([(0, 1), (100_000, 0)], 50_000, None),            # SUBMIT first: terminal record lost (censored)
    ([(0, 1), (50_000, 3)], 50_000, None),             # the stage's final 0 after the run stopped
    ([(0, 0)], 10_000, None),                          # pending, not running
    ([(100_000, 3)], 50_000, 1),                       # started before the stage saw it: running
])
def test_labels_follow_the_offline_definition(events: list[tuple[int, int]], t: int, expected: int | None) -> None:
    assert outcome(events, t, H5, FAIL) == expected


def test_card_reference_reads_the_shipped_failure_card() -> None:
    version = (ROOT / "models" / "failure" / "CURRENT").read_text().strip()
    raw = json.loads((ROOT / "models" / "failure" / version / "model_card.json").read_text())
    ref = concept_reference(raw, version)
    assert isinstance(ref, ConceptReference)
    assert [h.horizon_s for h in ref.horizons] == [300, 900, 3600] and ref.failure_types == FAIL
    assert all(h.aucpr is not None and h.brier is not None and h.positive_rate for h in ref.horizons)
    assert isinstance(concept_reference({"version": "x"}, "x"), str)


def test_predictions_mature_only_after_horizon_and_grace() -> None:
    tracker = ConceptTracker(reference(), CONFIG)
    tracker.add_event("a", START_MS, 1)
    assert tracker.add_prediction("a", START_MS, [0.5, 0.5, 0.5])
    assert not tracker.add_prediction("a", START_MS, [0.5, 0.5, 0.5])  # re-delivered: counted once
    tracker.add_event("b", START_MS + H5 + 9_000, 7)  # the watermark moves with any task event
    assert tracker.mature() == 0
    tracker.add_event("b", START_MS + H5 + 10_000, 7)
    assert tracker.mature() == 1  # the 5-minute horizon only
    tracker.add_event("b", START_MS + 3_600_000 + 10_000, 7)
    assert tracker.mature() == 2 and not tracker.tasks["a"].pending
    assert [len(tracker.pairs(k)[0]) for k in range(3)] == [1, 1, 1]


def test_agreeing_labels_are_no_drift_and_contradicting_ones_are_drift() -> None:
    calm, wrong = ConceptTracker(reference(), CONFIG), ConceptTracker(reference(), CONFIG)
    feed(calm, tasks=1500, agree=True, seed=1)
    feed(wrong, tasks=1500, agree=False, seed=1)
    good, bad = calm.evaluate(), wrong.evaluate()
    h5 = good.horizons[0]
    assert h5.status == "no_drift" and h5.labels > 1000 and h5.aucpr is not None and h5.aucpr > 0.4, good.reasons
    assert good.status == "no_drift", good.reasons
    assert bad.status == "drift" and bad.horizons[0].status == "drift", bad.reasons
    assert "AUCPR skill" in bad.reasons[0] or "Brier skill" in bad.reasons[0]
    # the longer horizons have not matured yet: no claim there
    assert good.horizons[2].status == "insufficient_data" and good.horizons[2].labels == 0


def test_too_few_labels_or_failures_make_no_claim() -> None:
    tracker = ConceptTracker(reference(), CONFIG)
    feed(tracker, tasks=200, agree=False, seed=2)
    verdict = tracker.evaluate()
    assert verdict.status == "insufficient_data" and "a claim needs 300" in verdict.reasons[0]


def test_old_labels_leave_the_window() -> None:
    tracker = ConceptTracker(reference(), ConceptConfig(window_ms=600_000, grace_ms=10_000, sample_gap_ms=0,
                                                        min_labels=300, min_positives=10))
    feed(tracker, tasks=1200, agree=False, seed=3, tail_s=0)
    feed(tracker, tasks=1200, agree=True, seed=4, t0_s=1200, prefix="u")
    verdict = tracker.evaluate()
    assert verdict.horizons[0].status == "no_drift", verdict.reasons  # the contradicted half left the window


def test_state_round_trips_through_the_changelog_values() -> None:
    config = ConceptConfig(window_ms=3_600_000, grace_ms=10_000, sample_gap_ms=0, min_labels=300, min_positives=10)
    state = ConceptState(bootstrap="unused", topic="t", sink=None, replication=1, config=config)  # type: ignore[arg-type]
    ref = reference()
    tracker = state.follow(ref)
    assert tracker is not None
    feed(tracker, tasks=1200, agree=False, seed=5, tail_s=60)
    state.persist()
    before = tracker.evaluate()
    assert before.pending > 0 and before.horizons[0].labels > 0
    # a new process: the table as the changelog restore leaves it
    again = ConceptState(bootstrap="unused", topic="t", sink=None, replication=1, config=config)  # type: ignore[arg-type]
    again.table.data = dict(state.table.data)
    restored = again.follow(ref)
    assert restored is not None
    after = restored.evaluate()
    assert after.pending == before.pending and [h.labels for h in after.horizons] == [h.labels for h in
                                                                                      before.horizons]
    assert [h.aucpr for h in after.horizons] == [h.aucpr for h in before.horizons]
    # and it keeps maturing where the old one left off
    for t in (tracker, restored):
        t.add_event("clock", START_MS + 1200 * 1000 + H5 + 20_000, 7)
        t.mature()
    assert [h.labels for h in restored.evaluate().horizons] == [h.labels for h in tracker.evaluate().horizons]
    # another model version does not inherit the labels
    other = ConceptState(bootstrap="unused", topic="t", sink=None, replication=1, config=config)  # type: ignore[arg-type]
    other.table.data = dict(state.table.data)
    fresh = other.follow(ConceptReference("f2", ref.horizons, ref.failure_types))
    assert fresh is not None and not fresh.tasks and not fresh.buckets
    assert all(orjson.loads(v) is not None for v in state.table.data.values())


async def test_processor_publishes_concept_figures_in_drift_v1(tmp_path: Path) -> None:
    from services.drift.processor import DriftProcessor, load_failure_reference, load_regime_reference
    from services.drift.settings import DriftSettings
    from services.runtime.model_watch import ModelWatcher

    version = tmp_path / "failure" / "f1"
    version.mkdir(parents=True)
    (tmp_path / "failure" / "CURRENT").write_text("f1\n")
    (version / "model_card.json").write_text(json.dumps(card()))
    settings = DriftSettings(report_every_s=30, concept_sample_s=0, concept_min_labels=300, concept_grace_s=10)
    failure = ModelWatcher("f", tmp_path / "failure", load_failure_reference)
    sent: list[Any] = []

    class Sink:
        async def send(self, topic: str, key: str, value: Any, ctx: Any) -> None:
            sent.append(value)

        async def dead_letter(self, event: Any, error: str, kind: str) -> None:
            raise AssertionError(error)

    processor = DriftProcessor(settings, Sink(), ModelWatcher("r", ROOT / "models" / "regime",  # type: ignore[arg-type]
                                                              load_regime_reference), failure)
    assert processor.stream.state == [processor.concept]
    t = traffic(tasks=1500, agree=False, version="f1", seed=6)
    msgs = [(e.ts_ms, "taskevents.v1", e) for e in t.events] + [(r.ts_ms, "risk.v2", r) for r in t.risks]
    batch: dict[_Tp, list[Msg]] = {}
    first = 0
    for i, (ts, topic, item) in enumerate(sorted(msgs, key=lambda m: (m[0], m[1]))):
        if ts - first >= 10_000 and batch:  # batches of 10 s of traffic
            await processor._handle(batch)  # type: ignore[arg-type]
            batch, first = {}, ts
        batch.setdefault(_Tp(topic), []).append(Msg(topic, 0, i, None, encode(item), [], 0.0))
    await processor._handle(batch)  # type: ignore[arg-type]
    reports = [decode(DriftReport, encode(r)) for r in sent if r.model == "failure"]
    assert reports and reports[0].concept_status == "insufficient_data"
    last = reports[-1]
    assert last.concept_status == "drift" and last.status == "drift", last.reasons
    assert last.concept[0].horizon_s == 300 and last.concept[0].labels >= 300 and last.concept[0].aucpr is not None
    assert last.concept[0].reference_aucpr == 0.5 and any("concept" in r for r in last.reasons)
    assert processor.concept.table.pending  # state changes queued for the changelog


class _Tp:
    def __init__(self, topic: str) -> None:
        self.topic = topic

    def __hash__(self) -> int:
        return hash(self.topic)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Tp) and other.topic == self.topic


def test_matured_labels_are_bounded_by_dropping_the_oldest_minutes() -> None:
    tracker = ConceptTracker(reference(), ConceptConfig(window_ms=3_600_000, grace_ms=10_000, sample_gap_ms=0,
                                                        min_labels=300, min_positives=10, max_labels=500))
    feed(tracker, tasks=1200, agree=True, seed=7)
    assert tracker.matured == sum(len(b) for b in tracker.buckets.values())
    assert 400 <= tracker.matured <= 500 + 60  # at most one minute's worth over the cap before it is trimmed
    kept = min(t for b in tracker.buckets.values() for (_, t, _, _) in b)
    assert kept > START_MS + 500_000  # the oldest predictions left first
